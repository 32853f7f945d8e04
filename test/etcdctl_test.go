package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ctl runs etcdctl against endpoint and returns stdout (stderr appended on error).
func ctl(t *testing.T, endpoint, stdin string, args ...string) (string, error) {
	t.Helper()
	if ctlBuildE != nil {
		t.Fatalf("etcdctl: %v", ctlBuildE)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, etcdctlBin, append([]string{"--endpoints", endpoint, "--command-timeout", "30s"}, args...)...)
	// etcdctl 3.7 speaks only v3 (and warns about ETCDCTL_API).
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		// Keep the error line, not the client's retry logs.
		for _, l := range strings.Split(errb.String(), "\n") {
			if strings.HasPrefix(l, "Error:") {
				out.WriteString(l + "\n")
			}
		}
		return out.String(), err
	}
	return out.String(), nil
}

var (
	reIDs    = regexp.MustCompile(`"(cluster_id|member_id|raft_term)":\d+`)
	reFields = regexp.MustCompile(`"(ClusterID|MemberID|RaftTerm)" : \d+`)
	reLease  = regexp.MustCompile(`\b[0-9a-f]{16}\b`)
)

// normCtl removes what legitimately differs between two servers' output.
func normCtl(s string, leases map[string]string) string {
	s = reIDs.ReplaceAllString(s, `"$1":X`)
	s = reFields.ReplaceAllString(s, `"$1" : X`)
	for id, name := range leases {
		s = strings.ReplaceAll(s, id, name)
		if n, err := parseHex(id); err == nil {
			s = strings.ReplaceAll(s, fmt.Sprint(n), name)
		}
	}
	return s
}

func parseHex(s string) (int64, error) {
	var n int64
	_, err := fmt.Sscanf(s, "%x", &n)
	return n, err
}

// TestEtcdctlSession runs an operator's session with etcdctl against kite
// and against etcd, and compares the outputs.
func TestEtcdctlSession(t *testing.T) {
	p := newPair(t)
	leases := []map[string]string{{}, {}}
	type cmd struct {
		args  []string
		stdin string
		want  string // if set, etcd's (normalised) output must equal it too
	}
	txnInput := "mod(\"zoo\") > \"0\"\nvalue(\"foo\") = \"bar\"\n\nput zoo z2\nget zoo\ndel foo2\n\nput failed yes\n\n"
	session := []cmd{
		{args: []string{"put", "foo", "bar"}, want: "OK\n"},
		{args: []string{"put", "foo1", "bar1"}},
		{args: []string{"put", "foo2", "bar2"}},
		{args: []string{"put", "zoo", "z"}},
		{args: []string{"put", "foo", "bar", "--prev-kv"}, want: "OK\nfoo\nbar\n"},
		{args: []string{"get", "foo"}, want: "foo\nbar\n"},
		{args: []string{"get", "foo", "--prefix"}},
		{args: []string{"get", "foo", "--prefix", "--limit", "2"}},
		{args: []string{"get", "foo", "--prefix", "--keys-only"}},
		{args: []string{"get", "foo", "--prefix", "--count-only", "-w", "fields"}},
		{args: []string{"get", "foo1", "--from-key"}},
		{args: []string{"get", "foo", "--prefix", "--sort-by", "MODIFY", "--order", "DESCEND"}},
		{args: []string{"get", "foo", "--prefix", "--sort-by", "VALUE", "--order", "ASCEND"}},
		{args: []string{"get", "foo", "--rev", "2"}, want: "foo\nbar\n"},
		{args: []string{"get", "foo", "--rev", "100"}},
		{args: []string{"get", "foo", "--prefix", "-w", "json"}},
		{args: []string{"get", "", "--prefix", "-w", "fields"}},
		{args: []string{"txn", "-i"}, stdin: txnInput},
		{args: []string{"txn", "-w", "json"}, stdin: txnInput},
		{args: []string{"del", "foo1", "--prev-kv"}, want: "1\nfoo1\nbar1\n"},
		{args: []string{"del", "foo", "--prefix"}},
		{args: []string{"del", "nothing"}, want: "0\n"},
		{args: []string{"get", "", "--from-key", "-w", "json"}},
		{args: []string{"lease", "grant", "600"}},
		{args: []string{"put", "leased", "v", "--lease", "LEASE0"}, want: "OK\n"},
		{args: []string{"lease", "timetolive", "LEASE0", "--keys"}},
		{args: []string{"lease", "list"}},
		{args: []string{"lease", "keep-alive", "--once", "LEASE0"}},
		{args: []string{"lease", "revoke", "LEASE0"}},
		{args: []string{"get", "leased"}, want: ""},
		{args: []string{"lease", "timetolive", "LEASE0"}},
		{args: []string{"compaction", "--physical", "5"}, want: "compacted revision 5\n"},
		{args: []string{"get", "foo", "--rev", "3"}},
		{args: []string{"defrag"}},
		{args: []string{"endpoint", "health"}},
		{args: []string{"endpoint", "status", "-w", "json"}},
	}
	for _, c := range session {
		var outs [2]string
		var errs [2]error
		for j, s := range p.both() {
			args := append([]string(nil), c.args...)
			for i, a := range args {
				for id, name := range leases[j] {
					if a == name {
						args[i] = id
					}
				}
			}
			out, err := ctl(t, s.Endpoint, c.stdin, args...)
			if len(args) >= 2 && args[0] == "lease" && args[1] == "grant" && err == nil {
				// "lease 694d7b0f1a2c3d4e granted with TTL(600s)"
				f := strings.Fields(out)
				if len(f) < 2 {
					t.Fatalf("%s: lease grant output %q", s.name, out)
				}
				leases[j][f[1]] = fmt.Sprintf("LEASE%d", len(leases[j]))
			}
			outs[j], errs[j] = normCtl(out, leases[j]), err
		}
		switch {
		case c.args[0] == "endpoint" || c.args[0] == "defrag":
			// Endpoints and sizes differ: checked below per server.
			if (errs[0] == nil) != (errs[1] == nil) {
				t.Errorf("etcdctl %v: etcd err %v, kite err %v\nkite output: %s", c.args, errs[0], errs[1], outs[1])
			}
			continue
		}
		if c.want != "" && outs[0] != c.want {
			t.Fatalf("test bug: etcd answers %v with %q, test expects %q", c.args, outs[0], c.want)
		}
		if outs[0] != outs[1] || (errs[0] == nil) != (errs[1] == nil) {
			t.Errorf("etcdctl %v (stdin %q):\netcd (err %v):\n%s\nkite (err %v):\n%s", c.args, c.stdin, errs[0], outs[0], errs[1], outs[1])
		}
	}
	checkCtlEndpoint(t, p.kite.server)
	checkCtlEndpoint(t, p.etcd.server)
}

// checkCtlEndpoint checks the per-server admin commands' output.
func checkCtlEndpoint(t *testing.T, s *server) {
	t.Helper()
	expect := func(args []string, parts ...string) {
		t.Helper()
		out, err := ctl(t, s.Endpoint, "", args...)
		if err != nil {
			t.Errorf("%s: etcdctl %v: %v\n%s", s.name, args, err, out)
			return
		}
		for _, p := range parts {
			if !strings.Contains(out, p) {
				t.Errorf("%s: etcdctl %v output lacks %q:\n%s", s.name, args, p, out)
			}
		}
	}
	expect([]string{"endpoint", "health"}, s.Endpoint+" is healthy")
	if strings.HasPrefix(datastore, "raftsql") && s.name == "kite" {
		// One member of three, the leader or not: the cluster has one.
		expect([]string{"endpoint", "status", "--cluster", "-w", "table"}, s.Endpoint, "VERSION", "DB SIZE", "IS LEADER", " true ")
	} else {
		expect([]string{"endpoint", "status", "-w", "table"}, s.Endpoint, "VERSION", "DB SIZE", "IS LEADER", " true ")
	}
	expect([]string{"member", "list"}, "started", s.Endpoint)
	expect([]string{"defrag"}, "Finished defragmenting etcd member["+s.Endpoint+"]")
	file := filepath.Join(t.TempDir(), "snap.db")
	expect([]string{"snapshot", "save", file}, "Snapshot saved at "+file)
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Errorf("%s: snapshot file: %v", s.name, err)
	}
}

// TestEtcdctlWatch: etcdctl watch --rev --prefix --prev-kv prints the same
// history on both servers.
func TestEtcdctlWatch(t *testing.T) {
	p := newPair(t)
	var outs [2]string
	for j, s := range p.both() {
		for _, kv := range [][2]string{{"w/a", "1"}, {"w/b", "2"}, {"x", "3"}, {"w/a", "4"}} {
			if out, err := ctl(t, s.Endpoint, "", "put", kv[0], kv[1]); err != nil {
				t.Fatalf("%s put: %v %s", s.name, err, out)
			}
		}
		if out, err := ctl(t, s.Endpoint, "", "del", "w/b"); err != nil {
			t.Fatalf("%s del: %v %s", s.name, err, out)
		}
		// 4 events: PUT w/a, PUT w/b, PUT w/a (prev), DELETE w/b (prev); each
		// event is 3 lines, plus 2 prev lines for the last two.
		outs[j] = watchLines(t, s.Endpoint, 4*3+2*2, "watch", "w/", "--prefix", "--rev", "2", "--prev-kv")
	}
	want := "PUT\nw/a\n1\nPUT\nw/b\n2\nPUT\nw/a\n1\nw/a\n4\nDELETE\nw/b\n2\nw/b\n\n"
	if outs[0] != want {
		t.Fatalf("test bug: etcd printed %q", outs[0])
	}
	if outs[1] != outs[0] {
		t.Errorf("etcdctl watch:\netcd:\n%s\nkite:\n%s", outs[0], outs[1])
	}
}

// watchLines runs an etcdctl command until it printed n lines (or 30 s),
// then kills it and returns what it printed.
func watchLines(t *testing.T, endpoint string, n int, args ...string) string {
	t.Helper()
	cmd := exec.Command(etcdctlBin, append([]string{"--endpoints", endpoint}, args...)...)
	buf := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Count(buf.Tail(1<<20), "\n") >= n {
			time.Sleep(300 * time.Millisecond) // anything extra would show too
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return buf.Tail(1 << 20)
}

// TestEtcdctlAuth: an operator's auth session with etcdctl's user, role
// and auth commands and its --user flag, against kite and etcd; the
// outputs and successes must be the same.
func TestEtcdctlAuth(t *testing.T) {
	p := newPair(t)
	root := []string{"--user", "root:rootpw"}
	alice := []string{"--user", "alice:alicepw"}
	session := [][]string{
		{"user", "add", "root", "--new-user-password", "rootpw"},
		{"role", "add", "root"},
		{"user", "grant-role", "root", "root"},
		{"role", "add", "app"},
		{"role", "grant-permission", "app", "readwrite", "/app/", "--prefix"},
		{"role", "grant-permission", "app", "read", "/shared"},
		{"user", "add", "alice", "--new-user-password", "alicepw"},
		{"user", "grant-role", "alice", "app"},
		{"user", "add", "svc", "--no-password"},
		{"auth", "enable"},
		{"auth", "status"},
		{"put", "/app/x", "1"},
		append(alice, "put", "/app/x", "1"),
		append(alice, "get", "/app/", "--prefix"),
		append(alice, "put", "/other", "1"),
		append(alice, "get", "/shared"),
		append(alice, "user", "list"),
		append(root, "user", "list"),
		append(root, "role", "list"),
		append(root, "user", "get", "alice"),
		append(root, "role", "get", "app"),
		append(root, "role", "revoke-permission", "app", "/shared"),
		append(root, "user", "passwd", "alice", "--new-user-password", "newpw"),
		append(alice, "get", "/app/x"),
		{"--user", "alice:newpw", "get", "/app/x"},
		append(root, "user", "revoke-role", "alice", "app"),
		{"--user", "alice:newpw", "get", "/app/x"},
		append(root, "user", "delete", "alice"),
		append(root, "role", "delete", "app"),
		append(root, "auth", "disable"),
		{"auth", "status"},
		{"put", "/app/x", "2"},
	}
	for _, args := range session {
		var outs [2]string
		var errs [2]error
		for j, s := range p.both() {
			out, err := ctl(t, s.Endpoint, "", args...)
			outs[j], errs[j] = normCtl(out, nil), err
		}
		if outs[0] != outs[1] || (errs[0] == nil) != (errs[1] == nil) {
			t.Errorf("etcdctl %v:\netcd (err %v):\n%s\nkite (err %v):\n%s", args, errs[0], outs[0], errs[1], outs[1])
		}
	}
}
