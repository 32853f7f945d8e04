package main

import (
	"fmt"

	"github.com/kite-db/kite/pkg/datastore"
)

// modeFlags names the flags that only one storage mode has. Given in
// another mode they are refused at start, as etcd refuses a flag it does
// not know, rather than accepted and ignored: a user who asked for a
// behaviour must not believe they have it.
var modeFlags = []struct{ flag, mode, instead string }{
	{"experimental-sqlite-log-commit", datastore.KindSQLite, "raftsql applies behind its WAL already: --raft-apply-behind"},
	{"raft-apply-behind", datastore.KindRaftSQL, ""},
	{"raft-pack-proposals", datastore.KindRaftSQL, ""},
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
		if !set[m.flag] || m.mode == mode {
			continue
		}
		msg := fmt.Sprintf("--%s is a %s-mode flag; this server is in %s mode", m.flag, m.mode, mode)
		if m.instead != "" && mode == datastore.KindRaftSQL {
			msg += " (" + m.instead + ")"
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}
