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
