package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/postgres"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		dsn, want string
	}{
		{"postgres://kite:s3cret@db:5432/kite?sslmode=disable",
			"postgres://kite:xxxxx@db:5432/kite?sslmode=disable"},
		{"postgresql://kite@db/kite", "postgresql://kite@db/kite"},
		{"postgres://db/kite?user=kite&password=s3cret&sslmode=require",
			"postgres://db/kite?password=xxxxx&sslmode=require&user=kite"},
		{"postgres://kite:s3c@ret@db1:5432,db2:5432/kite",
			"postgres://kite:xxxxx@db1:5432,db2:5432/kite"},
		{"postgres://kite:s3%zz@db/kite?password=s3cret", // not a valid URL
			"postgres://xxxxx@db/kite?password=xxxxx"},
		{"host=db user=kite password=s3cret dbname=kite",
			"host=db user=kite password=xxxxx dbname=kite"},
		{"host=db password = 's3 c\\'ret' dbname=kite",
			"host=db password = xxxxx dbname=kite"},
		{"host=db PASSWORD=s3cret", "host=db PASSWORD=xxxxx"},
		{"host=db user=kite", "host=db user=kite"},
	}
	for _, tc := range tests {
		got := postgres.Redact(tc.dsn)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
		if strings.Contains(got, "s3") {
			t.Errorf("Redact(%q) = %q leaks the password", tc.dsn, got)
		}
	}
}

// TestOpenErrorsHidePassword: neither a malformed connection string nor a
// server that cannot be reached puts the password in Open's error.
func TestOpenErrorsHidePassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://kite:s3cret%zz@127.0.0.1/kite",
		"host=127.0.0.1 password='s3cret",
		"postgres://kite:s3cret@127.0.0.1:1/kite?connect_timeout=2",
		"host=127.0.0.1 port=1 user=kite password=s3cret connect_timeout=2",
	} {
		_, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err == nil {
			t.Fatalf("Open(%s) succeeded", postgres.Redact(dsn))
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
}
