package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/internal/latency"
	"github.com/kite-db/kite/internal/testenv"
)

// The failover workload (raftsql mode, --members 3 or more): the leader of
// the cluster is killed with SIGKILL, as a crash or a power cut would end
// it, --failovers times. For each kill it measures, from the kill:
//
//   - write: until a put through a surviving member is acknowledged, which
//     is what a client (kube-apiserver) waits for;
//   - leader: until every survivor names the same new leader in its
//     Maintenance Status;
//
// and, once the killed member is started again on its data dir,
//
//   - rejoin: from its start until it serves and has applied a write made
//     through the new leader after the start (it caught up).
//
// Each round waits for the rejoin, so every kill finds a full cluster. The
// cluster is otherwise idle: the numbers are raft's election and the
// server's recovery, not a queue of requests behind them.

const (
	// writeProbeInterval is how often each survivor is sent a new write
	// attempt after the kill. Attempts overlap: one stuck on the dead
	// leader does not delay the next, so the first acknowledgement comes
	// within this interval of the cluster being able to write.
	writeProbeInterval = 10 * time.Millisecond
	// writeAttemptTimeout bounds one attempt; a later one is already on
	// its way.
	writeAttemptTimeout = 2 * time.Second
	// recoveryTimeout is how long a cluster may take to write again, agree
	// on a leader, or catch a restarted member up before the round fails.
	recoveryTimeout = time.Minute
)

// failoverStats is the failover workload's measurements, one entry per
// round, in milliseconds.
type failoverStats struct {
	Killed   []string  `json:"killed"`    // the leader killed in each round
	WriteMs  []float64 `json:"write_ms"`  // kill to the first acknowledged write through a survivor
	LeaderMs []float64 `json:"leader_ms"` // kill to the survivors' agreement on a new leader
	RejoinMs []float64 `json:"rejoin_ms"` // restart of the killed member to its serving, caught up
}

// failoverRound is one kill's measurements.
type failoverRound struct {
	killed                string
	write, leader, rejoin time.Duration
}

// runFailover kills the leader --failovers times; its latency columns are
// the write times.
func runFailover(ctx context.Context, e *env, s spec) (result, error) {
	c := e.t.cl
	if c == nil || c.kind.members < 3 {
		return result{}, errors.New("failover needs a raft cluster of 3 or more members that this run started (--compare --datastore raftsql --members 3)")
	}
	mc, err := newMemberClients(c)
	if err != nil {
		return result{}, err
	}
	defer mc.close()
	stats := &failoverStats{}
	var hist latency.Histogram
	begin := time.Now()
	for round := range e.cfg.failovers {
		fr, err := runFailoverRound(ctx, e, mc, s, round)
		if err != nil {
			return result{}, fmt.Errorf("round %d of %d: %w", round+1, e.cfg.failovers, err)
		}
		e.log.Info("failover", "target", e.t.name, "round", round+1, "killed", fr.killed,
			"write", fr.write.Round(time.Millisecond), "leader", fr.leader.Round(time.Millisecond), "rejoin", fr.rejoin.Round(time.Millisecond))
		stats.Killed = append(stats.Killed, fr.killed)
		stats.WriteMs = append(stats.WriteMs, testenv.Round3(latency.Ms(fr.write)))
		stats.LeaderMs = append(stats.LeaderMs, testenv.Round3(latency.Ms(fr.leader)))
		stats.RejoinMs = append(stats.RejoinMs, testenv.Round3(latency.Ms(fr.rejoin)))
		hist.Record(fr.write)
	}
	elapsed := time.Since(begin)
	// The workload connections to a killed member wait in gRPC's reconnect
	// backoff; the next workload must not pay for that.
	if err := reconnectTarget(ctx, e.t); err != nil {
		return result{}, err
	}
	r := newResult(e.t.name, s, int64(e.cfg.failovers), elapsed, &hist, 0)
	r.Failover = stats
	// The memory read after this workload is of restarted processes, which
	// have not yet grown back to what the workloads before left behind.
	r.Note = "killed and restarted " + strings.Join(stats.Killed, ", ") + "; its RSS is of those restarted processes, not comparable with the rows before"
	return r, nil
}

// runFailoverRound kills the current leader, times the recovery, restarts
// the killed member and waits until it has caught up.
func runFailoverRound(ctx context.Context, e *env, mc *memberClients, s spec, round int) (failoverRound, error) {
	c := mc.c
	leader, leaderID, err := mc.waitLeader(ctx, c.all(), 0, recoveryTimeout)
	if err != nil {
		return failoverRound{}, err
	}
	victim := c.Servers[leader]
	var survivors []int
	for _, i := range c.all() {
		if i != leader {
			survivors = append(survivors, i)
		}
	}
	fr := failoverRound{killed: victim.Name}
	prefix := fmt.Sprintf("%sround-%d/", e.prefix(s.label), round)

	killedAt := time.Now()
	victim.Kill()
	var wg sync.WaitGroup
	var writeErr, leaderErr error
	var newLeader int
	wg.Go(func() {
		fr.write, writeErr = firstWrite(ctx, mc, survivors, prefix, killedAt)
	})
	wg.Go(func() {
		newLeader, _, leaderErr = mc.waitLeader(ctx, survivors, leaderID, recoveryTimeout)
		fr.leader = time.Since(killedAt)
	})
	wg.Wait()
	if err := errors.Join(writeErr, leaderErr); err != nil {
		return fr, fmt.Errorf("after killing the leader %s: %w", victim.Name, err)
	}

	// Started, not launched: launch's readiness poll waits out gRPC's
	// reconnect backoff (a second) and would hide the member's own time.
	restartAt := time.Now()
	if err := victim.Start(); err != nil {
		return fr, fmt.Errorf("restart %s: %w", victim.Name, err)
	}
	if err := mc.reconnect(leader); err != nil {
		return fr, err
	}
	if err := caughtUp(ctx, mc, leader, newLeader, prefix+"caught-up", e.cfg.StartupWait); err != nil {
		return fr, fmt.Errorf("%s after its restart: %w", victim.Name, err)
	}
	fr.rejoin = time.Since(restartAt)
	return fr, nil
}

// firstWrite sends a put through every member of idx, a new attempt every
// writeProbeInterval on each, until one is acknowledged, and returns the
// time from since to that acknowledgement.
func firstWrite(ctx context.Context, mc *memberClients, idx []int, prefix string, since time.Time) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	var first atomic.Int64 // nanoseconds since since; 0 until a write succeeded
	var lastErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for _, i := range idx {
		cli := mc.clis[i]
		wg.Go(func() {
			tick := time.NewTicker(writeProbeInterval)
			defer tick.Stop()
			for n := 0; ; n++ {
				wg.Go(func() {
					actx, acancel := context.WithTimeout(ctx, writeAttemptTimeout)
					defer acancel()
					_, err := cli.Put(actx, fmt.Sprintf("%sm%d/%d", prefix, i, n), "x")
					if err != nil {
						lastErr.Store(&err)
						return
					}
					if first.CompareAndSwap(0, int64(time.Since(since))) {
						cancel()
					}
				})
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
	if d := first.Load(); d > 0 {
		return time.Duration(d), nil
	}
	err := ctx.Err()
	if p := lastErr.Load(); p != nil {
		err = *p
	}
	return 0, fmt.Errorf("no write through the %d survivors succeeded within %s: %w", len(idx), recoveryTimeout, err)
}

// caughtUp waits, within timeout, until the restarted member serves,
// names the same leader as the others and has applied a write made through
// the leader after its restart: a serializable read on it (its own state,
// no round trip to the leader) sees that write's revision.
func caughtUp(ctx context.Context, mc *memberClients, restarted, leader int, key string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	put, err := mc.clis[leader].Put(ctx, key, "x")
	if err != nil {
		return fmt.Errorf("write through the new leader %s: %w", mc.c.Servers[leader].Name, err)
	}
	want := put.Header.Revision
	p := mc.c.Servers[restarted]
	for {
		select {
		case <-p.Exited():
			return fmt.Errorf("exited while starting (%v); its log ends:\n%s", p.Err(), p.LogTail())
		default:
		}
		// Until the member listens, each refused dial puts its connection
		// in gRPC's reconnect backoff; the next poll must dial at once.
		mc.clis[restarted].ActiveConnection().ResetConnectBackoff()
		// The leader may change meanwhile (a restarted member can win an
		// election); all members agreeing on any leader is what counts.
		_, _, err := mc.agreed(ctx, mc.c.all(), 0)
		if err == nil {
			actx, acancel := context.WithTimeout(ctx, statusTimeout)
			var g *clientv3.GetResponse
			g, err = mc.clis[restarted].Get(actx, key, clientv3.WithSerializable())
			acancel()
			if err == nil && g.Header.Revision < want {
				err = fmt.Errorf("at revision %d, want %d", g.Header.Revision, want)
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not caught up after %s: %w; its log ends:\n%s", timeout, err, p.LogTail())
		case <-time.After(leaderPoll):
		}
	}
}

// reconnectTarget ends the reconnect backoff of every workload connection
// and waits until each answers (a serializable read, served locally).
func reconnectTarget(ctx context.Context, t *target) error {
	ctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	for i, c := range t.conns {
		c.ActiveConnection().ResetConnectBackoff()
		if _, err := c.Get(ctx, "/kite-bench/reconnect", clientv3.WithSerializable()); err != nil {
			return fmt.Errorf("connection %d to %s after the failovers: %w", i, t.cl.Servers[t.server[i]].Name, err)
		}
	}
	return nil
}

// hasFailover reports whether any result is a failover's.
func hasFailover(results []result) bool {
	return slices.ContainsFunc(results, func(r result) bool { return r.Failover != nil })
}

// writeFailover prints, per failover workload, the median and largest of
// each measure for den and num, and num's over den's.
func writeFailover(w io.Writer, results []result, num, den string) error {
	byKey := map[[2]string]result{}
	var order []string
	for _, r := range results {
		if r.Failover == nil {
			continue
		}
		if !slices.Contains(order, r.Workload) {
			order = append(order, r.Workload)
		}
		byKey[[2]string{r.Target, r.Workload}] = r
	}
	fmt.Fprintln(w, "failover: from kill -9 of the leader (write: a put through a survivor acknowledged; leader: the survivors agree on a new one), and from the killed member's restart to its serving, caught up (rejoin); ms")
	tw := testenv.NewTable(w)
	tw.Rowf("workload\ttarget\trounds\twrite median\twrite max\tleader median\tleader max\trejoin median\trejoin max\tkilled")
	for _, wl := range order {
		d, dok := byKey[[2]string{den, wl}]
		n, nok := byKey[[2]string{num, wl}]
		for _, r := range []result{d, n} {
			if f := r.Failover; f != nil {
				tw.Rowf("%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s", wl, r.Target, len(f.WriteMs),
					median(f.WriteMs), slices.Max(f.WriteMs), median(f.LeaderMs), slices.Max(f.LeaderMs),
					median(f.RejoinMs), slices.Max(f.RejoinMs), strings.Join(f.Killed, ","))
			}
		}
		if dok && nok {
			df, nf := d.Failover, n.Failover
			tw.Rowf("%s\t%s/%s\t\t%s\t%s\t%s\t%s\t%s\t%s\t", wl, num, den,
				testenv.Ratio(median(nf.WriteMs), median(df.WriteMs)), testenv.Ratio(slices.Max(nf.WriteMs), slices.Max(df.WriteMs)),
				testenv.Ratio(median(nf.LeaderMs), median(df.LeaderMs)), testenv.Ratio(slices.Max(nf.LeaderMs), slices.Max(df.LeaderMs)),
				testenv.Ratio(median(nf.RejoinMs), median(df.RejoinMs)), testenv.Ratio(slices.Max(nf.RejoinMs), slices.Max(df.RejoinMs)))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write failover table: %w", err)
	}
	return nil
}

// median is the middle value (the mean of the two middle ones for an even
// count), exact: with a handful of rounds the histogram's buckets would
// not be.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
