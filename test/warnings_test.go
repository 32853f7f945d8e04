package test

import (
	cryptorand "crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The warnings etcd operators know, in kite's log: a request slower than
// --warning-apply-duration, and a database near its quota; and the log
// going where --log-outputs says.

// TestSlowRequestWarning: with --warning-apply-duration below any
// request's time, every request is logged as etcd's "apply request took
// too long", with its key and value size but never its value, to the
// file --log-outputs names as well as to stderr.
func TestSlowRequestWarning(t *testing.T) {
	if againstEtcd {
		t.Skip("kite's log")
	}
	logFile := filepath.Join(t.TempDir(), "kite.log")
	// Info: etcd logs the traces of slow requests at info level.
	k := startKite(t, "--warning-apply-duration", "1ns", "--log-outputs", "stderr,"+logFile, "--log-level", "info")
	ctx := testCtx(t, 30*time.Second)
	const secret = "s3cr3t-value-never-logged"
	if _, err := k.Client.Put(ctx, "warn/key", secret); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Client.Get(ctx, "warn/key"); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]func() string{
		"stderr": func() string { return k.log.Tail(1 << 20) },
		"--log-outputs file": func() string {
			b, _ := os.ReadFile(logFile)
			return string(b)
		},
	} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			log := out()
			// And the trace of each, as etcd's: the steps the request's
			// time went to.
			traced := strings.Contains(log, "trace[") && strings.Contains(log, "'range read from the database'") &&
				(strings.Contains(log, "'published to watchers'") || strings.Contains(log, "'committed by raft and applied on this member'"))
			if strings.Contains(log, "apply request took too long") && strings.Contains(log, `put key:\"warn/key\" value_size:25`) &&
				strings.Contains(log, "read-only range") && traced {
				if strings.Contains(log, secret) {
					t.Errorf("%s: the log holds the value of a put:\n%s", name, log)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no \"apply request took too long\" and trace for the put and the range:\n%s", name, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestNearQuotaWarning: a database filled past 90% of
// --quota-backend-bytes is said once in the log, before NOSPACE refuses
// writes.
func TestNearQuotaWarning(t *testing.T) {
	if againstEtcd {
		t.Skip("kite's log")
	}
	k := startKite(t)
	ctx := testCtx(t, 2*time.Minute)
	st, err := k.Client.Status(ctx, k.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	// Room for about 8 MiB more than the storage holds now. InnoDB grows
	// a table's file page by page to about half a MiB and then in one
	// step to about 9 MiB (1 MiB steps after that), so in MySQL mode the
	// room must be well above that step, or the size measured after one
	// put is past the quota and the warning and NOSPACE come together.
	headroom := int64(8 << 20)
	if datastore == "mysql" {
		headroom = 40 << 20
	}
	k.Kill()
	k.flags = append(k.flags, "--quota-backend-bytes", strconv.FormatInt(st.DbSize+headroom, 10))
	k.Restart()
	// Random bytes: Postgres compresses a repeated value to nothing.
	value := make([]byte, 4096)
	const puts = 12000
	for i := range puts {
		cryptorand.Read(value)
		// Every put so far succeeded: the warning comes before NOSPACE.
		if strings.Contains(k.log.Tail(1<<20), "near its quota") {
			return
		}
		if _, err := k.Client.Put(ctx, fmt.Sprintf("quota/%05d", i), string(value)); err != nil {
			t.Fatalf("put %d before any near-quota warning: %v\nlog:\n%s", i, err, k.log.Tail(4096))
		}
	}
	t.Fatalf("no near-quota warning after %d puts of 4 KiB\nlog:\n%s", puts, k.log.Tail(4096))
}

// TestSlowWatcherWarning: a watch client that stops reading while writes
// go on falls off the live feed; kite says so in its log and in etcd's
// slow_watcher_total, and the client, reading again, gets every event.
func TestSlowWatcherWarning(t *testing.T) {
	if againstEtcd {
		t.Skip("kite's log")
	}
	k := startKite(t)
	ctx := testCtx(t, 2*time.Minute)
	stream, err := pb.NewWatchClient(k.Client.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte("slow/"), RangeEnd: []byte("slow0")}}}); err != nil {
		t.Fatal(err)
	}
	// Not read: gRPC's flow-control window, then kite's stream queue fill.
	payload := strings.Repeat("v", 8192)
	const n = 3000
	for i := range n {
		if _, err := k.Client.Put(ctx, fmt.Sprintf("slow/%04d", i), payload); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(k.log.Tail(1<<20), "slow watchers") {
			break
		}
	}
	if !strings.Contains(k.log.Tail(1<<20), "slow watchers") {
		t.Fatalf("no slow-watcher warning after %d puts of 8 KiB to an unread watch\nlog:\n%s", n, k.log.Tail(4096))
	}
	if v := value(scrape(t, k.Endpoint), "etcd_debugging_mvcc_slow_watcher_total"); v < 1 {
		t.Errorf("etcd_debugging_mvcc_slow_watcher_total = %v while the client does not read; want 1", v)
	}
	last, err := k.Client.Put(ctx, "slow/last", "x")
	if err != nil {
		t.Fatal(err)
	}
	// Reading again: every event arrives, in order, up to the last put.
	var next int64
	for next <= last.Header.Revision {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch after reading again: %v", err)
		}
		for _, ev := range resp.Events {
			if next != 0 && ev.Kv.ModRevision != next {
				t.Fatalf("event at revision %d after %d: events lost while the client was slow", ev.Kv.ModRevision, next-1)
			}
			next = ev.Kv.ModRevision + 1
		}
	}
}
