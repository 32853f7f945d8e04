package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestQueryPlans checks that every statement reaches rows through an index:
// no full scan of the log, and no sort of a whole result, since
// either would make reads grow with history instead of with the answer.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, filepath.Join(t.TempDir(), "kite.db"), Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	for id, st := range b.defs {
		if st == "" || strings.HasPrefix(st, "BEGIN") || st == "COMMIT" || st == "ROLLBACK" {
			continue
		}
		// The values do not change the plan. Only qCompactCandidates
		// numbers its placeholders (?1..?3).
		n := strings.Count(st, "?")
		if strings.Contains(st, "?3") {
			n = 3
		}
		args := make([]any, n)
		for i := range args {
			args[i] = 1
		}
		rows, err := b.wconn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+st, args...)
		if err != nil {
			t.Fatalf("explain statement %d: %v", id, err)
		}
		var plan []string
		for rows.Next() {
			var a, p, n int
			var detail string
			if err := rows.Scan(&a, &p, &n, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		for _, line := range plan {
			bad := (strings.HasPrefix(line, "SCAN ") && !strings.HasPrefix(line, "SCAN k") &&
				!strings.Contains(line, "CONSTANT ROW") && !strings.Contains(line, "VALUES CLAUSE") &&
				// the ids a statement is given (json_each): a walk of
				// its argument, not of a table
				!strings.Contains(line, "VIRTUAL TABLE")) ||
				strings.Contains(line, "TEMP B-TREE") || strings.HasPrefix(line, "MATERIALIZE")
			// Leases, Alarms and the leased keys list their whole
			// (small) tables by design.
			if bad && id != int(qLeases) && id != int(qAlarms) && id != int(qLeasedKeys) {
				t.Errorf("statement %d: plan step %q in\n%s", id, line, text)
			}
		}
	}
}
