package test

import (
	"strings"
	"testing"
)

// TestPostgresRestartUnderLoad: two kite servers on one Postgres of the
// test's own, restarted (pg_ctl restart -m fast) under load; what must
// hold is restartUnderLoad's. Postgres's trust auth ignores the password:
// it is there to be kept out of the logs.
func TestPostgresRestartUnderLoad(t *testing.T) {
	pg := startPrivatePostgres(t)
	const password = "r3start-s3cret"
	restartUnderLoad(t, databaseRestarts{
		name:     "postgres",
		dsn:      strings.Replace(pg.DSN("postgres"), "postgres@", "postgres:"+password+"@", 1),
		password: password,
		restarts: []namedRestart{{"fast", pg.Restart}},
		log:      pg.Log,
	})
}
