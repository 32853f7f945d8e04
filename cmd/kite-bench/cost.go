package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kite-db/kite/internal/testenv"
)

// What one operation costs the servers. With three raft members and the
// load generator on two cores, a cluster's throughput is bounded by the
// CPU all its members spend per acknowledged write, so that is measured
// beside every workload of --compare: the CPU of each server process
// (user + system, from /proc), the leader apart from the followers, the
// WAL syncs the servers made (etcd's etcd_disk_wal_fsync_duration_seconds
// count, which kite exports too) and the entries the leader's raft log
// grew by, each over the operations the workload acknowledged.

// walSyncsMetric counts a server's WAL fsyncs: etcd's raft WAL, a raftsql
// member's (etcd's wal package), a single kite server's SQLite commits.
// commitsMetric counts its backend's commits: etcd's bbolt batches (every
// 100 ms or 10,000 writes), kite's SQLite or database transactions.
const (
	walSyncsMetric = "etcd_disk_wal_fsync_duration_seconds_count"
	commitsMetric  = "etcd_disk_backend_commit_duration_seconds_count"
)

// costTimeout bounds one sample's Status and /metrics calls.
const costTimeout = 5 * time.Second

// cost is what the servers spent on one workload; the fields are part of
// the JSON line (result embeds it) and are left out when not measured.
type cost struct {
	// CPUSeconds is the CPU all the target's servers used during the
	// workload, CPUNodesSeconds each one's (in the order of their names).
	CPUSeconds      float64   `json:"cpu_seconds,omitempty"`
	CPUNodesSeconds []float64 `json:"cpu_nodes_seconds,omitempty"`
	// CPUPer1kOps is CPUSeconds per 1,000 operations; in a raft cluster
	// LeaderCPUPer1kOps is the leader's share and FollowersCPUPer1kOps the
	// other members' together.
	CPUPer1kOps          float64 `json:"cpu_s_per_1k_ops,omitempty"`
	LeaderCPUPer1kOps    float64 `json:"leader_cpu_s_per_1k_ops,omitempty"`
	FollowersCPUPer1kOps float64 `json:"followers_cpu_s_per_1k_ops,omitempty"`
	// Leader names the raft leader, the same before and after the workload.
	Leader string `json:"leader,omitempty"`
	// WALSyncsPerOp is the WAL syncs of all servers per operation,
	// LeaderWALSyncsPerOp the leader's.
	WALSyncsPerOp       float64 `json:"wal_syncs_per_op,omitempty"`
	LeaderWALSyncsPerOp float64 `json:"leader_wal_syncs_per_op,omitempty"`
	// CommitsPerOp is the backend commits of all servers per operation.
	CommitsPerOp float64 `json:"backend_commits_per_op,omitempty"`
	// RaftEntriesPerOp is how many entries the leader's log grew by per
	// operation: below 1 when several requests share an entry.
	RaftEntriesPerOp float64 `json:"raft_entries_per_op,omitempty"`
}

// costSample is the counters of a target's servers at one moment. A field
// that could not be read is nil (or -1 for the leader), and a cost derived
// from it is left out.
type costSample struct {
	pids      []int
	cpu       []float64 // seconds
	walSyncs  []float64
	commits   []float64
	leader    int // index in the cluster's servers
	raftIndex uint64
}

// sampleCost reads the counters of t's servers. Failures are logged and
// leave their fields out: a cost the benchmark cannot measure does not
// fail the run.
func sampleCost(ctx context.Context, t *target, log *slog.Logger) costSample {
	s := costSample{leader: -1}
	procs := t.cl.Servers
	pids, cpu := make([]int, len(procs)), make([]float64, len(procs))
	for i, p := range procs {
		pids[i] = p.Process().Pid()
		c, err := p.CPUSeconds()
		if err != nil {
			log.Warn("cost: CPU not measured", "server", p.Name, "error", err)
			cpu = nil
			break
		}
		cpu[i] = c
	}
	s.pids, s.cpu = pids, cpu
	syncs, commits := make([]float64, len(procs)), make([]float64, len(procs))
	for i, p := range procs {
		v, err := scrapeCounters(ctx, p.Endpoint, walSyncsMetric, commitsMetric)
		if err != nil {
			log.Warn("cost: metrics not read", "server", p.Name, "error", err)
			syncs, commits = nil, nil
			break
		}
		var ok bool
		if syncs != nil {
			if syncs[i], ok = v[walSyncsMetric]; !ok {
				log.Debug("cost: WAL syncs not measured", "server", p.Name)
				syncs = nil
			}
		}
		if commits != nil {
			if commits[i], ok = v[commitsMetric]; !ok {
				log.Debug("cost: backend commits not measured", "server", p.Name)
				commits = nil
			}
		}
	}
	s.walSyncs, s.commits = syncs, commits
	if t.cl.kind.members > 0 {
		s.leader, s.raftIndex = leaderIndex(ctx, t, log)
	}
	return s
}

// leaderIndex finds the raft leader among t's members and its log index.
func leaderIndex(ctx context.Context, t *target, log *slog.Logger) (int, uint64) {
	if t.members == nil {
		m, err := newMemberClients(t.cl)
		if err != nil {
			log.Warn("cost: no clients to find the leader", "target", t.name, "error", err)
			return -1, 0
		}
		t.members = m
	}
	ctx, cancel := context.WithTimeout(ctx, costTimeout)
	defer cancel()
	_, at, err := t.members.agreed(ctx, t.cl.all(), 0)
	if err == nil && at < 0 {
		err = fmt.Errorf("the leader is none of the members")
	}
	if err != nil {
		log.Warn("cost: leader not found", "target", t.name, "error", err)
		return -1, 0
	}
	st, err := t.members.status(ctx, at)
	if err != nil {
		log.Warn("cost: leader's raft index not read", "target", t.name, "error", err)
		return at, 0
	}
	return at, st.RaftIndex
}

// scrapeCounters reads unlabelled counters from a server's /metrics; a
// counter the server does not export is absent from the answer.
func scrapeCounters(ctx context.Context, endpoint string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, costTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", endpoint, resp.Status)
	}
	found := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		for _, name := range names {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return nil, fmt.Errorf("scrape %s: %s: %w", endpoint, name, err)
				}
				found[name] = f
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", endpoint, err)
	}
	return found, nil
}

// costBetween is what the servers (names, in the order of the samples)
// spent between two samples on ops operations. A server started again in between (its counters restarted)
// leaves the CPU out, a leader change the leader's shares and the entries.
func costBetween(before, after costSample, names []string, ops int64) cost {
	var c cost
	if ops <= 0 {
		return c
	}
	per := func(v float64) float64 { return testenv.Round3(v / float64(ops)) }
	restarted := len(before.pids) != len(after.pids)
	for i := range before.pids {
		restarted = restarted || before.pids[i] != after.pids[i]
	}
	leader := before.leader
	if leader != after.leader || restarted {
		leader = -1
	}
	if leader >= 0 {
		c.Leader = names[leader]
	}
	if before.cpu != nil && after.cpu != nil && !restarted {
		c.CPUNodesSeconds = make([]float64, len(after.cpu))
		var all, lead float64
		for i := range after.cpu {
			d := after.cpu[i] - before.cpu[i]
			c.CPUNodesSeconds[i] = testenv.Round3(d)
			all += d
			if i == leader {
				lead = d
			}
		}
		c.CPUSeconds = testenv.Round3(all)
		c.CPUPer1kOps = per(all * 1000)
		if leader >= 0 {
			c.LeaderCPUPer1kOps = per(lead * 1000)
			c.FollowersCPUPer1kOps = per((all - lead) * 1000)
		}
		if len(after.cpu) == 1 {
			c.CPUNodesSeconds = nil // the same as CPUSeconds
		}
	}
	if before.walSyncs != nil && after.walSyncs != nil && !restarted {
		var all float64
		for i := range after.walSyncs {
			d := after.walSyncs[i] - before.walSyncs[i]
			all += d
			if i == leader {
				c.LeaderWALSyncsPerOp = per(d)
			}
		}
		c.WALSyncsPerOp = per(all)
	}
	if before.commits != nil && after.commits != nil && !restarted {
		var all float64
		for i := range after.commits {
			all += after.commits[i] - before.commits[i]
		}
		c.CommitsPerOp = per(all)
	}
	if leader >= 0 && before.raftIndex > 0 && after.raftIndex > before.raftIndex {
		c.RaftEntriesPerOp = per(float64(after.raftIndex - before.raftIndex))
	}
	return c
}

// hasCost reports whether any result measured the servers' CPU.
func hasCost(results []result) bool {
	for _, r := range results {
		if r.CPUSeconds > 0 {
			return true
		}
	}
	return false
}

// writeCosts prints, per workload, what one operation cost num's servers
// and den's: CPU seconds per 1,000 operations (all servers; in a raft
// cluster the leader's and the followers' together apart), WAL syncs and
// raft entries per operation. A CPU ratio below 1 favours num.
func writeCosts(w io.Writer, results []result, num, den string) error {
	byKey := make(map[[2]string]result, len(results))
	var order []string
	for _, r := range results {
		if _, seen := byKey[[2]string{den, r.Workload}]; !seen && r.Target == den && r.CPUSeconds > 0 {
			order = append(order, r.Workload)
		}
		byKey[[2]string{r.Target, r.Workload}] = r
	}
	fmt.Fprintln(w, "what one operation costs the servers: CPU seconds per 1,000 operations (all servers; leader / the followers together); WAL syncs, backend commits (all servers) and raft entries per operation")
	tw := testenv.NewTable(w)
	tw.Rowf("workload\t%[1]s CPU\t%[2]s CPU\tCPU %[2]s/%[1]s\t%[1]s leader / followers\t%[2]s leader / followers\t%[1]s WAL syncs\t%[2]s WAL syncs\t%[1]s commits\t%[2]s commits\t%[1]s entries\t%[2]s entries", den, num)
	for _, wl := range order {
		d, n := byKey[[2]string{den, wl}], byKey[[2]string{num, wl}]
		tw.Rowf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", wl,
			costCell(d.CPUPer1kOps), costCell(n.CPUPer1kOps), testenv.Ratio(n.CPUPer1kOps, d.CPUPer1kOps),
			splitCell(d), splitCell(n),
			costCell(d.WALSyncsPerOp), costCell(n.WALSyncsPerOp),
			costCell(d.CommitsPerOp), costCell(n.CommitsPerOp),
			costCell(d.RaftEntriesPerOp), costCell(n.RaftEntriesPerOp))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write costs: %w", err)
	}
	return nil
}

func costCell(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// splitCell is "0.150 / 0.290": the leader's and the followers' CPU.
func splitCell(r result) string {
	if r.Leader == "" {
		return "-"
	}
	return costCell(r.LeaderCPUPer1kOps) + " / " + costCell(r.FollowersCPUPer1kOps)
}
