package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Raftsql mode: kite, and the reference etcd it is measured against, each
// run as a raft cluster of --members processes on this machine. Both are
// started the way an etcd cluster is bootstrapped (testenv.StartCluster):
// every member with the same --initial-cluster (name=peer URL of each),
// --initial-cluster-state new and a cluster token of its own, so that a
// member of one cluster can never join the other. The leader is whichever member the Maintenance
// Status RPC names (resp.Leader == resp.Header.MemberId on the leader).

// statusTimeout bounds one Status call while polling for a leader: a member
// that is down, or busy electing, must not stall the poll of the others.
const statusTimeout = 500 * time.Millisecond

// leaderPoll is how often waitLeader asks again. It is the resolution of
// failover's time to an agreed leader, so it is far below the election
// timeout (1 s); a Status on loopback costs well under a millisecond.
const leaderPoll = 10 * time.Millisecond

// waitRaftCluster waits until every member of c, all serving, names one
// leader.
func waitRaftCluster(ctx context.Context, cfg *config, log *slog.Logger, c *cluster) error {
	mc, err := newMemberClients(c)
	if err != nil {
		return err
	}
	defer mc.close()
	leader, _, err := mc.waitLeader(ctx, c.all(), 0, cfg.StartupWait)
	if err != nil {
		return fmt.Errorf("%s cluster of %d: %w", c.Name, len(c.Servers), err)
	}
	log.Info("raft cluster serving", "cluster", c.Name, "members", len(c.Servers), "leader", c.Servers[leader].Name)
	return nil
}

// all returns the index of every server of the cluster.
func (c *cluster) all() []int {
	idx := make([]int, len(c.Servers))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// memberClients holds one client per member of a raft cluster, each
// talking to that member only, to ask who leads and to write through a
// chosen member: the workload connections are spread round-robin and
// belong to the workloads.
type memberClients struct {
	c    *cluster
	clis []*clientv3.Client
}

func newMemberClients(c *cluster) (*memberClients, error) {
	m := &memberClients{c: c, clis: make([]*clientv3.Client, len(c.Servers))}
	for i := range c.Servers {
		if err := m.reconnect(i); err != nil {
			m.close()
			return nil, err
		}
	}
	return m, nil
}

// reconnect gives member i a fresh client. After the member was killed and
// started again, the old client's connection may sit in gRPC's reconnect
// backoff for seconds, which would be counted as the member's slowness.
func (m *memberClients) reconnect(i int) error {
	if m.clis[i] != nil {
		m.clis[i].Close()
		m.clis[i] = nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.c.Servers[i].Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("client for %s: %w", m.c.Servers[i].Name, err)
	}
	m.clis[i] = cli
	return nil
}

func (m *memberClients) close() {
	for _, c := range m.clis {
		if c != nil {
			c.Close()
		}
	}
}

// status asks member i for its Status on the client's own connection
// (clientv3's Status dials a new connection per call) and without the
// client's retries or wait for a connection: a member that is down must
// answer at once that it is.
func (m *memberClients) status(ctx context.Context, i int) (*pb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	resp, err := pb.NewMaintenanceClient(m.clis[i].ActiveConnection()).Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", m.c.Servers[i].Name, err)
	}
	return resp, nil
}

// agreed asks the members idx at once for their Status. When every one
// answers and all name the same leader, other than not (a member just
// killed; 0 for none), it returns that leader's member ID and its index in
// the cluster (-1 when the leader is not among idx); otherwise an error
// that says what is missing.
func (m *memberClients) agreed(ctx context.Context, idx []int, not uint64) (uint64, int, error) {
	resps := make([]*pb.StatusResponse, len(idx))
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Go(func() { resps[k], errs[k] = m.status(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, -1, err
	}
	leader, at := resps[0].Leader, -1
	for k, r := range resps {
		switch {
		case r.Leader == 0:
			return 0, -1, fmt.Errorf("%s knows no leader", m.c.Servers[idx[k]].Name)
		case r.Leader == not:
			return 0, -1, fmt.Errorf("%s still names the killed member %x its leader", m.c.Servers[idx[k]].Name, not)
		case r.Leader != leader:
			return 0, -1, fmt.Errorf("members name different leaders (%x, %x)", leader, r.Leader)
		}
		if r.Header.GetMemberId() == leader {
			at = idx[k]
		}
	}
	return leader, at, nil
}

// waitLeader polls the members idx until they agree on a leader other than
// not, within timeout, and returns its index and member ID.
func (m *memberClients) waitLeader(ctx context.Context, idx []int, not uint64, timeout time.Duration) (int, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		id, at, err := m.agreed(ctx, idx, not)
		if err == nil && at >= 0 {
			return at, id, nil
		}
		if err == nil {
			err = fmt.Errorf("the leader %x is none of the members asked", id)
		}
		select {
		case <-ctx.Done():
			return -1, 0, fmt.Errorf("no agreed leader after %s: %w", timeout, err)
		case <-time.After(leaderPoll):
		}
	}
}
