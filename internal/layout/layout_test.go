// Package layout holds one test: the package map of docs/architecture.md
// ("Packages and what each may import"), checked against what the code
// imports, so the map a newcomer reads cannot drift from the code.
package layout

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kite-db/kite/"

// allowed maps every package of the module (without the module prefix) to
// the packages of the module its non-test files may import. A package
// missing from the map fails the test: a new package is placed in the map,
// and in docs/architecture.md, when it is added.
var allowed = map[string][]string{
	// The contract and the machinery over it know no storage.
	"pkg/membership":       nil,
	"pkg/mvcc":             nil,
	"pkg/mvcc/memtail":     {"pkg/mvcc"},
	"pkg/mvcc/backendtest": {"pkg/mvcc"},
	"pkg/mvcc/storetest":   {"pkg/mvcc"},
	// Drivers implement pkg/mvcc's Backend. A snapshot is a SQLite file
	// in every mode, so the database-server drivers write theirs with
	// the sqlite driver; raftsql applies into SQLite behind memtail.
	"pkg/drivers/sqlite":          {"pkg/mvcc"},
	"pkg/drivers/postgres":        {"pkg/mvcc", "pkg/drivers/sqlite"},
	"pkg/drivers/mysql":           {"pkg/mvcc", "pkg/drivers/sqlite"},
	"pkg/drivers/raftsql":         {"pkg/mvcc", "pkg/mvcc/memtail", "pkg/drivers/sqlite", "pkg/membership"},
	"pkg/drivers/postgres/pgtest": {"internal/freeport", "internal/pgadmin"},
	"pkg/drivers/mysql/mysqltest": {"internal/freeport"},
	// The one place that knows every driver.
	"pkg/datastore": {"pkg/mvcc", "pkg/mvcc/memtail", "pkg/drivers/sqlite", "pkg/drivers/postgres", "pkg/drivers/mysql", "pkg/drivers/raftsql"},
	// The server sees a Backend and the cluster contract, never a driver.
	"pkg/server":         {"pkg/mvcc", "pkg/membership"},
	"pkg/server/tlstest": nil,
	// The binary wires the storage into the server.
	"cmd/kite": {"pkg/datastore", "pkg/server", "pkg/mvcc", "pkg/drivers/sqlite", "pkg/drivers/postgres", "pkg/drivers/mysql", "pkg/drivers/raftsql"},
	// Support for tests and load tools, never for the server.
	"internal/freeport": nil,
	"internal/latency":  nil,
	"internal/pgadmin":  nil,
	"internal/layout":   nil,
	"internal/testenv":  {"internal/freeport", "internal/pgadmin"},
	// The load tools drive servers from outside, as a user's client does;
	// what they share (starting etcd, kine and kite in every mode,
	// databases, CPU and memory per process, ratio tables) is testenv's.
	"cmd/kite-bench": {"internal/latency", "internal/testenv"},
	"cmd/kite-soak":  {"internal/latency", "internal/testenv"},
	// The end-to-end suites start kite binaries, embedded etcds and
	// databases; their _test files may import more.
	"test": {"internal/testenv", "pkg/drivers/sqlite", "pkg/mvcc",
		"pkg/drivers/postgres/pgtest", "pkg/drivers/mysql/mysqltest", "pkg/server/tlstest"},
}

func TestImportsFollowThePackageMap(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue
		}
		want, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s is not in the package map (internal/layout and docs/architecture.md)", pkg)
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if ours && !slices.Contains(want, dep) {
				t.Errorf("%s imports %s, which the package map does not allow", pkg, dep)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("go list named %d of the module's packages; the check saw too little to mean anything:\n%s", seen, out)
	}
}
