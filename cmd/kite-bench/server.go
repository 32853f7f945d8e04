package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/kite-db/kite/internal/testenv"
)

// serverKind says how to start one kind of server, and how many of it
// serve one store; testenv.StartCluster starts them.
type serverKind struct {
	name string
	argv func(m testenv.Member) []string
	// servers is how many processes serve one store (postgres and mysql
	// modes: kite and kine servers sharing one database); 0 means 1.
	servers int
	// members, when above 0, makes the kind a raft cluster of that many
	// members (raftsql mode), each a process with its own data dir, client
	// and peer port, bootstrapped together (testenv.StartCluster).
	members int
	// dbEnv, when set, gives every fresh start of this kind a fresh
	// database (Postgres or MySQL), whose DSN each server process finds in this
	// environment variable (so it never shows in a process listing).
	dbEnv string
	// partial marks a server that implements only part of the etcd API
	// (kine): a workload that fails on it is reported as unsupported, not
	// as a failure of the run.
	partial bool
}

// etcdKind re-executes this binary's hidden etcd-server subcommand: one
// process, or in raftsql mode (cfg.members) a cluster of that many.
func etcdKind(name string, cfg *config) (serverKind, error) {
	self, err := testenv.EtcdServerBinary()
	if err != nil {
		return serverKind{}, err
	}
	k := serverKind{name: name, argv: func(m testenv.Member) []string {
		argv := testenv.EtcdArgv(self, m)
		if cfg.quotaBackendBytes != 0 {
			argv = append(argv, "--quota-backend-bytes", strconv.FormatInt(cfg.quotaBackendBytes, 10))
		}
		return argv
	}}
	if cfg.datastore == datastoreRaftSQL {
		k.members = cfg.members
	}
	return k, nil
}

// kiteKind runs the kite binary with the flags issue 4 fixes. binary "etcd"
// stands a second reference etcd in for kite, which proves the tool on
// etcd-vs-etcd (every ratio should then be near 1). In postgres and mysql modes kite
// reads --datastore-endpoint from KITE_DATASTORE_ENDPOINT (kite fills any
// flag not on its command line from KITE_<FLAG>), and --kite-servers
// servers share the database. In raftsql mode each member is started
// with etcd's own clustering flags (testenv.KiteArgv).
func kiteKind(cfg *config) (serverKind, error) {
	if cfg.KiteBinary == "etcd" {
		return etcdKind("kite", cfg)
	}
	path, err := testenv.FindKite(cfg.KiteBinary)
	if err != nil {
		return serverKind{}, err
	}
	k := serverKind{name: "kite", servers: 1, argv: func(m testenv.Member) []string {
		if m.InitialCluster == "" {
			m.Name = "kite-bench" // a raft member keeps its name in --initial-cluster
		}
		argv := testenv.KiteArgv(path, m)
		if cfg.profile != nil {
			argv = append(argv, "--enable-pprof")
		}
		if cfg.quotaBackendBytes != 0 {
			// The same quota as the reference's: kite's flag is etcd's.
			argv = append(argv, "--quota-backend-bytes", strconv.FormatInt(cfg.quotaBackendBytes, 10))
		}
		return argv
	}}
	switch cfg.datastore {
	case datastorePostgres, datastoreMySQL:
		k.servers = cfg.kiteServers
		k.dbEnv = "KITE_DATASTORE_ENDPOINT"
	case datastoreRaftSQL:
		k.members = cfg.members
	}
	return k, nil
}

// cluster is the servers of one kind that share one store: one process,
// in postgres and mysql modes several on one database, in raftsql mode the members
// of a raft cluster.
type cluster struct {
	kind serverKind
	*testenv.Cluster
}

// startCluster starts kind's servers, on a fresh database when kind needs
// one (created on db, dropped by db.DropAll at the end of the run); a raft
// cluster is started when all its members name one leader.
func startCluster(ctx context.Context, cfg *config, log *slog.Logger, kind serverKind, db testenv.Databases) (*cluster, error) {
	spec := testenv.ClusterSpec{
		Name: kind.name, Argv: kind.argv, Servers: kind.servers, Members: kind.members,
		WorkDir: cfg.WorkDir, DirPrefix: "kite-bench-", TokenPrefix: "kite-bench-",
		StartupWait: cfg.StartupWait,
	}
	if kind.dbEnv != "" {
		if db == nil {
			return nil, fmt.Errorf("%s needs a database server (--datastore postgres or mysql)", kind.name)
		}
		d, err := db.Create(ctx, kind.name)
		if err != nil {
			return nil, err
		}
		spec.Env, spec.Secret = []string{kind.dbEnv + "=" + d.DSN}, d.Password
	}
	tc, err := testenv.StartCluster(ctx, log, spec)
	if err != nil {
		return nil, err
	}
	c := &cluster{kind: kind, Cluster: tc}
	if kind.members > 0 {
		if err := waitRaftCluster(ctx, cfg, log, c); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}
