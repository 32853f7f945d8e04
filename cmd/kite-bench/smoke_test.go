package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/internal/testenv"
)

// TestMain lets --compare re-execute the test binary as the reference etcd,
// exactly as it re-executes kite-bench.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == testenv.EtcdServerCommand {
		os.Exit(testenv.RunEtcdServer("kite-bench", os.Args[2:]))
	}
	os.Exit(m.Run())
}

// Test_SmokeAgainstEmbeddedEtcd runs every workload tiny against an etcd
// embedded in the test process. It checks what the tool reports, never
// how fast anything was.
func Test_SmokeAgainstEmbeddedEtcd(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := testenv.StartEtcd(ctx, testenv.EtcdConfig{Name: "smoke", Dir: filepath.Join(t.TempDir(), "etcd"), ClientURL: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	results := runSmoke(t, "--smoke", "--endpoints", endpoint)
	checkEveryWorkload(t, results, []string{endpoint}, smokeWorkloads)
}

// Test_SmokeCompare runs --compare with a second reference etcd standing in
// for kite (or the kite binary named by $KITE_BENCH_KITE_BINARY), which
// exercises starting, measuring and stopping server processes.
func Test_SmokeCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two server processes")
	}
	kite := os.Getenv("KITE_BENCH_KITE_BINARY")
	if kite == "" {
		kite = "etcd"
	}
	results := runSmoke(t, "--smoke", "--compare", "--kite-binary", kite,
		"--memory-keys", "300", "--work-dir", t.TempDir())
	checkEveryWorkload(t, results, []string{"etcd", "kite"}, smokeWorkloads)
	for _, target := range []string{"etcd", "kite"} {
		r, ok := results[target+"/memory-300"]
		if !ok || r.RSSBytes <= 0 || r.Ops != 300 {
			t.Errorf("%s memory result = %+v, want 300 keys and a resident size", target, r)
		}
	}
	checkPeakRSS(t, results, []string{"etcd", "kite"})
	for _, target := range []string{"etcd", "kite"} {
		if r := results[target+"/put@64"]; r.CPUSeconds <= 0 || r.CPUPer1kOps <= 0 || r.WALSyncsPerOp <= 0 {
			t.Errorf("%s/put@64 cost = %+v, want the server's CPU and WAL syncs per operation", target, r.cost)
		}
	}
}

// checkPeakRSS wants each target's peak-rss row: the largest server's peak
// resident memory and, with several servers, each one's; unless a server
// was started again (its peak then starts over), at least what any row of
// the target saw resident.
func checkPeakRSS(t *testing.T, results map[string]result, targets []string) {
	t.Helper()
	for _, target := range targets {
		peak, ok := results[target+"/"+peakRSSLabel]
		if !ok || peak.RSSBytes <= 0 || (len(peak.RSSNodesBytes) > 0 && peak.RSSBytes != peak.RSSMaxBytes) {
			t.Errorf("%s/%s = %+v, want the peak resident size of the largest server", target, peakRSSLabel, peak)
			continue
		}
		if peak.Note != "" {
			continue
		}
		for _, r := range results {
			if r.Target == target && !strings.HasPrefix(r.Workload, "memory-") && maxRSS(r) > peak.RSSBytes {
				t.Errorf("%s/%s: resident %d bytes, above the peak %d", target, r.Workload, maxRSS(r), peak.RSSBytes)
			}
		}
	}
}

// runSmoke runs kite-bench with args and returns its JSON lines by
// "target/workload".
func runSmoke(t *testing.T, args ...string) map[string]result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := runMain(args, &stdout, &stderr); code != 0 {
		t.Fatalf("kite-bench %s: exit code %d\nstderr:\n%s\nstdout:\n%s", strings.Join(args, " "), code, &stderr, &stdout)
	}
	results := map[string]result{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("{")) {
			continue // the human-readable tables
		}
		var r result
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("JSON line %q: %v", line, err)
		}
		results[r.Target+"/"+r.Workload] = r
	}
	return results
}

// checkEveryWorkload wants one correct result per workload of workloads
// (comma-separated) and target: operations done, no errors, nothing missed
// or duplicated; and the rows measured beside them: the load of the shared
// keys, list-under-writes' writer.
func checkEveryWorkload(t *testing.T, results map[string]result, targets []string, workloads string) {
	t.Helper()
	rows := []string{loadLabel}
	for wl := range strings.SplitSeq(workloads, ",") {
		rows = append(rows, wl)
		if wl == "list-under-writes" {
			rows = append(rows, wl+writeLabelSuffix)
		}
	}
	for _, target := range targets {
		for _, wl := range rows {
			r, ok := results[target+"/"+wl]
			switch {
			case !ok:
				t.Errorf("%s/%s: no JSON line", target, wl)
			case r.Ops <= 0 || r.Errors != 0 || r.Missed != 0 || r.Duplicates != 0:
				t.Errorf("%s/%s = %+v, want ops > 0 and no errors, missed or duplicates", target, wl, r)
			}
		}
		if r := results[target+"/"+loadLabel]; r.Ops != 200 {
			t.Errorf("%s/%s: %d keys loaded, want --smoke's 200", target, loadLabel, r.Ops)
		}
		if r, ok := results[target+"/delete"]; ok && r.Ops != 100 {
			t.Errorf("%s/delete: %d keys deleted, want --smoke's --total 100", target, r.Ops)
		}
	}
}

// Test_SmokeCompareDatabase runs --compare in postgres and in mysql mode:
// a reference etcd and two kite servers on one fresh database, every
// default workload and the cross-server watch, tiny, and no database left
// behind. It builds kite (or uses $KITE_BENCH_KITE_BINARY) and needs the
// local Postgres of KITE_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/postgres) and the local MySQL or
// MariaDB of KITE_TEST_MYSQL (default root@tcp(127.0.0.1:3306)/); where
// one is unreachable its mode is skipped, except under CI=true where it
// fails. kine is not part of it: building kine takes minutes.
func Test_SmokeCompareDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	for _, mode := range []struct {
		datastore, adminFlag, envVar, admin string
		// databases lists the databases named kite_bench_*.
		databases func(ctx context.Context, admin string) (map[string]bool, error)
	}{
		{datastorePostgres, "--postgres-admin", "KITE_TEST_POSTGRES", testenv.DefaultPostgresAdmin, pgBenchDatabases},
		{datastoreMySQL, "--mysql-admin", "KITE_TEST_MYSQL", testenv.DefaultMySQLAdmin, myBenchDatabases},
	} {
		t.Run(mode.datastore, func(t *testing.T) {
			admin := os.Getenv(mode.envVar)
			if admin == "" {
				admin = mode.admin
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			before, err := mode.databases(ctx, admin)
			if err != nil {
				msg := fmt.Sprintf("%s unreachable (set %s to an admin connection string): %v", mode.datastore, mode.envVar, err)
				if os.Getenv("CI") == "true" {
					t.Fatal(msg)
				}
				t.Skip(msg)
			}
			kite := buildKite(t)
			results := runSmoke(t, "--smoke", "--compare", "--datastore", mode.datastore, mode.adminFlag, admin,
				"--kite-binary", kite, "--kite-servers", "2", "--workloads", smokeWorkloads+",watch-remote",
				"--memory-keys", "300", "--work-dir", t.TempDir())
			checkEveryWorkload(t, results, []string{"etcd", "kite"}, smokeWorkloads)
			checkPeakRSS(t, results, []string{"etcd", "kite"})
			for _, target := range []string{"etcd", "kite"} {
				r, ok := results[target+"/memory-300"]
				if !ok || r.RSSBytes <= 0 || r.Ops != 300 {
					t.Errorf("%s memory result = %+v, want 300 keys and a resident size", target, r)
				}
			}
			for _, target := range []string{"etcd", "kite"} {
				r, ok := results[target+"/watch-remote"]
				if !ok || r.Ops <= 0 || r.Errors != 0 || r.Missed != 0 || r.Duplicates != 0 {
					t.Errorf("%s/watch-remote = %+v, want ops > 0 and no errors, missed or duplicates", target, r)
				}
			}
			if r := results["kite/watch-remote"]; r.Note != "" {
				t.Errorf("kite/watch-remote on two servers has note %q, want the watchers on the other server", r.Note)
			}
			if r := results["etcd/watch-remote"]; r.Note == "" {
				t.Errorf("etcd/watch-remote on one server has no note saying so")
			}
			// A kite-bench run of someone else's on the same server at the
			// same time would show here too; CI runs nothing beside the tests.
			after, err := mode.databases(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			for name := range after {
				if !before[name] {
					t.Errorf("database %s left behind", name)
				}
			}
		})
	}
}

// buildKite returns $KITE_BENCH_KITE_BINARY, or else a kite built from
// this module.
func buildKite(t *testing.T) string {
	t.Helper()
	if kite := os.Getenv("KITE_BENCH_KITE_BINARY"); kite != "" {
		return kite
	}
	root, err := testenv.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	kite, err := testenv.BuildKite(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return kite
}

// Test_SmokeCompareRaftSQL runs --compare in raftsql mode: a kite raft
// cluster of 3 members against a reference etcd cluster of 3, every
// default workload, the cross-member watch and failover (2 leader kills
// per cluster), tiny. It starts 12 server processes and kills 4, which
// takes half a minute, so it is not part of -short. It builds kite (or
// uses $KITE_BENCH_KITE_BINARY).
func Test_SmokeCompareRaftSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two raft clusters of three processes and kills their leaders")
	}
	kite := buildKite(t)
	results := runSmoke(t, "--smoke", "--compare", "--datastore", "raftsql", "--members", "3",
		"--kite-binary", kite, "--workloads", smokeWorkloads+",watch-remote,failover",
		"--memory-keys", "300", "--work-dir", t.TempDir())
	checkEveryWorkload(t, results, []string{"etcd", "kite"}, smokeWorkloads)
	checkPeakRSS(t, results, []string{"etcd", "kite"})
	for _, target := range []string{"etcd", "kite"} {
		if r := results[target+"/"+peakRSSLabel]; len(r.RSSNodesBytes) != 3 || !strings.Contains(r.Note, "started again") {
			t.Errorf("%s/%s = %+v, want each of 3 members' peak and a note on the members failover restarted", target, peakRSSLabel, r)
		}
		r, ok := results[target+"/memory-300"]
		if !ok || r.Ops != 300 || len(r.RSSNodesBytes) != 3 || r.RSSMaxBytes <= 0 || r.RSSBytes < 3*r.RSSMaxBytes/2 {
			t.Errorf("%s memory result = %+v, want 300 keys and the resident size of each of 3 members", target, r)
		}
		// The cost of a write, the leader apart: every member spent CPU,
		// every member synced its WAL, and the leader's log grew.
		if r := results[target+"/put@64"]; len(r.CPUNodesSeconds) != 3 || r.CPUPer1kOps <= 0 || !strings.HasPrefix(r.Leader, target+"-") ||
			r.LeaderCPUPer1kOps <= 0 || r.FollowersCPUPer1kOps <= 0 || r.WALSyncsPerOp <= r.LeaderWALSyncsPerOp || r.LeaderWALSyncsPerOp <= 0 ||
			r.RaftEntriesPerOp <= 0 || r.RaftEntriesPerOp > 1.5 {
			t.Errorf("%s/put@64 cost = %+v, want CPU per member, the leader's and the followers' apart, WAL syncs of all members and raft entries per write", target, r.cost)
		}
		// The backend commits are not checked: etcd commits bbolt every
		// 100 ms, and a raftsql member applying behind its WAL (kite's
		// default) flushes into SQLite as often, which a smoke run may not
		// last.
		if r := results[target+"/watch-remote"]; r.Ops <= 0 || r.Errors != 0 || r.Missed != 0 || r.Duplicates != 0 || r.Note != "" {
			t.Errorf("%s/watch-remote = %+v, want ops > 0, nothing lost and the watchers on other members", target, r)
		}
		r, ok = results[target+"/failover"]
		f := r.Failover
		if !ok || f == nil || r.Ops != 2 || len(f.WriteMs) != 2 || len(f.LeaderMs) != 2 || len(f.RejoinMs) != 2 || len(f.Killed) != 2 {
			t.Errorf("%s/failover = %+v (failover %+v), want 2 rounds", target, r, f)
			continue
		}
		for i := range 2 {
			// A new leader needs at least one election timeout (1 s) of
			// silence from the old one to be elected.
			if f.WriteMs[i] < 500 || f.LeaderMs[i] < 500 || f.RejoinMs[i] <= 0 || !strings.HasPrefix(f.Killed[i], target+"-") {
				t.Errorf("%s/failover round %d: killed %s, write %v ms, leader %v ms, rejoin %v ms; want a member of %s killed and each time above the election timeout's half",
					target, i+1, f.Killed[i], f.WriteMs[i], f.LeaderMs[i], f.RejoinMs[i], target)
			}
		}
	}
}

// Test_FailoverRefused: failover kills a raft leader, so it is refused
// where there is none to kill or no quorum would survive it.
func Test_FailoverRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--compare", "--workloads", "failover"},
		{"--compare", "--datastore", "postgres", "--workloads", "put,failover"},
		{"--compare", "--datastore", "raftsql", "--workloads", "failover"},
		{"--compare", "--datastore", "raftsql", "--members", "2", "--workloads", "failover"},
		{"--endpoints", "http://127.0.0.1:2379", "--workloads", "failover"},
	} {
		var stderr bytes.Buffer
		if code := runMain(args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--members 3 or more") {
			t.Errorf("kite-bench %s: exit code %d, stderr %q; want 2 and a message asking for --members 3 or more",
				strings.Join(args, " "), code, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if code := runMain([]string{"--compare", "--members", "3"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--datastore raftsql") {
		t.Errorf("--members without raftsql: exit code %d, stderr %q; want 2 and a message naming --datastore raftsql", code, stderr.String())
	}
}

// pgBenchDatabases returns the names of the databases kite-bench makes on
// a Postgres.
func pgBenchDatabases(ctx context.Context, admin string) (map[string]bool, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'kite\\_bench\\_%'")
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m, nil
}

// myBenchDatabases returns the names of the databases kite-bench makes on
// a MySQL or MariaDB.
func myBenchDatabases(ctx context.Context, admin string) (map[string]bool, error) {
	db, err := testenv.OpenMySQLAdmin(ctx, admin)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'kite\\_bench\\_%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		m[n] = true
	}
	return m, rows.Err()
}
