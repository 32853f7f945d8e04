package mvcc

import (
	"testing"
	"time"
)

// TestCompactStepFollowsTime: a compaction step that held the writer
// longer than stepTarget makes the next one smaller, a quick one larger,
// within a quarter and twice the last one, and never outside
// [minCompactStep, maxStep].
func TestCompactStepFollowsTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		step    int64
		held    time.Duration
		maxStep int64
		want    int64
	}{
		{"twice the target halves", 1000, 2 * stepTarget, 1000, 500},
		{"on target stays", 400, stepTarget, 1000, 400},
		{"quick grows at most twice", 100, stepTarget / 10, 1000, 200},
		{"growth stops at the maximum", 800, stepTarget / 10, 1000, 1000},
		{"a very slow step shrinks it a quarter", 1000, 100 * stepTarget, 1000, 250},
		{"never below the minimum", 20, 100 * stepTarget, 1000, minCompactStep},
		{"no measure doubles", 64, 0, 1000, 128},
		{"a maximum below the minimum wins", 7, stepTarget / 10, 7, 7},
	} {
		if got := nextStep(tc.step, tc.held, tc.maxStep); got != tc.want {
			t.Errorf("%s: nextStep(%d, %v, %d) = %d, want %d", tc.name, tc.step, tc.held, tc.maxStep, got, tc.want)
		}
	}
}
