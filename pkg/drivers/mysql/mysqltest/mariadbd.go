//go:build unix

package mysqltest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// Where Debian's package puts the server, which is not on a user's PATH.
const debianMariadbd = "/usr/sbin/mariadbd"

// mariadbdProc is one mariadbd process of a test's own, as Galera's nodes
// and Server run it: a directory for its configuration and logs, a datadir,
// a loopback client port, and the process once started.
type mariadbdProc struct {
	mariadbd string
	// dir holds the config, logs, socket and pid file; data is the
	// datadir, in dir or elsewhere.
	dir, data           string
	cnf, log, stdoutLog string
	socket              string
	port                int
	cmd                 *exec.Cmd
	exited              chan struct{} // closed when cmd has been waited for
	waitErr             error         // cmd.Wait's error, once exited is closed
}

func newMariadbdProc(mariadbd, dir, data string, port int) *mariadbdProc {
	return &mariadbdProc{
		mariadbd:  mariadbd,
		dir:       dir,
		data:      data,
		cnf:       filepath.Join(dir, "my.cnf"),
		log:       filepath.Join(dir, "error.log"),
		stdoutLog: filepath.Join(dir, "stdout.log"),
		socket:    filepath.Join(dir, "mysqld.sock"),
		port:      port,
	}
}

// mariadbTools finds mariadbd and mariadb-install-db and says which of
// them, and of the extra programs a caller needs, are missing.
func mariadbTools(extra ...string) (mariadbd, installDB string, missing []string) {
	mariadbd, err := exec.LookPath("mariadbd")
	if err != nil {
		mariadbd = debianMariadbd
		if _, err := os.Stat(mariadbd); err != nil {
			missing = append(missing, "mariadbd")
		}
	}
	installDB, err = exec.LookPath("mariadb-install-db")
	if err != nil {
		missing = append(missing, "mariadb-install-db")
	}
	for _, p := range extra {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	return mariadbd, installDB, missing
}

// skipOrFail skips t, or fails it under CI=true, where a missing tool is a
// broken machine rather than a reason to pass.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// sharedDir makes a directory for mariadbd's files. Not t.TempDir:
// mariadbd (and Galera's state transfer scripts) run as the mysql user,
// who must be able to reach it, and t.TempDir's parent is private to the
// test's user.
func sharedDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// installDatadir makes a fresh datadir (system tables, root with no
// password) in data.
func installDatadir(t testing.TB, installDB, data string, extra ...string) {
	t.Helper()
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	args := append([]string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, extra...)
	if out, err := exec.Command(installDB, args...).CombinedOutput(); err != nil {
		t.Fatalf("mysqltest: %s: %v\n%s", installDB, err, tail(out, 30))
	}
}

// config is the [mysqld] section every private server shares, then
// extra: mariadbd reads this file only (--defaults-file), not the
// machine's.
func (p *mariadbdProc) config(extra ...string) string {
	lines := []string{
		"[mysqld]",
		"datadir=" + p.data,
		"socket=" + p.socket,
		"pid-file=" + filepath.Join(p.dir, "mysqld.pid"),
		"log-error=" + p.log,
		"port=" + strconv.Itoa(p.port),
		"bind-address=127.0.0.1",
		"skip-name-resolve",
	}
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root: it switches to mysql, whose
		// files the datadir must then be (chownTree).
		lines = append(lines, "user=mysql")
	}
	return strings.Join(append(lines, extra...), "\n") + "\n"
}

// writeConfig writes config(extra...) to the config file.
func (p *mariadbdProc) writeConfig(extra ...string) error {
	return os.WriteFile(p.cnf, []byte(p.config(extra...)), 0o644)
}

// start runs mariadbd on the config file with args added.
func (p *mariadbdProc) start(args ...string) error {
	cmd := exec.Command(p.mariadbd, append([]string{"--defaults-file=" + p.cnf}, args...)...)
	// Its own process group, so that a kill takes its children (Galera's
	// state transfer scripts and their rsync daemons) with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Whatever mariadbd writes before it opens log-error.
	out, err := os.OpenFile(p.stdoutLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.mariadbd, err)
	}
	p.cmd = cmd
	p.exited = make(chan struct{})
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return nil
}

// running reports whether mariadbd was started and has not exited.
func (p *mariadbdProc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends sig to mariadbd's process group and waits until mariadbd has
// exited, up to timeout; a process already gone is no error.
func (p *mariadbdProc) stop(sig syscall.Signal, timeout time.Duration) error {
	if p.cmd == nil {
		return nil
	}
	select {
	case <-p.exited:
		// Already gone (it crashed): its pid may be another's by now.
		p.cmd = nil
		return nil
	default:
	}
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal mariadbd (pid %d): %w", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
	case <-time.After(timeout):
		return fmt.Errorf("mariadbd (pid %d) still running %v after %v", p.cmd.Process.Pid, timeout, sig)
	}
	p.cmd = nil
	return nil
}

// kill SIGKILLs mariadbd, as a crash would, and waits for it.
func (p *mariadbdProc) kill() error { return p.stop(syscall.SIGKILL, 30*time.Second) }

// adminDSN is root@tcp(127.0.0.1:port)/ (go-sql-driver's form, no
// database).
func (p *mariadbdProc) adminDSN() string {
	return "root@tcp(127.0.0.1:" + strconv.Itoa(p.port) + ")/"
}

// open connects as root, with a short dial timeout: the callers poll.
func (p *mariadbdProc) open(ctx context.Context) (*sql.DB, error) {
	cfg, err := gomysql.ParseDSN(p.adminDSN())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 2 * time.Second
	return open(ctx, cfg)
}

// exec runs statements as root on one connection.
func (p *mariadbdProc) exec(ctx context.Context, stmts ...string) error {
	db, err := p.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// logTail is the end of mariadbd's error log, after what it wrote before
// opening it.
func (p *mariadbdProc) logTail(lines int) string {
	var b []byte
	for _, name := range []string{p.stdoutLog, p.log} {
		if data, err := os.ReadFile(name); err == nil {
			b = append(b, data...)
		}
	}
	return string(tail(b, lines))
}

// tail is the last n lines of b.
func tail(b []byte, n int) []byte {
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}

// chownTree gives everything under dir to the named user.
func chownTree(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("chown %s: user %s: %w", dir, name, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("chown %s: user %s: %w", dir, name, err)
	}
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
		return nil
	})
}
