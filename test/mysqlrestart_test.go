//go:build unix

package test

import (
	"syscall"
	"testing"

	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
)

// TestMySQLRestartUnderLoad is TestPostgresRestartUnderLoad on MariaDB:
// two kite servers on one database of a private mariadbd
// (mysqltest.NewServer), writers and a watcher on each, and mariadbd
// restarted twice mid-run: an orderly shutdown (SIGTERM: the server ends
// the sessions itself, as a service restart does) and then a crash
// (SIGKILL: connections drop mid-statement, and InnoDB's crash recovery
// must bring back every acknowledged commit). What must hold is
// restartUnderLoad's; the password kept out of the logs is a real one
// here: kite connects as a user created with it.
func TestMySQLRestartUnderLoad(t *testing.T) {
	if againstEtcd {
		t.Skip("the database is MariaDB")
	}
	db := mysqltest.NewServer(t, "")
	const password = "r3start-s3cret"
	db.Exec(t, "CREATE USER 'kite'@'%' IDENTIFIED BY '"+password+"'", "GRANT ALL ON *.* TO 'kite'@'%'")
	restartUnderLoad(t, databaseRestarts{
		name:     "mariadbd",
		dsn:      "mysql://kite:" + password + "@tcp(" + db.Addr() + ")/kite",
		password: password,
		restarts: []namedRestart{
			{"SIGTERM", func() { db.Restart(t, syscall.SIGTERM) }},
			{"SIGKILL", func() { db.Restart(t, syscall.SIGKILL) }},
		},
		log: func() string { return db.LogTail(60) },
	})
}
