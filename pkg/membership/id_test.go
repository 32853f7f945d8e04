package membership

import (
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/types"
	etcdmembership "go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.uber.org/zap"
)

// TestIDsAreEtcds: the member and cluster IDs of a cluster bootstrapped
// from peer URLs and a token are the ones etcd derives from the same.
func TestIDsAreEtcds(t *testing.T) {
	initial := map[string][]string{
		"a": {"http://10.0.0.1:2380"},
		"b": {"http://10.0.0.2:2380", "https://b.example:2380"},
		"c": {"http://10.0.0.3:2380"},
	}
	urlsmap := types.URLsMap{}
	for name, urls := range initial {
		u, err := types.NewURLs(urls)
		if err != nil {
			t.Fatal(err)
		}
		urlsmap[name] = u
	}
	ref, err := etcdmembership.NewClusterFromURLsMap(zap.NewNop(), "tok", urlsmap)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for name, urls := range initial {
		id := MemberID(urls, "tok")
		if em := ref.MemberByName(name); em == nil || uint64(em.ID) != id {
			t.Errorf("member %s: ID %x; etcd's %v", name, id, em)
		}
		ids = append(ids, id)
	}
	if got, want := ClusterID(ids...), uint64(ref.ID()); got != want {
		t.Errorf("cluster ID %x; etcd's %x", got, want)
	}
}

// TestMemberIDStable: a single server's ID (client URLs salted with its
// name) is the same on every start, whatever the URLs' order, and differs
// with the name or the URLs.
func TestMemberIDStable(t *testing.T) {
	a := MemberID([]string{"http://127.0.0.1:2379"}, "default")
	if a != MemberID([]string{"http://127.0.0.1:2379"}, "default") {
		t.Fatal("member ID not stable")
	}
	if a == MemberID([]string{"http://127.0.0.1:2379"}, "other") || a == MemberID([]string{"http://127.0.0.1:2380"}, "default") {
		t.Fatal("member ID ignores name or URLs")
	}
	if MemberID([]string{"http://b:1", "http://a:1"}, "n") != MemberID([]string{"http://a:1", "http://b:1"}, "n") {
		t.Fatal("member ID depends on URL order")
	}
	if ClusterID(a) == a || ClusterID(a) != ClusterID(a) {
		t.Fatal("cluster ID")
	}
	if ClusterID(1, 2) != ClusterID(2, 1) {
		t.Fatal("cluster ID depends on member order")
	}
}
