package mysql_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/drivers/mysql/mysqltest"
)

// dbName is the database a DSN of mysqltest.NewDatabase names.
func dbName(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DBName
}

// TestOpenCreatesMissingDatabase: a database that does not exist is
// created when the user may.
func TestOpenCreatesMissingDatabase(t *testing.T) {
	dsn := mysqltest.NewDatabase(t) // dropped at the end, whoever made it
	mysqltest.Exec(t, dsn, "DROP DATABASE "+dbName(t, dsn))
	b := mustOpen(t, dsn)
	tx, err := b.BeginRead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if cur, _, err := tx.Revisions(context.Background()); err != nil || cur != 0 {
		t.Fatalf("revisions of the created database: %d, %v", cur, err)
	}
}

// TestOpenMissingDatabaseWithoutPrivilege: a user who may neither use nor
// create the database gets ErrDatabaseMissing naming both, at once.
func TestOpenMissingDatabaseWithoutPrivilege(t *testing.T) {
	dsn := mysqltest.NewDatabase(t)
	name := dbName(t, dsn)
	mysqltest.Exec(t, dsn, "DROP DATABASE "+name)
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	user := "kite_nc_" + hex.EncodeToString(id)
	mysqltest.Exec(t, mysqltest.NewDatabase(t), "CREATE USER '"+user+"'@'%'")
	t.Cleanup(func() { mysqltest.Exec(t, mysqltest.NewDatabase(t), "DROP USER '"+user+"'@'%'") })
	admin, err := gomysql.ParseDSN(mysqltest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	_, err = mysql.Open(context.Background(), "mysql://"+user+"@"+admin.Net+"("+admin.Addr+")/"+name, mysql.Options{})
	if !errors.Is(err, mysql.ErrDatabaseMissing) {
		t.Fatalf("Open as a user without privileges: %v; want ErrDatabaseMissing", err)
	}
	if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), user) {
		t.Errorf("the error names neither the database %s nor the user %s: %v", name, user, err)
	}
}
