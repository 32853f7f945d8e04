package main

import (
	"strings"
	"testing"
)

// A flag of one mode given in another is refused, naming both modes;
// given in its own mode, or not given, it is accepted.
func TestModeFlagsRefusedElsewhere(t *testing.T) {
	for _, c := range []struct {
		args    []string
		env     map[string]string
		refused string // "" accepted; else a part of the error
	}{
		{[]string{"--experimental-sqlite-log-commit"}, nil, ""},
		{[]string{"--experimental-sqlite-log-commit", "--datastore-endpoint", "postgres://127.0.0.1/kite"}, nil, "sqlite-mode flag; this server is in postgres mode"},
		{[]string{"--experimental-sqlite-log-commit", "--datastore-endpoint", "mysql://root@tcp(127.0.0.1:3306)/kite"}, nil, "in mysql mode"},
		{[]string{"--experimental-sqlite-log-commit", "--datastore-endpoint", "raftsql"}, nil, "--raft-apply-behind"},
		{[]string{"--datastore-endpoint", "raftsql"}, map[string]string{"KITE_EXPERIMENTAL_SQLITE_LOG_COMMIT": "true"}, "in raftsql mode"},
		{[]string{"--raft-apply-behind=false", "--initial-cluster", "a=http://127.0.0.1:2380", "--name", "a"}, nil, ""},
		{[]string{"--raft-apply-behind=false"}, nil, "raftsql-mode flag; this server is in sqlite mode"},
		{[]string{"--raft-pack-proposals", "--datastore-endpoint", "postgres://127.0.0.1/kite"}, nil, "raftsql-mode flag"},
		{nil, nil, ""},
	} {
		_, err := parseServeFlags(c.args, env(c.env))
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%v %v: %v, want accepted", c.args, c.env, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%v %v: %v, want refused with %q", c.args, c.env, err, c.refused)
		}
	}
}
