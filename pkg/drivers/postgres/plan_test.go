package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// planData fills the database with 100,000 log rows: 25,000 keys written
// four times each (revision g writes key (g-1) % 25000), a tenth of them
// deleted by their last write, one in fifty attached to a lease, and the
// log compacted at revision 50,000 (as far as the revision row says; the
// rows stay, so the planner sees the whole history).
const planData = `
INSERT INTO kite_log (rev, sub, key, create_rev, version, lease, deleted, value)
SELECT g, 0,
	convert_to(format('/registry/pods/ns-%s/pod-%s', lpad((k / 1000)::text, 2, '0'), lpad(k::text, 6, '0')), 'UTF8'),
	CASE WHEN v = 4 AND k % 10 = 0 THEN 0 ELSE k + 1 END,
	CASE WHEN v = 4 AND k % 10 = 0 THEN 0 ELSE v END,
	CASE WHEN k % 50 = 0 AND NOT (v = 4 AND k % 10 = 0) THEN 1000 + (k / 50) % 20 ELSE 0 END,
	v = 4 AND k % 10 = 0,
	CASE WHEN v = 4 AND k % 10 = 0 THEN ''::bytea ELSE convert_to(repeat('v', 200), 'UTF8') END
FROM generate_series(1, 100000) AS g, LATERAL (SELECT (g - 1) % 25000 AS k, (g - 1) / 25000 + 1 AS v) AS x;
INSERT INTO kite_live (key, mod_rev, create_rev, version, lease, value)
SELECT key, rev, create_rev, version, lease, value FROM kite_log WHERE rev > 75000 AND NOT deleted;
UPDATE kite_revision SET current_rev = 100000, compacted_rev = 50000;
ANALYZE;
`

// TestQueryPlans checks, on a log of 100,000 rows, that every read and the
// compaction reach rows through an index: no sequential scan of the log
// (or of kite_live, except where a whole-keyspace read may choose one),
// and no sort of log rows, since either makes a request cost grow with
// history instead of with its answer. Each statement is checked twice:
// planned for its values (Postgres's first executions of a prepared
// statement) and as a generic plan (what it may switch to afterwards).
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	b, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	start := time.Now()
	if _, err := b.pool.Exec(ctx, planData); err != nil {
		t.Fatalf("load plan data: %v", err)
	}
	t.Logf("loaded 100,000 log rows in %v", time.Since(start).Round(time.Millisecond))

	from, to := []byte("/registry/pods/ns-03/"), []byte("/registry/pods/ns-030")
	type stmt struct {
		name string
		sql  string
		args []any
		// liveScanOK: a read of every key may scan kite_live.
		liveScanOK bool
	}
	var stmts []stmt
	for _, hist := range []bool{false, true} {
		for _, open := range []bool{false, true} {
			for _, keysOnly := range []bool{false, true} {
				for _, limit := range []int64{0, 500} {
					name := fmt.Sprintf("range hist=%v open=%v keysOnly=%v limit=%d", hist, open, keysOnly, limit)
					stmts = append(stmts, stmt{name, b.q.ranges[rangeIndex(hist, open, keysOnly)],
						rangeArgs(from, to, open, hist, 60000, &limit), open && limit == 0})
				}
			}
			stmts = append(stmts, stmt{fmt.Sprintf("count hist=%v open=%v", hist, open),
				b.q.counts[countIndex(hist, open)], rangeArgs(from, to, open, hist, 60000, nil), open})
		}
	}
	key := []byte("/registry/pods/ns-03/pod-003001")
	stmts = append(stmts,
		stmt{"get", sqlGet, []any{key}, false},
		stmt{"get latest", sqlGetLatest, []any{key}, false},
		stmt{"changes", sqlChanges, []any{int64(60000), int64(61000), int64(1000)}, false},
		stmt{"changes no limit", sqlChanges, []any{int64(60000), int64(61000), nil}, false},
		stmt{"changes prev", sqlChangesPrev, []any{int64(60000), int64(61000), int64(1000)}, false},
		stmt{"changes prev no limit", sqlChangesPrev, []any{int64(60000), int64(61000), nil}, false},
		stmt{"lease keys", sqlLeaseKeys, []any{int64(1005)}, false},
		stmt{"compact", sqlCompact, []any{int64(1), int64(1000), int64(50000)}, false},
		stmt{"delete live", sqlDeleteLive, []any{[][]byte{key}}, false},
	)

	// ANALYZE runs the statements: only then does EXPLAIN show the plan of
	// a recursive CTE's step. The transaction undoes the writes.
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "ROLLBACK")
	for i, s := range stmts {
		custom := explain(t, conn.Conn(), "EXPLAIN (ANALYZE, VERBOSE) "+s.sql, s.args)
		checkPlan(t, s.name+" (custom plan)", custom, s.liveScanOK)

		// A generic plan: the statement prepared, then explained with
		// plan_cache_mode forcing the generic plan.
		name := fmt.Sprintf("plan_test_%d", i)
		if _, err := conn.Conn().Prepare(ctx, name, s.sql); err != nil {
			t.Fatalf("%s: prepare: %v", s.name, err)
		}
		literals := make([]string, len(s.args))
		for j, a := range s.args {
			literals[j] = literal(t, a)
		}
		exec := "EXPLAIN (ANALYZE, VERBOSE) EXECUTE " + name
		if len(literals) > 0 {
			exec += "(" + strings.Join(literals, ", ") + ")"
		}
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		generic := explain(t, conn.Conn(), exec, nil)
		if _, err := conn.Exec(ctx, "RESET plan_cache_mode"); err != nil {
			t.Fatal(err)
		}
		checkPlan(t, s.name+" (generic plan)", generic, s.liveScanOK)
		if testing.Verbose() {
			t.Logf("%s:\n%s\ngeneric:\n%s", s.name, custom, generic)
		}
	}
}

// literal writes an argument as SQL: EXECUTE takes values, not
// placeholders.
func literal(t *testing.T, a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case int64:
		return fmt.Sprint(v)
	case []byte:
		return fmt.Sprintf("'\\x%x'::bytea", v)
	case [][]byte:
		var items []string
		for _, b := range v {
			items = append(items, literal(t, b))
		}
		return "ARRAY[" + strings.Join(items, ", ") + "]"
	}
	t.Fatalf("literal: unexpected %T", a)
	return ""
}

func explain(t *testing.T, conn *pgx.Conn, sql string, args []any) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return strings.Join(lines, "\n")
}

// checkPlan fails t for each of planProblems.
func checkPlan(t *testing.T, name, plan string, liveScanOK bool) {
	t.Helper()
	for _, step := range planProblems(plan, liveScanOK) {
		t.Errorf("%s: plan step %q in\n%s", name, step, plan)
	}
}

// planProblems returns the steps of plan that scan the whole log, or the
// whole of kite_live unless liveScanOK, or sort in a plan that reads the
// log. VERBOSE plans name tables with their schema.
func planProblems(plan string, liveScanOK bool) []string {
	readsLog := strings.Contains(plan, "kite_log")
	var bad []string
	for _, line := range strings.Split(plan, "\n") {
		node := strings.TrimLeft(line, " ->")
		seq := strings.HasPrefix(node, "Seq Scan on ")
		if seq && strings.Contains(node, "kite_log ") ||
			seq && strings.Contains(node, "kite_live ") && !liveScanOK ||
			strings.HasPrefix(node, "Sort ") && readsLog {
			bad = append(bad, node)
		}
	}
	return bad
}

func TestPlanProblems(t *testing.T) {
	plan := `Limit  (cost=0.29..1.78 rows=11 width=268)
  ->  Sort  (cost=1.0..2.0 rows=10 width=268)
        ->  Seq Scan on public.kite_log l  (cost=0.00..1353.25 rows=19576 width=0)
  ->  Seq Scan on public.kite_live  (cost=0.00..1353.25 rows=19576 width=0)
  ->  Seq Scan on public.kite_revision r  (cost=0.00..1.01 rows=1 width=16)`
	if got := planProblems(plan, false); len(got) != 3 {
		t.Errorf("planProblems found %q, want the sort and the scans of kite_log and kite_live", got)
	}
	if got := planProblems(plan, true); len(got) != 2 {
		t.Errorf("planProblems with liveScanOK found %q, want the sort and the scan of kite_log", got)
	}
}
