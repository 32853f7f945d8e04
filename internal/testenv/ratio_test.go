package testenv

import (
	"strings"
	"testing"
)

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		num, den float64
		want     string
	}{
		{2, 1, "2.00x"},
		{0.0006, 1, "0.0006x"},
		{0, 1, "-"},
		{1, 0, "-"},
	} {
		if got := Ratio(c.num, c.den); got != c.want {
			t.Errorf("Ratio(%v, %v) = %q; want %q", c.num, c.den, got, c.want)
		}
	}
	if MiB(0) != "-" || MiB(3<<20/2) != "1.5" {
		t.Errorf("MiB(0) = %q, MiB(1.5 MiB) = %q", MiB(0), MiB(3<<20/2))
	}
}

func TestTable(t *testing.T) {
	var b strings.Builder
	tw := NewTable(&b)
	tw.Row("name", "ops/s")
	tw.Rowf("%s\t%d", "kite", 12345)
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	// Right-aligned: the padding goes before each cell.
	if want := "  name  ops/s\n  kite  12345\n"; b.String() != want {
		t.Errorf("table %q; want %q", b.String(), want)
	}
}
