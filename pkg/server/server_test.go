package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kite-db/kite/pkg/membership"
)

func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkHeader asserts the cluster fields every response must carry.
func checkHeader(t *testing.T, what string, h *pb.ResponseHeader, srv *Server) {
	t.Helper()
	mid := membership.MemberID(srv.cfg.AdvertiseClientURLs, srv.cfg.Name)
	if h == nil || h.MemberId != mid || h.ClusterId != membership.ClusterID(mid) || h.RaftTerm != singleTerm {
		t.Errorf("%s: header %v, want member %x cluster %x term %d", what, h, mid, membership.ClusterID(mid), singleTerm)
	}
}

func TestServerSmoke(t *testing.T) {
	srv, endpoint := mustStartServer(t, Config{MaxRequestBytes: 64 * 1024})
	cli := newClient(t, endpoint)
	ctx := testContext(t)

	t.Run("put get", func(t *testing.T) {
		pr, err := cli.Put(ctx, "foo", "bar")
		if err != nil {
			t.Fatal(err)
		}
		checkHeader(t, "put", pr.Header, srv)
		gr, err := cli.Get(ctx, "foo")
		if err != nil {
			t.Fatal(err)
		}
		checkHeader(t, "get", gr.Header, srv)
		if len(gr.Kvs) != 1 || string(gr.Kvs[0].Value) != "bar" || gr.Header.Revision != pr.Header.Revision {
			t.Fatalf("get foo: %v (put at %d)", gr, pr.Header.Revision)
		}
	})

	t.Run("txn", func(t *testing.T) {
		tr, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value("foo"), "=", "bar")).
			Then(clientv3.OpPut("foo", "baz"), clientv3.OpGet("foo")).
			Else(clientv3.OpGet("foo")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		checkHeader(t, "txn", tr.Header, srv)
		if !tr.Succeeded || string(tr.Responses[1].GetResponseRange().Kvs[0].Value) != "baz" {
			t.Fatalf("txn: %v", tr)
		}
		_, err = cli.Txn(ctx).Then(clientv3.OpPut("d", "1"), clientv3.OpPut("d", "2")).Commit()
		if !errors.Is(err, rpctypes.ErrDuplicateKey) {
			t.Fatalf("duplicate put: got %v, want %v", err, rpctypes.ErrDuplicateKey)
		}
	})

	t.Run("validation", func(t *testing.T) {
		_, err := cli.Put(ctx, "", "x")
		if !errors.Is(err, rpctypes.ErrEmptyKey) {
			t.Fatalf("empty key: got %v", err)
		}
		_, err = cli.Put(ctx, "big", strings.Repeat("x", 65*1024))
		if !errors.Is(err, rpctypes.ErrRequestTooLarge) {
			t.Fatalf("large put: got %v, want %v", err, rpctypes.ErrRequestTooLarge)
		}
	})

	t.Run("range stream", func(t *testing.T) {
		for i := range 57 {
			if _, err := cli.Put(ctx, fmt.Sprintf("list/%03d", i), strings.Repeat("v", i)); err != nil {
				t.Fatal(err)
			}
		}
		for _, limit := range []int64{0, 5, 25} {
			want, err := cli.Get(ctx, "list/", clientv3.WithPrefix(), clientv3.WithLimit(limit))
			if err != nil {
				t.Fatal(err)
			}
			ch, err := cli.GetStream(ctx, "list/", clientv3.WithPrefix(), clientv3.WithLimit(limit))
			if err != nil {
				t.Fatal(err)
			}
			var chunks []clientv3.RangeStreamResponse
			for c := range ch {
				if c.Err() != nil {
					t.Fatalf("stream: %v", c.Err())
				}
				chunks = append(chunks, c)
			}
			for i, c := range chunks[:len(chunks)-1] {
				if c.Header != nil || c.More || c.Count != 0 {
					t.Errorf("limit %d: chunk %d carries header/more/count: %v", limit, i, c.RangeResponse)
				}
			}
			last := chunks[len(chunks)-1]
			checkHeader(t, "range stream", last.Header, srv)
			got, _ := clientv3.GetStreamToGetResponse(sendAll(chunks))
			if len(got.Kvs) != len(want.Kvs) || got.Count != want.Count || got.More != want.More || got.Header.Revision != want.Header.Revision {
				t.Fatalf("limit %d: stream got %d kvs count %d more %v rev %d; range got %d kvs count %d more %v rev %d",
					limit, len(got.Kvs), got.Count, got.More, got.Header.Revision,
					len(want.Kvs), want.Count, want.More, want.Header.Revision)
			}
			if limit == 0 && len(chunks) < 2 {
				t.Errorf("57 keys came in %d chunk(s); want several (first chunk is 10 keys)", len(chunks))
			}
		}
		_, err := clientv3.GetStreamToGetResponse(mustStream(t, cli, ctx, "list/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)))
		if err == nil || !strings.Contains(err.Error(), "custom sort") {
			t.Fatalf("descending stream: got %v, want Unimplemented", err)
		}
	})

	t.Run("watch", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wc := cli.Watch(wctx, "w/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
		created := <-wc
		if !created.Created {
			t.Fatalf("first watch response: %+v", created)
		}
		checkHeader(t, "watch created", created.Header, srv)
		if _, err := cli.Put(ctx, "w/1", "a"); err != nil {
			t.Fatal(err)
		}
		select {
		case wr := <-wc:
			checkHeader(t, "watch event", wr.Header, srv)
			if len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "w/1" {
				t.Fatalf("watch event: %+v", wr)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event")
		}
	})

	t.Run("lease", func(t *testing.T) {
		lg, err := cli.Grant(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		checkHeader(t, "lease grant", lg.ResponseHeader, srv)
		if _, err := cli.Put(ctx, "leased", "v", clientv3.WithLease(lg.ID)); err != nil {
			t.Fatal(err)
		}
		ka, err := cli.KeepAliveOnce(ctx, lg.ID)
		if err != nil || ka.TTL <= 0 {
			t.Fatalf("keepalive: %v %v", ka, err)
		}
		ttl, err := cli.TimeToLive(ctx, lg.ID, clientv3.WithAttachedKeys())
		if err != nil || len(ttl.Keys) != 1 {
			t.Fatalf("ttl: %v %v", ttl, err)
		}
		if _, err := cli.Revoke(ctx, lg.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.KeepAliveOnce(ctx, lg.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Fatalf("keepalive of revoked lease: got %v", err)
		}
		ttl, err = cli.TimeToLive(ctx, lg.ID)
		if err != nil || ttl.TTL != -1 {
			t.Fatalf("ttl of revoked lease: %v %v", ttl, err)
		}
		if _, err := cli.Revoke(ctx, lg.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Fatalf("revoke twice: got %v", err)
		}
	})

	t.Run("status and members", func(t *testing.T) {
		st, err := cli.Status(ctx, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		checkHeader(t, "status", st.Header, srv)
		if st.Version != version.Version || st.Leader != st.Header.MemberId || st.DbSize <= 0 || st.RaftIndex != uint64(st.Header.Revision) {
			t.Fatalf("status: %+v", st)
		}
		ml, err := cli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ml.Members) != 1 || ml.Members[0].ID != st.Leader || ml.Members[0].ClientURLs[0] != "http://127.0.0.1:0" ||
			len(ml.Members[0].PeerURLs) != 1 || ml.Members[0].PeerURLs[0] != "http://localhost:2380" {
			t.Fatalf("members: %+v", ml.Members)
		}
		if _, err := cli.MemberAdd(ctx, []string{"http://127.0.0.1:2380"}); err == nil {
			t.Fatal("member add succeeded")
		}
	})

	t.Run("grpc health", func(t *testing.T) {
		resp, err := healthpb.NewHealthClient(cli.ActiveConnection()).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health: %v %v", resp, err)
		}
	})

	t.Run("alarm", func(t *testing.T) {
		st, err := cli.Status(ctx, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		mc := pb.NewMaintenanceClient(cli.ActiveConnection())
		nospace := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}
		if _, err := mc.Alarm(ctx, nospace); err != nil {
			t.Fatal(err)
		}
		st, err = cli.Status(ctx, endpoint)
		if err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "NOSPACE") {
			t.Fatalf("status with alarm: %v %v", st, err)
		}
		resp, err := http.Get(endpoint + "/health")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "ALARM NOSPACE") {
			t.Errorf("/health with alarm: %d %s", resp.StatusCode, body)
		}
		if _, err := cli.Put(ctx, "blocked", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Errorf("put under NOSPACE: got %v", err)
		}
		nospace.Action = pb.AlarmRequest_DEACTIVATE
		if _, err := mc.Alarm(ctx, nospace); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "unblocked", "x"); err != nil {
			t.Fatalf("put after disarm: %v", err)
		}
	})

	t.Run("compact", func(t *testing.T) {
		gr, err := cli.Get(ctx, "foo")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, gr.Header.Revision); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Get(ctx, "foo", clientv3.WithRev(gr.Header.Revision-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("read below compaction: got %v", err)
		}
		if _, err := cli.Get(ctx, "foo", clientv3.WithRev(gr.Header.Revision+1000)); !errors.Is(err, rpctypes.ErrFutureRev) {
			t.Fatalf("future read: got %v", err)
		}
	})

	t.Run("snapshot", func(t *testing.T) {
		rc, err := cli.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		if len(data)%512 != sha256.Size {
			t.Fatalf("snapshot of %d bytes: etcdctl wants size %% 512 == 32", len(data))
		}
		db, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
		if got := sha256.Sum256(db); string(got[:]) != string(sum) {
			t.Fatal("snapshot sha256 mismatch")
		}
		if !strings.HasPrefix(string(db), "SQLite format 3\x00") {
			t.Fatalf("snapshot is not a SQLite file: %q", db[:16])
		}
	})

	t.Run("http", func(t *testing.T) {
		for _, path := range []string{"/health", "/livez", "/readyz", "/metrics", "/version"} {
			resp, err := http.Get(endpoint + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %d %s", path, resp.StatusCode, body)
			}
			if path == "/health" && string(body) != `{"health":"true","reason":""}` {
				t.Errorf("/health: %s", body)
			}
			if path == "/metrics" {
				for _, m := range []string{"etcd_server_has_leader 1", "etcd_mvcc_db_total_size_in_bytes", "grpc_server_handled_total"} {
					if !strings.Contains(string(body), m) {
						t.Errorf("/metrics lacks %s", m)
					}
				}
			}
			if path == "/version" && !strings.Contains(string(body), `"etcdserver":"`+version.Version+`"`) {
				t.Errorf("/version: %s", body)
			}
		}
	})
}

func mustStream(t *testing.T, cli *clientv3.Client, ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.GetStreamChan {
	t.Helper()
	ch, err := cli.GetStream(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// sendAll replays collected chunks as a stream channel.
func sendAll(chunks []clientv3.RangeStreamResponse) clientv3.GetStreamChan {
	ch := make(chan clientv3.RangeStreamResponse, len(chunks))
	for _, c := range chunks {
		ch <- c
	}
	close(ch)
	return ch
}

// A txn whose only operation is a nested read-only txn is a proposal in
// etcd (etcdserver/txn.IsTxnReadonly looks at the top level only), so the
// request size limit applies to it; a top-level read-only txn is served
// without one and is not limited.
func TestNestedReadOnlyTxnIsSizeChecked(t *testing.T) {
	_, endpoint := mustStartServer(t, Config{MaxRequestBytes: 64 * 1024})
	cli := newClient(t, endpoint)
	ctx := testContext(t)
	big := strings.Repeat("k", 100*1024)
	if _, err := cli.Txn(ctx).Then(clientv3.OpGet(big)).Commit(); err != nil {
		t.Fatalf("top-level read-only txn over the request limit: %v, want it served", err)
	}
	_, err := cli.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet(big)}, nil)).Commit()
	if !errors.Is(err, rpctypes.ErrRequestTooLarge) {
		t.Fatalf("nested read-only txn over the request limit: %v, want %v", err, rpctypes.ErrRequestTooLarge)
	}
}
