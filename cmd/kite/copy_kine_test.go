package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
)

// fakeKineMySQL answers as kine on MySQL does for what kite copy asks: its
// whole key space in one response, in the order of a case-insensitive
// collation, and no lease listing. test/copy_kine_test.go copies a real
// kine on MySQL; this needs neither kine nor MySQL.
type fakeKineMySQL struct {
	pb.UnimplementedKVServer
	pb.UnimplementedLeaseServer
	kvs []*mvccpb.KeyValue
	rev int64
}

func (f *fakeKineMySQL) Range(_ context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if string(r.Key) != "\x00" || string(r.RangeEnd) != "\x00" || r.Limit != 0 {
		return nil, errors.New("fake kine: only the whole key space, without a limit")
	}
	return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: f.rev}, Kvs: f.kvs, Count: int64(len(f.kvs))}, nil
}

func (f *fakeKineMySQL) LeaseLeases(context.Context, *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return nil, errors.New("lease leases is not supported")
}

// TestCopyFromKineCollationOrder copies from a kine whose list is not in
// byte order (kine on MySQL: ciZ < ci_reader < cia in bytes, not on kine).
// The copy must verify, and hold the keys as kine answered them.
func TestCopyFromKineCollationOrder(t *testing.T) {
	kv := func(name string, rev int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte("/registry/clusterroles/" + name), Value: []byte(name), CreateRevision: rev, ModRevision: rev}
	}
	kine := &fakeKineMySQL{kvs: []*mvccpb.KeyValue{kv("cia", 3), kv("ciZ", 4), kv("ci_reader", 5)}, rev: 5}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kine)
	pb.RegisterLeaseServer(srv, kine)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	dst := "sqlite://" + filepath.Join(t.TempDir(), "kite.db")
	var log bytes.Buffer
	res, err := copyCluster(context.Background(), testCopyConfig(t, "--from", "http://"+lis.Addr().String(), "--to", dst), &log)
	if err != nil {
		t.Fatalf("copy: %v\n%s", err, log.String())
	}
	if res.keys != 3 || res.current != 5 || !strings.Contains(log.String(), "the source is kine") {
		t.Errorf("result %+v, log %q", res, log.String())
	}
	got := dump(t, dst)
	for _, name := range []string{"cia", "ciZ", "ci_reader"} {
		if !strings.Contains(got, `key:"/registry/clusterroles/`+name+`"`) {
			t.Errorf("target lacks %s:\n%s", name, got)
		}
	}
}
