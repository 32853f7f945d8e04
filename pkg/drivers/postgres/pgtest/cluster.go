package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// NewCluster initialises and starts a Postgres server of the test's own on
// a free port, stopped and removed when t ends. It listens on 127.0.0.1
// and on each address of listen (an address the test gave a bridge, for
// kite servers in network namespaces), and trusts every connection from
// those addresses' /24 networks. Without the server binaries the test is
// skipped, except under CI=true, where it fails.
func NewCluster(t testing.TB, listen ...string) *Cluster {
	t.Helper()
	bin, dir := serverDir(t, "kite-pgcluster-")
	c := &Cluster{Dir: filepath.Join(dir, "data"), Port: freePort(t), bin: bin}
	c.run(t, "initdb", "-D", c.Dir, "-U", "postgres", "-A", "trust", "--no-sync", "--no-instructions")
	return c.start(t, listen)
}

// NewClusterIn is NewCluster with its data directory in parent (a small
// filesystem of the test's own), made to fit a few tens of MiB: the WAL
// in 1 MiB segments, at most 8 MiB of it between checkpoints.
func NewClusterIn(t testing.TB, parent string) *Cluster {
	t.Helper()
	bin := serverBin(t)
	c := &Cluster{Dir: filepath.Join(parent, "pgdata"), Port: freePort(t), bin: bin}
	if err := os.Mkdir(c.Dir, 0o700); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	chownToPostgres(t, parent) // the socket directory
	chownToPostgres(t, c.Dir)
	c.run(t, "initdb", "-D", c.Dir, "-U", "postgres", "-A", "trust", "--no-sync", "--no-instructions", "--wal-segsize=1")
	c.configure(t, "min_wal_size = 2MB", "max_wal_size = 8MB")
	return c.start(t, nil)
}

// start configures the listen addresses and their trust, and starts c.
func (c *Cluster) start(t testing.TB, listen []string) *Cluster {
	t.Helper()
	// A later setting overrides configure's loopback-only one.
	c.configure(t, fmt.Sprintf("listen_addresses = '%s'", strings.Join(append([]string{"127.0.0.1"}, listen...), ",")))
	var hba strings.Builder
	for _, addr := range listen {
		fmt.Fprintf(&hba, "host all all %s/24 trust\n", addr)
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	_, err = f.WriteString(hba.String())
	f.Close()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	c.Start(t)
	t.Cleanup(func() { c.Stop(t, "immediate") })
	return c
}
