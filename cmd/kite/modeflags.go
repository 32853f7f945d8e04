package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kite-db/kite/pkg/datastore"
)

// modeFlags names the flags that only one storage mode has. Given in
// another mode they are refused at start, as etcd refuses a flag it does
// not know, rather than accepted and ignored: a user who asked for a
// behaviour must not believe they have it. hint, by the server's mode,
// says what that mode has instead.
//
// group is the helpGroups section the flag is listed under; modes are the
// modes that have it (one, or postgres and mysql for a database server's
// connection pool).
var modeFlags = []struct {
	flag, group string
	modes       []string
	hint        map[string]string
}{
	{"experimental-sqlite-log-commit", datastore.KindSQLite, []string{datastore.KindSQLite},
		map[string]string{datastore.KindRaftSQL: "raftsql applies behind its WAL already: --raft-apply-behind"}},
	{"raft-apply-behind", datastore.KindRaftSQL, []string{datastore.KindRaftSQL}, nil},
	{"raft-pack-proposals", datastore.KindRaftSQL, []string{datastore.KindRaftSQL}, nil},
	{"datastore-max-open-connections", groupDatabase, databaseModes, poolHint},
	{"datastore-max-idle-connections", groupDatabase, databaseModes, poolHint},
	{"datastore-connection-max-lifetime", groupDatabase, databaseModes, poolHint},
	{"datastore-wake-listen", groupDatabase, []string{datastore.KindMySQL},
		map[string]string{datastore.KindPostgres: "postgres mode wakes the other servers through LISTEN/NOTIFY"}},
}

// groupDatabase is the helpGroups section of the modes on a database
// server; databaseModes are those modes.
const groupDatabase = "database"

var databaseModes = []string{datastore.KindPostgres, datastore.KindMySQL}

// poolHint says why a database connection-pool flag means nothing in the
// modes that store into a local SQLite file.
var poolHint = map[string]string{
	datastore.KindSQLite:  "the embedded database has no connection pool to a server",
	datastore.KindRaftSQL: "each member stores into its own embedded SQLite file",
}

// mode is the storage mode the flags select: raftsql when etcd's cluster
// flags are given, else the kind of --datastore-endpoint ("" when the
// endpoint is malformed; opening the storage reports that).
func (f *serveFlags) mode() string {
	if f.raftMode() {
		return datastore.KindRaftSQL
	}
	kind, err := datastore.Kind(f.datastoreEndpoint)
	if err != nil {
		return ""
	}
	return kind
}

// checkModeFlags refuses a mode's flag that was given (on the command
// line or in the environment: set) in another mode.
func (f *serveFlags) checkModeFlags(set map[string]bool) error {
	mode := f.mode()
	if mode == "" {
		return nil
	}
	for _, m := range modeFlags {
		if !set[m.flag] || slices.Contains(m.modes, mode) {
			continue
		}
		err := fmt.Errorf("--%s is a %s-mode flag; this server is in %s mode", m.flag, strings.Join(m.modes, "- and "), mode)
		if hint := m.hint[mode]; hint != "" {
			err = fmt.Errorf("%w (%s)", err, hint)
		}
		return err
	}
	return nil
}

// helpGroups are kite --help's sections, in order: the flags of every
// mode, then each mode's own.
var helpGroups = []struct{ mode, title string }{
	{"", "Flags of every storage mode"},
	{datastore.KindSQLite, "sqlite mode (the default: --datastore-endpoint empty or sqlite://PATH)"},
	{datastore.KindRaftSQL, "raftsql mode (--datastore-endpoint raftsql, or etcd's cluster flags: --initial-cluster, --listen-peer-urls, --discovery-srv)"},
	{groupDatabase, "postgres and mysql modes (--datastore-endpoint postgres://... or mysql://...)"},
}

// raftsqlHelp are raftsql's flags that are not modeFlags: etcd's cluster
// flags, which select raftsql rather than being refused outside it.
var raftsqlHelp = map[string]bool{
	"listen-peer-urls": true, "initial-advertise-peer-urls": true, "initial-cluster": true,
	"initial-cluster-state": true, "initial-cluster-token": true, "discovery-srv": true,
	"discovery-srv-name": true, "heartbeat-interval": true, "election-timeout": true,
	"snapshot-count": true, "max-snapshots": true, "max-wals": true,
	"snapshot-catchup-entries": true, "experimental-snapshot-catchup-entries": true,
	"corrupt-check-time": true,
}

// raftTuning are etcd's raft, WAL and corruption-check tuning flags.
// etcd's manifests carry them for a single member as well (kubeadm's does),
// and a single etcd accepts them, so outside raftsql they are accepted
// too, so that such a manifest can point at kite unchanged, and named in
// a warning at start: there is no raft log or peer for them to tune.
var raftTuning = []string{
	"heartbeat-interval", "election-timeout", "snapshot-count", "max-snapshots", "max-wals",
	"snapshot-catchup-entries", "corrupt-check-time",
}

// idleRaftFlags are the raftTuning flags given (set) to a server that is
// not a raftsql member, in raftTuning's order.
func (f *serveFlags) idleRaftFlags(set map[string]bool) []string {
	if f.raftMode() {
		return nil
	}
	var idle []string
	for _, name := range raftTuning {
		if set[name] {
			idle = append(idle, "--"+name)
		}
	}
	return idle
}

// flagGroup is the helpGroups mode a flag is listed under.
func flagGroup(name string) string {
	for _, m := range modeFlags {
		if m.flag == name {
			return m.group
		}
	}
	if raftsqlHelp[name] || strings.HasPrefix(name, "peer-") {
		return datastore.KindRaftSQL
	}
	return ""
}
