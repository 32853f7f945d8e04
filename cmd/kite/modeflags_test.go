package main

import (
	"flag"
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
		{[]string{"--datastore-max-open-connections=8"}, nil, "postgres- and mysql-mode flag; this server is in sqlite mode (the embedded database"},
		{nil, map[string]string{"KITE_DATASTORE_MAX_IDLE_CONNECTIONS": "2", "KITE_DATASTORE_ENDPOINT": "raftsql"}, "this server is in raftsql mode (each member"},
		{[]string{"--datastore-connection-max-lifetime=1m", "--datastore-endpoint", "postgres://127.0.0.1/kite"}, nil, ""},
		{[]string{"--datastore-max-open-connections=8", "--datastore-endpoint", "mysql://root@tcp(127.0.0.1:3306)/kite"}, nil, ""},
		{[]string{"--datastore-wake-listen=127.0.0.1:0", "--datastore-endpoint", "mysql://root@tcp(127.0.0.1:3306)/kite"}, nil, ""},
		{[]string{"--datastore-wake-listen=127.0.0.1:0", "--datastore-endpoint", "postgres://127.0.0.1/kite"}, nil, "mysql-mode flag; this server is in postgres mode (postgres mode wakes"},
		{[]string{"--datastore-wake-listen=127.0.0.1:0"}, nil, "in sqlite mode"},
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
	// The hint is for the mode that has the behaviour another way only.
	_, err := parseServeFlags([]string{"--experimental-sqlite-log-commit", "--datastore-endpoint", "postgres://127.0.0.1/kite"}, env(nil))
	if err == nil || strings.Contains(err.Error(), "raft-apply-behind") {
		t.Errorf("postgres mode: %v, want refused without raftsql's hint", err)
	}
}

// kite --help lists every flag once, a mode's flags under that mode.
func TestHelpGroupsFlagsByMode(t *testing.T) {
	var b strings.Builder
	fs := newServeFlagSet(&serveFlags{})
	printUsage(&b, fs)
	help := b.String()
	section := map[string]string{} // flag -> the section title above it
	title := ""
	for _, line := range strings.Split(help, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			title = line
		}
		if name, ok := strings.CutPrefix(line, "  --"); ok {
			name, _, _ = strings.Cut(name, " ")
			if _, dup := section[name]; dup {
				t.Errorf("--%s listed twice", name)
			}
			section[name] = title
		}
	}
	fs.VisitAll(func(fl *flag.Flag) {
		if _, ok := section[fl.Name]; !ok {
			t.Errorf("--%s missing from kite --help", fl.Name)
		}
	})
	for name, want := range map[string]string{
		"raft-apply-behind":              "raftsql mode",
		"initial-cluster":                "raftsql mode",
		"peer-cert-file":                 "raftsql mode",
		"experimental-sqlite-log-commit": "sqlite mode",
		"datastore-wake-listen":          "postgres and mysql modes",
		"data-dir":                       "Flags of every storage mode",
	} {
		if !strings.HasPrefix(section[name], want) {
			t.Errorf("--%s under %q, want %q", name, section[name], want)
		}
	}
}

// etcd's raft tuning flags are accepted in every mode, as a single etcd
// accepts them, and named for the warning at start outside raftsql.
func TestRaftTuningNamedOutsideRaftSQL(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		idle string
	}{
		{[]string{"--snapshot-count=10000", "--heartbeat-interval=100"}, nil, "--heartbeat-interval --snapshot-count"},
		{[]string{"--datastore-endpoint", "postgres://127.0.0.1/kite"}, map[string]string{"ETCD_ELECTION_TIMEOUT": "1000"}, "--election-timeout"},
		{[]string{"--experimental-snapshot-catchup-entries=100"}, nil, "--snapshot-catchup-entries"},
		{[]string{"--snapshot-count=10000", "--initial-cluster", "a=http://127.0.0.1:2380", "--name", "a"}, nil, ""},
		{nil, nil, ""},
	} {
		f, err := parseServeFlags(c.args, env(c.env))
		if err != nil {
			t.Errorf("%v %v: %v, want accepted", c.args, c.env, err)
			continue
		}
		if got := strings.Join(f.idleRaft, " "); got != c.idle {
			t.Errorf("%v %v: warned about %q, want %q", c.args, c.env, got, c.idle)
		}
	}
}
