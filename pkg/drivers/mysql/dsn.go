package mysql

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// A DSN comes in one of two shapes:
//
//	mysql://user:pass@tcp(host:3306)/db?params   kine's and k3s's: go-sql-driver's own
//	                                             syntax behind a scheme; user and
//	                                             password are taken as written
//	mysql://user:pass@host:3306/db?params        a URL: user and password are
//	                                             percent-decoded, as in any URL
//
// The scheme may be left out of the first shape (a plain go-sql-driver
// DSN). Parameters are those of go-sql-driver that make sense for kite,
// kite's TLS file parameters, and session variables (anything else whose
// name is an identifier: the driver SETs it on every new connection, so
// the server refuses an unknown one when Open connects).
//
// TLS follows k3s: tls=true (verify the server against the system roots,
// or ssl-ca), tls=skip-verify (encrypt, verify nothing), tls=preferred
// (skip-verify, falling back to plaintext if the server has no TLS) or
// tls=false. ssl-ca, ssl-cert and ssl-key name PEM files (MySQL's own
// client spells them so): a CA to verify the server with, and a client
// certificate and its key; ssl-ca alone implies tls=true. The TLS
// configuration is built here and handed to the driver in its Config, so
// nothing is registered under a global name.

// driverParams are go-sql-driver parameters a DSN may set: they change
// how kite reaches the server, never how statements behave.
var driverParams = map[string]bool{
	"allowCleartextPasswords":  true,
	"allowFallbackToPlaintext": true,
	"allowNativePasswords":     true,
	"checkConnLiveness":        true,
	"compress":                 true,
	"connectionAttributes":     true,
	"readTimeout":              true,
	"rejectReadOnly":           true,
	"serverPubKey":             true,
	"timeout":                  true,
	"writeTimeout":             true,
}

// ignoredParams are go-sql-driver parameters k3s endpoints often carry
// that kite has no use for: it reads no time columns.
var ignoredParams = map[string]bool{"parseTime": true, "loc": true, "timeTruncate": true}

// forcedParams are set by kite itself, because its statements depend on
// them (forcedSession) or on the driver behaving one way; a DSN that sets
// one is refused rather than silently overridden.
var forcedParams = map[string]string{
	"allowAllFiles":            "kite never loads files",
	"charset":                  "kite sets the connection character set (utf8mb4, binary collation)",
	"collation":                "kite sets the connection character set (utf8mb4, binary collation)",
	"clientFoundRows":          "kite counts changed rows",
	"columnsWithAlias":         "kite reads columns by position",
	"interpolateParams":        "kite sets it",
	"maxAllowedPacket":         "kite reads the server's max_allowed_packet",
	"multiStatements":          "kite sets it",
	"autocommit":               "kite needs autocommit on outside its transactions",
	"sql_mode":                 "kite sets a strict sql_mode",
	"character_set_client":     "kite sets the connection character set",
	"character_set_results":    "kite sets the connection character set",
	"character_set_connection": "kite sets the connection character set",
	"collation_connection":     "kite sets the connection character set",
}

// forcedSession are the session variables every connection gets. A strict
// sql_mode turns a value that does not fit (a key over maxKeyLen, should
// one get past Put's check) into an error rather than a truncation, and
// NO_ENGINE_SUBSTITUTION refuses to create a table in anything but InnoDB.
// autocommit on makes a statement outside kite's transactions (GetLatest,
// Size) its own transaction: with it off, the first SELECT would open one
// that stays open on the pooled connection, with a snapshot that never
// moves. Transaction isolation is not among them: kite names it for every
// transaction it starts (tx.go), whatever the session default.
var forcedSession = map[string]string{
	"sql_mode":   "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO'",
	"autocommit": "1",
}

// tlsFileParams name the PEM files of a custom TLS configuration.
var tlsFileParams = map[string]bool{"ssl-ca": true, "ssl-cert": true, "ssl-key": true}

// sessionVariable is what a session variable's name looks like.
var sessionVariable = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// driverForm is go-sql-driver's DSN: [user[:password]@]net(addr)/db[?params].
// The greedy user part ends at the last '@' before a net(addr)/, so a
// password may hold '@', ':' or '/'.
var driverForm = regexp.MustCompile(`^(?:(.*)@)?(tcp|tcp6|unix)\(([^)]*)\)/([^?]*)(?:\?(.*))?$`)

// ParseDSN turns dsn into the go-sql-driver configuration kite connects
// with: the parameters are checked, TLS is built, and kite's session
// settings are added. Errors never contain the password.
func ParseDSN(dsn string) (*gomysql.Config, error) {
	cfg, query, err := splitDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql DSN %q: %w", Redact(dsn), err)
	}
	if err := applyParams(cfg, query); err != nil {
		return nil, fmt.Errorf("mysql DSN %q: %w", Redact(dsn), err)
	}
	return cfg, nil
}

// splitDSN parses the address, credentials and database of dsn, and
// returns its parameters, unapplied.
func splitDSN(dsn string) (*gomysql.Config, url.Values, error) {
	rest, hadScheme := strings.CutPrefix(dsn, "mysql://")
	if !hadScheme && strings.Contains(dsn, "://") {
		scheme, _, _ := strings.Cut(dsn, "://")
		return nil, nil, fmt.Errorf("scheme %q is not mysql", scheme)
	}
	cfg := gomysql.NewConfig()
	var rawQuery string
	if m := driverForm.FindStringSubmatch(rest); m != nil {
		user, pass, _ := strings.Cut(m[1], ":")
		cfg.User, cfg.Passwd = user, pass
		cfg.Net, cfg.Addr = m[2], m[3]
		db, err := url.PathUnescape(m[4])
		if err != nil {
			return nil, nil, fmt.Errorf("database name: %w", err)
		}
		cfg.DBName, rawQuery = db, m[5]
	} else {
		if !hadScheme {
			return nil, nil, errors.New("want mysql://user:pass@tcp(host:port)/db or mysql://user:pass@host:port/db")
		}
		u, err := url.Parse(dsn)
		if err != nil {
			// url's errors quote the URL, password included.
			return nil, nil, errors.New("not a valid URL (percent-encode special characters of the password, " +
				"or use the tcp(host:port) form)")
		}
		if u.Fragment != "" || u.Opaque != "" {
			return nil, nil, errors.New("not a valid URL (a '#' in the password must be written %23)")
		}
		if strings.ContainsAny(u.Host, "()") {
			return nil, nil, errors.New("an address net(host:port) must end with ')' before the '/'")
		}
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.Net = "tcp"
		host, port := u.Hostname(), u.Port()
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = "3306"
		}
		cfg.Addr = net.JoinHostPort(host, port)
		cfg.DBName = strings.TrimPrefix(u.Path, "/")
		rawQuery = u.RawQuery
	}
	if cfg.DBName == "" {
		return nil, nil, errors.New("no database name: kite keeps its tables in a database of their own")
	}
	if strings.Contains(cfg.DBName, "/") {
		return nil, nil, fmt.Errorf("database name %q has a '/'", cfg.DBName)
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, nil, fmt.Errorf("parameters: %w", err)
	}
	return cfg, query, nil
}

// applyParams checks each parameter and applies it to cfg, then adds
// kite's own settings.
func applyParams(cfg *gomysql.Config, query url.Values) error {
	driver := url.Values{}
	session := map[string]string{}
	for name, values := range query {
		if len(values) != 1 {
			return fmt.Errorf("parameter %s given %d times", name, len(values))
		}
		v := values[0]
		switch {
		case forcedParams[name] != "":
			return fmt.Errorf("parameter %s cannot be set: %s", name, forcedParams[name])
		case name == "tls" || tlsFileParams[name] || ignoredParams[name]:
		case driverParams[name]:
			driver.Set(name, v)
		case sessionVariable.MatchString(name):
			session[name] = v
		default:
			return fmt.Errorf("unknown parameter %q", name)
		}
	}
	// go-sql-driver parses its own parameters (and their errors); a DSN
	// of parameters only leaves the rest of cfg to be copied over.
	parsed, err := gomysql.ParseDSN("/?" + driver.Encode())
	if err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	parsed.User, parsed.Passwd, parsed.Net, parsed.Addr, parsed.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
	*cfg = *parsed
	if cfg.TLS, err = tlsConfig(query); err != nil {
		return err
	}
	if query.Get("tls") == "preferred" {
		cfg.AllowFallbackToPlaintext = true
	}
	cfg.Params = session
	for k, v := range forcedSession {
		cfg.Params[k] = v
	}
	// utf8mb4 with its binary collation: keys and values are VARBINARY
	// and LONGBLOB and compare bytewise whatever the connection says, but
	// nothing should ever be compared by a case-folding collation.
	if err := cfg.Apply(gomysql.Charset("utf8mb4", "utf8mb4_bin")); err != nil {
		return err
	}
	// Interpolation sends a statement and its arguments as one text
	// query: one round trip, no prepared statement to close; binary
	// arguments go as escaped _binary literals. Several statements in one
	// query let a transaction's writes and its COMMIT go together (tx.go).
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	// 0 asks the server for its max_allowed_packet, which bounds a
	// statement; writes are split to fit it (write.go).
	cfg.MaxAllowedPacket = 0
	return nil
}

// tlsConfig builds the TLS configuration the tls and ssl-* parameters ask
// for, nil for none. ServerName is left empty: the driver fills it in
// from the address.
func tlsConfig(query url.Values) (*tls.Config, error) {
	mode := strings.ToLower(query.Get("tls"))
	ca, cert, key := query.Get("ssl-ca"), query.Get("ssl-cert"), query.Get("ssl-key")
	if mode == "" && ca != "" {
		mode = "true"
	}
	var c *tls.Config
	switch mode {
	case "", "false", "0":
		if ca != "" || cert != "" || key != "" {
			return nil, errors.New("ssl-ca, ssl-cert and ssl-key need TLS, and tls=false turns it off")
		}
		return nil, nil
	case "true", "1":
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	case "skip-verify", "preferred":
		if ca != "" {
			return nil, fmt.Errorf("tls=%s verifies no server, so ssl-ca would be ignored: use tls=true", mode)
		}
		c = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
	default:
		return nil, fmt.Errorf("tls=%q: want true, false, skip-verify or preferred "+
			"(a CA or client certificate is given with ssl-ca, ssl-cert and ssl-key)", query.Get("tls"))
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("ssl-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ssl-ca %s: no PEM certificate in it", ca)
		}
		c.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("ssl-cert and ssl-key go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("ssl-cert and ssl-key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// redacted replaces a password in Redact's output.
const redacted = "xxxxx"

// Redact returns dsn with its password replaced, for logs and error
// messages. A DSN it cannot parse has everything between the scheme and
// the last '@' replaced, erring towards hiding too much.
func Redact(dsn string) string {
	rest, hadScheme := strings.CutPrefix(dsn, "mysql://")
	prefix := ""
	if hadScheme {
		prefix = "mysql://"
	}
	if m := driverForm.FindStringSubmatchIndex(rest); m != nil {
		if m[2] < 0 { // no user part
			return dsn
		}
		user := rest[m[2]:m[3]]
		if name, _, ok := strings.Cut(user, ":"); ok {
			return prefix + name + ":" + redacted + rest[m[3]:]
		}
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil && hadScheme && u.Fragment == "" && !strings.ContainsAny(u.Host, "()") {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		return u.String()
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		return prefix + redacted + rest[at:]
	}
	return dsn
}
