package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
)

// digits is a ten-row table; five of them crossed number the rows of
// planData without a recursive CTE (MySQL stops those at 1,000 rows).
const digits = `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
	UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`

// planData fills the database with 100,000 log rows: 25,000 keys written
// four times each (revision g writes key (g-1) % 25000), a tenth of them
// deleted by their last write, one in fifty attached to a lease, and the
// log compacted at revision 50,000 (as far as the revision row says; the
// rows stay, so the planner sees the whole history).
var planData = []string{
	`INSERT INTO kite_log (rev, sub, k, create_rev, version, lease, deleted, value)
	SELECT g, 0,
		CONCAT('/registry/pods/ns-', LPAD(kk DIV 1000, 2, '0'), '/pod-', LPAD(kk, 6, '0')),
		IF(v = 4 AND kk % 10 = 0, 0, kk + 1),
		IF(v = 4 AND kk % 10 = 0, 0, v),
		IF(kk % 50 = 0 AND NOT (v = 4 AND kk % 10 = 0), 1000 + (kk DIV 50) % 20, 0),
		v = 4 AND kk % 10 = 0,
		IF(v = 4 AND kk % 10 = 0, '', REPEAT('v', 200))
	FROM (SELECT g, (g - 1) % 25000 AS kk, (g - 1) DIV 25000 + 1 AS v
		FROM (SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS g
			FROM ` + digits + ` AS a, ` + digits + ` AS b, ` + digits + ` AS c, ` + digits + ` AS e, ` + digits + ` AS f) AS n
	) AS x`,
	`INSERT INTO kite_live (k, mod_rev, create_rev, version, lease, value)
	SELECT k, rev, create_rev, version, lease, value FROM kite_log WHERE rev > 75000 AND NOT deleted`,
	`UPDATE kite_revision SET current_rev = 100000, compacted_rev = 50000`,
	`ANALYZE TABLE kite_log, kite_live`,
}

// TestQueryPlans checks, on a log of 100,000 rows, that every read and the
// compaction reach rows through an index: no full scan of the log (or of
// kite_live, except where a whole-keyspace read may choose one), and no
// filesort or temporary table, since either makes a request cost grow
// with history instead of with its answer. (A derived table is read
// whole, and is no problem: it holds one page.)
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	dsn := mysqltest.NewDatabase(t)
	b, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	start := time.Now()
	for _, s := range planData {
		rows, err := b.db.QueryContext(ctx, s)
		if err != nil {
			t.Fatalf("load plan data: %v", err)
		}
		rows.Close()
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
	for _, open := range []bool{false, true} {
		args := func(limit int64) []any {
			a := []any{from}
			if !open {
				a = append(a, to)
			}
			if limit > 0 {
				a = append(a, limit)
			}
			return a
		}
		for _, keysOnly := range []bool{false, true} {
			for _, limit := range []int64{0, 500} {
				name := fmt.Sprintf("range open=%v keysOnly=%v limit=%d", open, keysOnly, limit)
				stmts = append(stmts, stmt{name, b.q.ranges[rangeIndex(open, keysOnly, limit > 0)],
					args(limit), open && limit == 0})
			}
			// A historical page, of the largest size rangeAt asks for.
			hist := []any{from}
			if !open {
				hist = append(hist, to)
			}
			stmts = append(stmts, stmt{fmt.Sprintf("historical range open=%v keysOnly=%v", open, keysOnly),
				b.q.hist[histIndex(open, keysOnly)], append(hist, int64(60000), int64(histPage)), false})
		}
		stmts = append(stmts, stmt{fmt.Sprintf("count open=%v", open), b.q.counts[b2i(open)], args(0), open})
	}
	key := []byte("/registry/pods/ns-03/pod-003001")
	other := []byte("/registry/pods/ns-07/pod-007002")
	stmts = append(stmts,
		stmt{"changes", sqlChanges, []any{int64(60000), int64(61000)}, false},
		stmt{"changes limit", sqlChanges + " LIMIT ?", []any{int64(60000), int64(61000), int64(1000)}, false},
		stmt{"previous rows", sqlPrevBranch + " UNION ALL " + sqlPrevBranch,
			[]any{int64(0), key, key, int64(60000), int64(1), other, other, int64(90000)}, false},
		stmt{"get", sqlGet, []any{key}, false},
		stmt{"get latest", sqlGetLatest, []any{key}, false},
		stmt{"prefetch", prefetchSQL(2), []any{key, other}, false},
		stmt{"lease keys", sqlLeaseKeys, []any{int64(1005)}, false},
		stmt{"compact find", sqlCompactFind, []any{int64(1), int64(1000), int64(50000), int64(50000)}, false},
		stmt{"compact delete", sqlCompactDelete + "((?, ?), (?, ?))", []any{int64(7), int64(0), int64(9), int64(0)}, false},
		stmt{"delete live", sqlDeleteLive + "(?, ?)", []any{key, from}, false},
	)
	for _, s := range stmts {
		plan := explain(t, b.db, s.sql, s.args)
		for _, p := range planProblems(plan, s.liveScanOK) {
			t.Errorf("%s: %s in\n%s", s.name, p, formatPlan(plan))
		}
		if testing.Verbose() {
			t.Logf("%s:\n%s", s.name, formatPlan(plan))
		}
	}
}

// planRow is one row of EXPLAIN's table.
type planRow map[string]string

func explain(t *testing.T, db *sql.DB, query string, args []any) []planRow {
	t.Helper()
	rows, err := db.Query("EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var plan []planRow
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		r := planRow{}
		for i, c := range cols {
			r[strings.ToLower(c)] = vals[i].String
		}
		plan = append(plan, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

func formatPlan(plan []planRow) string {
	var b strings.Builder
	for _, r := range plan {
		fmt.Fprintf(&b, "  %s %-18s %-6s type=%-6s key=%-16s rows=%-7s %s\n",
			r["id"], r["select_type"], r["table"], r["type"], r["key"], r["rows"], r["extra"])
	}
	return b.String()
}

// planProblems returns what is wrong with plan: a full scan (type ALL, or
// a walk of a whole index, type index) of the log, or of kite_live unless
// liveScanOK, and any filesort or temporary table.
func planProblems(plan []planRow, liveScanOK bool) []string {
	var bad []string
	for _, r := range plan {
		table := r["table"]
		log := table == "kite_log" || table == "l" || table == "n" || table == "h" || table == "x"
		full := r["type"] == "ALL" || r["type"] == "index"
		if full && (log || table == "kite_live" && !liveScanOK) {
			bad = append(bad, fmt.Sprintf("full scan (type=%s) of %s", r["type"], table))
		}
		for _, e := range []string{"Using filesort", "Using temporary"} {
			if strings.Contains(r["extra"], e) {
				bad = append(bad, fmt.Sprintf("%q on %s", e, table))
			}
		}
	}
	return bad
}

func TestPlanProblems(t *testing.T) {
	plan := []planRow{
		{"table": "l", "type": "ALL"},
		{"table": "kite_live", "type": "ALL"},
		{"table": "kite_live", "type": "range", "extra": "Using where; Using filesort"},
		{"table": "kite_revision", "type": "ALL"},
		{"table": "n", "type": "ref", "extra": "Using index"},
	}
	if got := planProblems(plan, false); len(got) != 3 {
		t.Errorf("planProblems found %q, want the scans of the log and kite_live and the filesort", got)
	}
	if got := planProblems(plan, true); len(got) != 2 {
		t.Errorf("planProblems with liveScanOK found %q, want the log scan and the filesort", got)
	}
}
