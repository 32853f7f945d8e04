package test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kite-db/kite/internal/testenv"
)

// TestStartWithDatabaseDown: kite started while its Postgres is down keeps
// retrying with a log line that never shows the password, answers /livez
// ok and /readyz not ready meanwhile, and serves once the database is up.
func TestStartWithDatabaseDown(t *testing.T) {
	if kiteBuildErr != nil {
		t.Fatalf("kite binary: %v", kiteBuildErr)
	}
	pg := startPrivatePostgres(t)
	if out, err := pg.ctl("stop", "-m", "fast"); err != nil {
		t.Fatalf("stop private postgres: %v\n%s", err, out)
	}
	// trust auth ignores the password: it is there to be kept out of logs.
	dsn := strings.Replace(pg.DSN("postgres"), "postgres@", "postgres:s3cr3t@", 1)
	port := freePort(t)
	ep := "http://127.0.0.1:" + strconv.Itoa(port)
	log := &syncBuffer{}
	p, err := testenv.Start(testenv.Command{Argv: []string{kiteBin, "--data-dir", t.TempDir(), "--listen-client-urls", ep,
		"--advertise-client-urls", ep, "--datastore-endpoint", dsn}, Out: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)

	probe := func(path string) int {
		resp, err := http.Get(ep + path)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30 s; kite log:\n%s", what, log.Tail(4096))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("/livez 200 while the database is down", func() bool { return probe("/livez") == http.StatusOK })
	if got := probe("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz while the database is down = %d; want 503", got)
	}
	waitFor("a log line about the unreachable database", func() bool {
		return strings.Contains(log.Tail(1<<20), "datastore not reachable")
	})

	if out, err := pg.ctl("start"); err != nil {
		t.Fatalf("start private postgres: %v\n%s\nserver log:\n%s", err, out, pg.Log())
	}
	waitFor("/readyz 200 once the database is up", func() bool { return probe("/readyz") == http.StatusOK })
	c, err := newClient(ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put once the database is up: %v", err)
	}
	if strings.Contains(log.Tail(1<<20), "s3cr3t") {
		t.Errorf("kite's log shows the database password:\n%s", log.Tail(4096))
	}
}
