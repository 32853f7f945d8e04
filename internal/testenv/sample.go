package testenv

// What a load tool charges to a server: the CPU and the memory of its
// process, read from /proc (procstatus.go), per server of a cluster. A
// database server behind kite or kine is not counted: it is no process
// of the tool's.

// RSS is the server's resident memory now. The largest value read since
// its last start is kept for PeakRSS.
func (s *ToolServer) RSS() (int64, error) {
	b, err := StatusBytes(s.proc.Pid(), StatusRSS)
	if err != nil {
		return 0, err
	}
	for {
		seen := s.rssSeen.Load()
		if b <= seen || s.rssSeen.CompareAndSwap(seen, b) {
			return b, nil
		}
	}
}

// PeakRSS is the server's peak resident memory since its last start:
// VmHWM, or the largest RSS read before when that is more. The kernel's
// high-water mark is taken from approximate per-CPU counters and only
// when memory is unmapped, so it can come out a few hundred KiB below a
// VmRSS read earlier, and a peak must not be below what was seen.
func (s *ToolServer) PeakRSS() (int64, error) {
	b, err := StatusBytes(s.proc.Pid(), StatusPeakRSS)
	if err != nil {
		return 0, err
	}
	return max(b, s.rssSeen.Load()), nil
}

// CPUSeconds is the user and system CPU the server has used since its
// last start.
func (s *ToolServer) CPUSeconds() (float64, error) {
	return CPUSeconds(s.proc.Pid())
}

// RSS is each server's resident memory, in the order of Servers.
func (c *Cluster) RSS() ([]int64, error) { return each(c, (*ToolServer).RSS) }

// PeakRSS is each server's peak resident memory since its last start, in
// the order of Servers. Peaks of several processes need not coincide, so
// a sum of them is an upper bound, not a moment.
func (c *Cluster) PeakRSS() ([]int64, error) { return each(c, (*ToolServer).PeakRSS) }

// CPUSeconds is each server's CPU since its last start, in the order of
// Servers.
func (c *Cluster) CPUSeconds() ([]float64, error) { return each(c, (*ToolServer).CPUSeconds) }

// each reads one measure of every server; the first failure is the
// answer.
func each[T any](c *Cluster, read func(*ToolServer) (T, error)) ([]T, error) {
	out := make([]T, len(c.Servers))
	for i, s := range c.Servers {
		v, err := read(s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Sum adds up per-server measures.
func Sum[T int64 | float64](v []T) T {
	var sum T
	for _, x := range v {
		sum += x
	}
	return sum
}
