package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Member is where one server process of a store lives: its name, data dir
// and client URL, and for a member of a raft cluster (kite's raftsql
// mode, or an etcd cluster) its peer URL and the cluster it bootstraps
// with. The command lines of argv.go are made from it.
type Member struct {
	Name, DataDir, ClientURL string
	PeerURL, InitialCluster  string // raft members only
	Token                    string // raft members only: the cluster's own token
}

// ClusterSpec says how to start the server processes of one store.
type ClusterSpec struct {
	// Name names the store; its servers are Name, or Name-0, Name-1, ...
	// when there are several.
	Name string
	// Argv is a server's command line.
	Argv func(Member) []string
	// Servers is how many processes serve one store that is not theirs
	// (kite or kine servers sharing a database); 0 means 1.
	Servers int
	// Members, when above 0, makes the store a raft cluster of that many
	// members, each with its own data dir, client and peer port,
	// bootstrapped together; Servers is then not used.
	Members int
	// Env is added to every server's environment (a database's DSN, which
	// must not show in a process listing); Secret (its password) is
	// masked in their log tails.
	Env    []string
	Secret string
	// DirPrefix starts the name of every server's temporary directory
	// (under WorkDir, "" for the system's); TokenPrefix the raft
	// cluster's token, which gets a random part so that no member of
	// another run can ever join.
	WorkDir, DirPrefix, TokenPrefix string
	// StartupWait is how long a server may take to answer.
	StartupWait time.Duration
	// Keep leaves the directories of a cluster that failed to start, for
	// their logs.
	Keep bool
}

// Cluster is the server processes of one store: one, several on one
// database, or the members of a raft cluster.
type Cluster struct {
	Name    string
	Servers []*ToolServer
}

// StartCluster starts spec's servers on free loopback ports and waits
// until every one answers. A raft cluster's members are all started
// before any is waited for: none serves before a quorum of them runs.
func StartCluster(ctx context.Context, log *slog.Logger, spec ClusterSpec) (*Cluster, error) {
	c := &Cluster{Name: spec.Name}
	err := c.start(ctx, log, spec)
	if err != nil {
		c.Halt()
		if !spec.Keep {
			c.Remove()
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, log *slog.Logger, spec ClusterSpec) error {
	// A raft member has a client and a peer port, any other server a
	// client port: server i's are ports[stride*i:].
	n, raft, stride := max(spec.Servers, 1), spec.Members > 0, 1
	if raft {
		n, stride = spec.Members, 2
	}
	ports, err := FreePorts(stride * n)
	if err != nil {
		return err
	}
	var token string
	if raft {
		var id [4]byte
		if _, err := rand.Read(id[:]); err != nil {
			return fmt.Errorf("random cluster token: %w", err)
		}
		token = spec.TokenPrefix + spec.Name + "-" + hex.EncodeToString(id[:])
	}
	members := make([]Member, n)
	var peers []string
	for i := range n {
		name := spec.Name
		if n > 1 || raft {
			name = fmt.Sprintf("%s-%d", spec.Name, i)
		}
		s, err := NewToolServer(log, spec.WorkDir, spec.DirPrefix, name, ports[stride*i])
		if err != nil {
			return err
		}
		s.Env, s.Secret = spec.Env, spec.Secret
		c.Servers = append(c.Servers, s)
		members[i] = Member{Name: name, DataDir: s.DataDir(), ClientURL: s.Endpoint}
		if raft {
			members[i].PeerURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[stride*i+1]))
			members[i].Token = token
			peers = append(peers, name+"="+members[i].PeerURL)
		}
	}
	for i, s := range c.Servers {
		members[i].InitialCluster = strings.Join(peers, ",")
		s.Argv = spec.Argv(members[i])
		if err := s.Start(); err != nil {
			return err
		}
		if !raft {
			if err := s.WaitReady(ctx, spec.StartupWait); err != nil {
				return err
			}
		}
	}
	if raft {
		for _, s := range c.Servers {
			if err := s.WaitReady(ctx, spec.StartupWait); err != nil {
				return err
			}
		}
	}
	return nil
}

// Endpoints is every server's client URL.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		eps[i] = s.Endpoint
	}
	return eps
}

// Names is every server's name, in the order of Servers.
func (c *Cluster) Names() []string {
	names := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		names[i] = s.Name
	}
	return names
}

// Exited names every server that is no longer running, with the line of
// its log that says why, or is nil; the end of each such log is logged
// once (ToolServer.LoggedExitErr).
func (c *Cluster) Exited() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.LoggedExitErr())
	}
	return errors.Join(errs...)
}

// Restarted names the servers that were started more than once.
func (c *Cluster) Restarted() []string {
	var names []string
	for _, s := range c.Servers {
		if s.Starts() > 1 {
			names = append(names, s.Name)
		}
	}
	return names
}

// RestartExited starts again, on the same data dir, port and database,
// every server that has exited, and waits until each answers.
func (c *Cluster) RestartExited(ctx context.Context, timeout time.Duration) error {
	for _, s := range c.Servers {
		select {
		case <-s.Exited():
		default:
			continue
		}
		s.log.Warn("restarting server that exited", "server", s.Name, "error", s.Err())
		if err := s.Launch(ctx, timeout); err != nil {
			return fmt.Errorf("restart %s: %w", s.Name, err)
		}
	}
	return nil
}

// Halt stops every server (ToolServer.Halt) and keeps their directories.
func (c *Cluster) Halt() {
	for _, s := range c.Servers {
		s.Halt()
	}
}

// Remove deletes every server's directory.
func (c *Cluster) Remove() {
	for _, s := range c.Servers {
		s.Remove()
	}
}

// Stop halts every server and removes its directory.
func (c *Cluster) Stop() {
	c.Halt()
	c.Remove()
}
