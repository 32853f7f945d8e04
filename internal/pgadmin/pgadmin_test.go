package pgadmin

import (
	"strings"
	"testing"
)

func TestWithDatabase(t *testing.T) {
	for _, c := range []struct{ admin, want string }{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://postgres@127.0.0.1:5432/db1?sslmode=disable"},
		{"postgresql://u:p@h/x?dbname=x", "postgresql://u:p@h/db1?dbname=db1"},
		{"host=127.0.0.1 user=postgres", "host=127.0.0.1 user=postgres dbname=db1"},
	} {
		got, err := WithDatabase(c.admin, "db1")
		if err != nil || got != c.want {
			t.Errorf("WithDatabase(%q) = %q, %v; want %q", c.admin, got, err, c.want)
		}
	}
}

func TestNewName(t *testing.T) {
	a, err := NewName("Kite_Bench_Put_", 4)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewName("Kite_Bench_Put_", 4)
	if !strings.HasPrefix(a, "kite_bench_put_") || len(a) != len("kite_bench_put_")+8 || a == b {
		t.Errorf("NewName gave %q and %q", a, b)
	}
}
