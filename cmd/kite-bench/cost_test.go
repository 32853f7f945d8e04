package main

import (
	"reflect"
	"testing"
)

// TestCostBetween: the cost of a workload is the counters' growth over its
// operations, the leader apart; a server started again in between (its
// counters restarted) leaves the CPU and syncs out, a leader change the
// leader's shares and the raft entries.
func TestCostBetween(t *testing.T) {
	names := []string{"kite-0", "kite-1", "kite-2"}
	before := costSample{pids: []int{10, 11, 12}, cpu: []float64{1, 2, 3}, walSyncs: []float64{5, 5, 5}, commits: []float64{0, 0, 0}, leader: 1, raftIndex: 100}
	after := costSample{pids: []int{10, 11, 12}, cpu: []float64{2, 4, 4}, walSyncs: []float64{105, 105, 105}, commits: []float64{50, 50, 50}, leader: 1, raftIndex: 700}
	got := costBetween(before, after, names, 1000)
	want := cost{CPUSeconds: 4, CPUNodesSeconds: []float64{1, 2, 1}, CPUPer1kOps: 4, LeaderCPUPer1kOps: 2, FollowersCPUPer1kOps: 2,
		Leader: "kite-1", WALSyncsPerOp: 0.3, LeaderWALSyncsPerOp: 0.1, CommitsPerOp: 0.15, RaftEntriesPerOp: 0.6}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cost = %+v, want %+v", got, want)
	}

	moved := after
	moved.leader = 2
	got = costBetween(before, moved, names, 1000)
	if got.Leader != "" || got.LeaderCPUPer1kOps != 0 || got.RaftEntriesPerOp != 0 || got.CPUPer1kOps != 4 || got.WALSyncsPerOp != 0.3 {
		t.Errorf("after a leader change: cost = %+v, want the totals only", got)
	}

	restarted := after
	restarted.pids = []int{10, 13, 12}
	if got := costBetween(before, restarted, names, 1000); !reflect.DeepEqual(got, cost{}) {
		t.Errorf("after a restart: cost = %+v, want nothing", got)
	}

	unread := after
	unread.cpu, unread.walSyncs, unread.commits = nil, nil, nil
	if got := costBetween(before, unread, names, 1000); got.CPUSeconds != 0 || got.WALSyncsPerOp != 0 || got.RaftEntriesPerOp != 0.6 {
		t.Errorf("counters not read: cost = %+v, want only the raft entries", got)
	}
}
