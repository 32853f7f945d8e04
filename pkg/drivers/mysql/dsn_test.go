package mysql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kite-db/kite/pkg/drivers/mysql"
	"github.com/kite-db/kite/pkg/server/tlstest"
)

func TestParseDSNForms(t *testing.T) {
	tests := []struct {
		dsn                           string
		user, pass, net, addr, dbName string
	}{
		// kine's form: the password as written, '@', ':' and '/' included.
		{"mysql://kite:p@ss:w/rd@tcp(db.example:3307)/k3s", "kite", "p@ss:w/rd", "tcp", "db.example:3307", "k3s"},
		{"mysql://kite@tcp(127.0.0.1:3306)/k3s?timeout=5s", "kite", "", "tcp", "127.0.0.1:3306", "k3s"},
		{"mysql://kite:pw@unix(/run/mysqld/mysqld.sock)/k3s", "kite", "pw", "unix", "/run/mysqld/mysqld.sock", "k3s"},
		{"kite:pw@tcp(db:3306)/k3s", "kite", "pw", "tcp", "db:3306", "k3s"},
		{"mysql://tcp(db:3306)/k3s", "", "", "tcp", "db:3306", "k3s"},
		// A URL: percent-decoded, port 3306 by default.
		{"mysql://kite:p%40ss%2Fw@db.example:3307/k3s", "kite", "p@ss/w", "tcp", "db.example:3307", "k3s"},
		{"mysql://kite:pw@db.example/k3s", "kite", "pw", "tcp", "db.example:3306", "k3s"},
		{"mysql://kite:pw@[::1]:3306/k3s", "kite", "pw", "tcp", "[::1]:3306", "k3s"},
		{"mysql://kite@/k3s", "kite", "", "tcp", "127.0.0.1:3306", "k3s"},
	}
	for _, tc := range tests {
		cfg, err := mysql.ParseDSN(tc.dsn)
		if err != nil {
			t.Errorf("ParseDSN(%q): %v", tc.dsn, err)
			continue
		}
		got := [5]string{cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName}
		want := [5]string{tc.user, tc.pass, tc.net, tc.addr, tc.dbName}
		if got != want {
			t.Errorf("ParseDSN(%q) = %q, want %q", tc.dsn, got, want)
		}
	}
}

func TestParseDSNSettings(t *testing.T) {
	cfg, err := mysql.ParseDSN("mysql://kite:pw@tcp(db:3306)/k3s?timeout=5s&readTimeout=30s&parseTime=true" +
		"&tx_isolation=%27READ-COMMITTED%27&innodb_lock_wait_timeout=10")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 5*time.Second || cfg.ReadTimeout != 30*time.Second {
		t.Errorf("timeouts %v, %v; want 5s, 30s", cfg.Timeout, cfg.ReadTimeout)
	}
	want := map[string]string{
		"tx_isolation":             "'READ-COMMITTED'",
		"innodb_lock_wait_timeout": "10",
		"autocommit":               "1",
		"sql_mode":                 "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO'",
	}
	if len(cfg.Params) != len(want) {
		t.Errorf("session variables %q, want %q", cfg.Params, want)
	}
	for k, v := range want {
		if cfg.Params[k] != v {
			t.Errorf("session variable %s = %q, want %q", k, cfg.Params[k], v)
		}
	}
	if !cfg.InterpolateParams || !cfg.MultiStatements || cfg.ParseTime || cfg.Collation != "utf8mb4_bin" ||
		cfg.MaxAllowedPacket != 0 || cfg.TLS != nil {
		t.Errorf("driver settings: interpolate %v, multi %v, parseTime %v, collation %q, packet %d, tls %v",
			cfg.InterpolateParams, cfg.MultiStatements, cfg.ParseTime, cfg.Collation, cfg.MaxAllowedPacket, cfg.TLS)
	}
}

func TestParseDSNTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "kite test CA")
	caFile := tlstest.Write(t, dir, "ca.pem", ca.PEM)
	client := ca.Issue(t, tlstest.Options{CommonName: "kite"})
	certFile := tlstest.Write(t, dir, "client.pem", client.CertPEM)
	keyFile := tlstest.Write(t, dir, "client-key.pem", client.KeyPEM)
	base := "mysql://kite:pw@tcp(db:3306)/k3s?"

	cfg, err := mysql.ParseDSN(base + "tls=true")
	if err != nil || cfg.TLS == nil || cfg.TLS.InsecureSkipVerify || cfg.TLS.RootCAs != nil {
		t.Errorf("tls=true: %+v, %v; want a verifying config with the system roots", cfg, err)
	}
	cfg, err = mysql.ParseDSN(base + "tls=skip-verify")
	if err != nil || cfg.TLS == nil || !cfg.TLS.InsecureSkipVerify || cfg.AllowFallbackToPlaintext {
		t.Errorf("tls=skip-verify: %v", err)
	}
	cfg, err = mysql.ParseDSN(base + "tls=preferred")
	if err != nil || cfg.TLS == nil || !cfg.TLS.InsecureSkipVerify || !cfg.AllowFallbackToPlaintext {
		t.Errorf("tls=preferred: %v", err)
	}
	cfg, err = mysql.ParseDSN(base + "tls=false")
	if err != nil || cfg.TLS != nil {
		t.Errorf("tls=false: %v", err)
	}
	// ssl-ca alone implies tls=true.
	cfg, err = mysql.ParseDSN(base + "ssl-ca=" + caFile + "&ssl-cert=" + certFile + "&ssl-key=" + keyFile)
	if err != nil {
		t.Fatalf("ssl-ca, ssl-cert, ssl-key: %v", err)
	}
	if cfg.TLS == nil || cfg.TLS.InsecureSkipVerify || cfg.TLS.RootCAs == nil || len(cfg.TLS.Certificates) != 1 {
		t.Errorf("ssl-ca, ssl-cert, ssl-key: TLS %+v", cfg.TLS)
	}
	if _, ok := cfg.Params["ssl-ca"]; ok {
		t.Errorf("ssl-ca passed on as a session variable")
	}
	for _, bad := range []string{
		"tls=custom",
		"tls=skip-verify&ssl-ca=" + caFile,
		"tls=false&ssl-ca=" + caFile,
		"ssl-ca=" + dir + "/missing.pem",
		"ssl-ca=" + keyFile,
		"tls=true&ssl-cert=" + certFile,
	} {
		if _, err := mysql.ParseDSN(base + bad); err == nil {
			t.Errorf("ParseDSN(...?%s) succeeded", bad)
		}
	}
}

func TestParseDSNErrors(t *testing.T) {
	for _, dsn := range []string{
		"postgres://kite:s3cret@db/k3s",
		"mysql://kite:s3cret@tcp(db:3306)/",                          // no database
		"mysql://kite:s3cret@db:3306",                                // no database
		"mysql://kite:s3%zzcret@db:3306/k3s",                         // bad escape
		"mysql://kite:s3#cret@db:3306/k3s",                           // '#' unescaped
		"mysql://kite:s3cret@tcp(db:3306/k3s",                        // unterminated address
		"kite:s3cret@db:3306/k3s",                                    // neither form
		"mysql://kite:s3cret@tcp(db:3306)/k3s?multiStatements=false", // kite's own
		"mysql://kite:s3cret@tcp(db:3306)/k3s?sql_mode=%27%27",       // kite's own
		"mysql://kite:s3cret@tcp(db:3306)/k3s?autocommit=0",          // kite's own
		"mysql://kite:s3cret@tcp(db:3306)/k3s?charset=latin1",        // kite's own
		"mysql://kite:s3cret@tcp(db:3306)/k3s?no-such-param=1",       // not a variable
		"mysql://kite:s3cret@tcp(db:3306)/k3s?timeout=5s&timeout=6s", // twice
		"mysql://kite:s3cret@tcp(db:3306)/k3s?timeout=soon",          // driver's parse
		"mysql://kite:s3cret@tcp(db:3306)/k3s?%zz=1",                 // bad escape
	} {
		_, err := mysql.ParseDSN(dsn)
		if err == nil {
			t.Errorf("ParseDSN(%q) succeeded", dsn)
			continue
		}
		if strings.Contains(err.Error(), "s3") {
			t.Errorf("ParseDSN(%q) error leaks the password: %v", dsn, err)
		}
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"mysql://kite:s3c@ret@tcp(db:3306)/k3s?tls=true", "mysql://kite:xxxxx@tcp(db:3306)/k3s?tls=true"},
		{"kite:s3cret@tcp(db:3306)/k3s", "kite:xxxxx@tcp(db:3306)/k3s"},
		{"mysql://kite@tcp(db:3306)/k3s", "mysql://kite@tcp(db:3306)/k3s"},
		{"mysql://tcp(db:3306)/k3s", "mysql://tcp(db:3306)/k3s"},
		{"mysql://kite:s3cret@db:3306/k3s?timeout=5s", "mysql://kite:xxxxx@db:3306/k3s?timeout=5s"},
		{"mysql://kite@db/k3s", "mysql://kite@db/k3s"},
		{"mysql://kite:s3%zz@db/k3s", "mysql://xxxxx@db/k3s"},
		{"mysql://kite:s3#cret@db/k3s", "mysql://xxxxx@db/k3s"},
		{"mysql://kite:s3cret@tcp(db:3306/k3s", "mysql://xxxxx@tcp(db:3306/k3s"},
	}
	for _, tc := range tests {
		got := mysql.Redact(tc.dsn)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
		if strings.Contains(got, "s3") {
			t.Errorf("Redact(%q) = %q leaks the password", tc.dsn, got)
		}
	}
}

// TestOpenErrorsHidePassword: neither a malformed DSN nor a server that
// cannot be reached puts the password in Open's error. Needs no server.
func TestOpenErrorsHidePassword(t *testing.T) {
	for _, dsn := range []string{
		"mysql://kite:s3cret%zz@127.0.0.1/k3s",
		"mysql://kite:s3cret@tcp(127.0.0.1:1)/k3s?timeout=2s",
		"mysql://kite:s3cret@127.0.0.1:1/k3s?timeout=2s",
	} {
		_, err := mysql.Open(context.Background(), dsn, mysql.Options{})
		if err == nil {
			t.Fatalf("Open(%s) succeeded", mysql.Redact(dsn))
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
}
