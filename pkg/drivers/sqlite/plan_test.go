package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestQueryPlans checks that every statement reaches rows through an index:
// no full scan of the log or of live, and no sort of a whole result, since
// either would make reads grow with history instead of with the answer.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, filepath.Join(t.TempDir(), "kite.db"), Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	for id, st := range b.defs {
		if st.sql == "" || strings.HasPrefix(st.sql, "BEGIN") || st.sql == "COMMIT" || st.sql == "ROLLBACK" {
			continue
		}
		// The values do not change the plan. Only qCompactCandidates
		// numbers its placeholders (?1..?3).
		n := strings.Count(st.sql, "?")
		if strings.Contains(st.sql, "?3") {
			n = 3
		}
		args := make([]any, n)
		for i := range args {
			args[i] = 1
		}
		rows, err := b.wconn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+st.sql, args...)
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
			// Leases and Alarms list their whole (small) tables by
			// design; the unleased keys
			// are every key not in the partial lease index (never asked
			// for by the server).
			if bad && id != int(qLeases) && id != int(qAlarms) && id != int(qUnleasedKeys) {
				t.Errorf("statement %d: plan step %q in\n%s", id, line, text)
			}
		}
	}
}
