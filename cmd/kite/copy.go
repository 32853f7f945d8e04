package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/kite-db/kite/pkg/datastore"
	"github.com/kite-db/kite/pkg/mvcc"
	"github.com/kite-db/kite/pkg/server"
)

const copyUsage = `usage:
  kite copy --from SRC (--to DST | --to-data-dir DIR) [--force] [flags]

Copies a whole cluster into an empty kite storage, in one transaction, and
verifies the result (count and sha256 of every key at the copied revision,
read back from the target) before reporting success.

SRC is one of:
  sqlite://PATH, --from-data-dir DIR (DIR/kite.db), postgres://..., mysql://...
      a kite storage: the whole revision log is copied from one consistent
      snapshot, every revision, the compacted revision, leases and alarms
      preserved.
  --from-snapshot FILE
      a snapshot file, of kite or of etcd ('etcdctl snapshot save'; its
      sha256 trailer is checked): copied as a kite storage, every revision
      the snapshot holds, the compacted revision and leases preserved.
  http://HOST:PORT, https://HOST:PORT, unix:///PATH (comma-separated list)
      a running etcd, kine or kite: every key at one revision R is copied
      with its create and mod revisions, version, value and lease; the
      target starts at revision R, compacted at R (older history reads as
      compacted). Leases keep their IDs and granted TTLs.
DST is sqlite://PATH, --to-data-dir DIR (DIR/kite.db, as 'kite --data-dir
DIR' opens it), postgres://... or mysql://user:pass@tcp(host:3306)/db

The copy is of one consistent revision: stop the writers of the source
(kube-apiserver, k3s) first, or later writes are not in the copy. No kite
server may serve the target while it is written.

A target that is not empty (revision above 1, or any key, log row, lease or
alarm) is refused unless --force. With --force the target is emptied inside
the same transaction that writes the copy: a copy that fails or is killed
leaves the target exactly as it was.

flags:`

// copyConfig is what `kite copy` was asked to do.
type copyConfig struct {
	// from is a datastore endpoint (sqlite://, postgres://, mysql://) when fromEtcd
	// is empty; otherwise fromEtcd lists the client URLs of a running
	// etcd-compatible server. With fromSnapshot, a snapshot file, from is
	// set only when the copy runs (a temporary SQLite holding its database).
	from         string
	fromEtcd     []string
	fromSnapshot string
	to           string // datastore endpoint (sqlite://, postgres:// or mysql://)
	// toDataDir is set when the target was given as --to-data-dir: the
	// directory is locked as kite locks it, so a kite serving it is noticed.
	toDataDir string
	force     bool

	tls            transport.TLSInfo
	user, password string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	pageSize       int64

	// progressEvery spaces the progress lines on stderr.
	progressEvery time.Duration
	// pauseBeforeCommit is a test hook (KITE_TEST_COPY_PAUSE_BEFORE_COMMIT,
	// kitetest builds only):
	// the copy waits that long with everything written and nothing
	// committed, so a test can kill it at the worst moment.
	pauseBeforeCommit time.Duration
}

// runCopy is `kite copy`.
func runCopy(args []string) int {
	cfg, err := parseCopyFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kite copy: %v\n", err)
		return 2
	}
	if cfg.pauseBeforeCommit, err = testCopyPause(); err != nil {
		return fatalf("copy: %v", err)
	}
	// SIGINT or SIGTERM cancels the copy; the write transaction is rolled
	// back, so the target is left as it was.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := copyCluster(ctx, cfg, os.Stderr)
	if err != nil {
		return fatalf("copy: %v", err)
	}
	fmt.Fprintln(os.Stdout, res.summary())
	return 0
}

// parseCopyFlags parses and checks the arguments of `kite copy`. Usage
// and flag errors go to out.
func parseCopyFlags(args []string, out io.Writer) (copyConfig, error) {
	var (
		cfg              copyConfig
		from, fromDir    string
		fromSnapshot     string
		to, toDir        string
		insecureSkipTLS  bool
		pageSize         int64
		cacert, cert, ky string
	)
	fs := flag.NewFlagSet("kite copy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, copyUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&from, "from", "", "source: sqlite://PATH, postgres://..., mysql://..., or etcd client `URLs` (http://, https://, unix://)")
	fs.StringVar(&fromDir, "from-data-dir", "", "source: the SQLite database of a kite data `dir` (DIR/kite.db)")
	fs.StringVar(&fromSnapshot, "from-snapshot", "", "source: a snapshot `file` of kite or etcd (etcdctl snapshot save)")
	fs.StringVar(&to, "to", "", "target: sqlite://PATH, postgres://... or mysql://...")
	fs.StringVar(&toDir, "to-data-dir", "", "target: the SQLite database of a kite data `dir` (DIR/kite.db), created 0700")
	fs.BoolVar(&cfg.force, "force", false, "replace the contents of a non-empty target (emptied in the copy's own transaction)")
	fs.StringVar(&cacert, "cacert", "", "verify the source server's certificate with this CA bundle (etcdctl's --cacert)")
	fs.StringVar(&cert, "cert", "", "client certificate for the source server (etcdctl's --cert)")
	fs.StringVar(&ky, "key", "", "client key for the source server (etcdctl's --key)")
	fs.BoolVar(&insecureSkipTLS, "insecure-skip-tls-verify", false, "do not verify the source server's certificate")
	fs.StringVar(&cfg.user, "user", "", "source server user, `name` or name:password (etcdctl's --user)")
	fs.StringVar(&cfg.password, "password", "", "source server password (etcdctl's --password)")
	fs.DurationVar(&cfg.dialTimeout, "dial-timeout", 30*time.Second, "give up reaching the source or the target after this long")
	fs.DurationVar(&cfg.commandTimeout, "command-timeout", time.Minute, "give up on one request to an etcd endpoint source after this long (etcdctl's --command-timeout)")
	fs.Int64Var(&pageSize, "page-size", 500, "keys per Range request when the source is an etcd endpoint")
	fs.DurationVar(&cfg.progressEvery, "progress-interval", time.Second, "time between progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return copyConfig{}, err
	}
	if fs.NArg() > 0 {
		return copyConfig{}, fmt.Errorf("unexpected argument %q (every option is a flag)", fs.Arg(0))
	}
	if countSet(from, fromDir, fromSnapshot) != 1 {
		return copyConfig{}, errors.New("give exactly one of --from, --from-data-dir and --from-snapshot")
	}
	if (to == "") == (toDir == "") {
		return copyConfig{}, errors.New("give exactly one of --to and --to-data-dir")
	}
	if pageSize <= 0 {
		return copyConfig{}, fmt.Errorf("--page-size %d: want a positive number", pageSize)
	}
	if cfg.dialTimeout <= 0 || cfg.commandTimeout <= 0 {
		return copyConfig{}, errors.New("--dial-timeout and --command-timeout must be positive")
	}
	if cfg.progressEvery <= 0 {
		return copyConfig{}, fmt.Errorf("--progress-interval %v: want a positive duration", cfg.progressEvery)
	}
	cfg.pageSize = pageSize

	switch {
	case fromSnapshot != "":
		cfg.fromSnapshot = fromSnapshot
	case fromDir != "":
		cfg.from = "sqlite://" + datastore.SQLitePath("", fromDir)
	case isEtcdEndpoint(from):
		for _, ep := range strings.Split(from, ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				if !isEtcdEndpoint(ep) {
					return copyConfig{}, fmt.Errorf("--from: %q: every URL of a list must be http://, https:// or unix://", datastore.Redact(ep))
				}
				cfg.fromEtcd = append(cfg.fromEtcd, ep)
			}
		}
	default:
		if err := checkStoreEndpoint(from); err != nil {
			return copyConfig{}, fmt.Errorf("--from: %w", err)
		}
		cfg.from = from
	}
	if toDir != "" {
		cfg.to, cfg.toDataDir = "sqlite://"+datastore.SQLitePath("", toDir), toDir
	} else {
		if isEtcdEndpoint(to) {
			return copyConfig{}, fmt.Errorf("--to %s: the target must be a kite storage (sqlite://PATH, postgres://..., mysql://... or --to-data-dir DIR), not a server", datastore.Redact(to))
		}
		if err := checkStoreEndpoint(to); err != nil {
			return copyConfig{}, fmt.Errorf("--to: %w", err)
		}
		cfg.to = to
	}

	tlsSet := cacert != "" || cert != "" || ky != "" || insecureSkipTLS || cfg.user != "" || cfg.password != ""
	if tlsSet && cfg.fromEtcd == nil {
		return copyConfig{}, errors.New("--cacert, --cert, --key, --insecure-skip-tls-verify, --user and --password apply only to an etcd endpoint source")
	}
	if (cert == "") != (ky == "") {
		return copyConfig{}, errors.New("--cert and --key go together")
	}
	cfg.tls = transport.TLSInfo{TrustedCAFile: cacert, CertFile: cert, KeyFile: ky, InsecureSkipVerify: insecureSkipTLS}
	if name, pass, ok := strings.Cut(cfg.user, ":"); ok {
		if cfg.password != "" {
			return copyConfig{}, errors.New("--password given twice: in --user name:password and in --password")
		}
		cfg.user, cfg.password = name, pass
	}

	if cfg.fromEtcd == nil && cfg.fromSnapshot == "" && sameStore(cfg.from, cfg.to) {
		return copyConfig{}, fmt.Errorf("source and target are the same storage (%s)", datastore.Redact(cfg.to))
	}
	return cfg, nil
}

// countSet counts the non-empty strings among s.
func countSet(s ...string) int {
	n := 0
	for _, v := range s {
		if v != "" {
			n++
		}
	}
	return n
}

func isEtcdEndpoint(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	switch strings.ToLower(scheme) {
	case "http", "https", "unix", "unixs":
		return true
	}
	return false
}

// checkStoreEndpoint accepts sqlite://PATH, postgres:// and mysql://
// endpoints. An empty sqlite path would mean "kite.db in the data dir" to
// kite, which here is ambiguous: --from-data-dir and --to-data-dir say it
// explicitly.
func checkStoreEndpoint(ep string) error {
	kind, err := datastore.Kind(ep)
	if err != nil {
		return err
	}
	if kind == datastore.KindSQLite {
		if p := strings.TrimPrefix(ep, "sqlite://"); p == "" || p == ep {
			return fmt.Errorf("%q: want sqlite://PATH (or a --from-data-dir/--to-data-dir)", ep)
		}
	}
	return nil
}

// sameStore reports whether two datastore endpoints are one storage, as
// far as can be told without connecting.
func sameStore(a, b string) bool {
	ka, _ := datastore.Kind(a)
	kb, _ := datastore.Kind(b)
	if ka != kb {
		return false
	}
	if ka == datastore.KindSQLite {
		pa, errA := filepath.Abs(datastore.SQLitePath(a, ""))
		pb, errB := filepath.Abs(datastore.SQLitePath(b, ""))
		return errA == nil && errB == nil && pa == pb
	}
	return a == b
}

// copyResult is what a successful copy reports.
type copyResult struct {
	from, to           string // redacted
	current, compacted int64
	keys               int64 // keys at current
	rows               int64 // log rows written
	leases             int
	sum                string // sha256 of every key at current, hex
	elapsed            time.Duration
}

func (r copyResult) summary() string {
	return fmt.Sprintf("copied %s to %s: revision %d (compacted %d), %d log rows, %d leases, in %v\n"+
		"verified: %d keys at revision %d, sha256 %s, identical in source and target",
		r.from, r.to, r.current, r.compacted, r.rows, r.leases, r.elapsed.Round(time.Millisecond),
		r.keys, r.current, r.sum)
}

// copyCluster opens the target, then the source, and copies. Progress and
// warnings go to logw.
func copyCluster(ctx context.Context, cfg copyConfig, logw io.Writer) (copyResult, error) {
	// The progress ticker writes from its own goroutine while the copy
	// logs; a caller's writer (a buffer in tests) need not be safe for that.
	logw = &lockedWriter{w: logw}
	start := time.Now()
	res := copyResult{to: datastore.Redact(cfg.to)}
	if cfg.fromEtcd != nil {
		redacted := make([]string, len(cfg.fromEtcd))
		for i, ep := range cfg.fromEtcd {
			redacted[i] = datastore.Redact(ep)
		}
		res.from = strings.Join(redacted, ",")
	} else if cfg.fromSnapshot != "" {
		res.from = cfg.fromSnapshot
	} else {
		res.from = datastore.Redact(cfg.from)
	}

	if cfg.fromSnapshot != "" {
		from, cleanup, err := snapshotSource(ctx, slog.New(slog.NewTextHandler(logw, nil)), cfg.fromSnapshot)
		if err != nil {
			return res, fmt.Errorf("source: %w", err)
		}
		defer cleanup()
		cfg.from = from
	}
	// A SQLite source is opened only if it exists: opening a missing file
	// would create an empty database and "copy" nothing.
	if cfg.fromEtcd == nil {
		if kind, _ := datastore.Kind(cfg.from); kind == datastore.KindSQLite {
			path := datastore.SQLitePath(cfg.from, "")
			if _, err := os.Stat(path); err != nil {
				return res, fmt.Errorf("source %s: %w", res.from, err)
			}
			if isEtcdFile(path) {
				return res, fmt.Errorf("source %s is an etcd database: copy it with --from-snapshot", res.from)
			}
		}
	}

	if cfg.toDataDir != "" {
		if err := os.MkdirAll(cfg.toDataDir, 0o700); err != nil {
			return res, fmt.Errorf("create target data dir: %w", err)
		}
		// A copy into a dir that a kite serves would change data under it.
		lock, err := server.LockDataDir(cfg.toDataDir)
		if err != nil {
			return res, fmt.Errorf("target: %w", err)
		}
		if lock != nil {
			defer lock.Close()
		}
	}
	dst, err := openStore(ctx, cfg.to, cfg.dialTimeout)
	if err != nil {
		return res, fmt.Errorf("open target: %w", err)
	}
	defer dst.Close()

	p := newProgress(logw, cfg.progressEvery)
	var c copied
	if cfg.fromEtcd != nil {
		c, err = copyFromEtcd(ctx, cfg, dst, p, logw)
	} else {
		c, err = copyFromStore(ctx, cfg, dst, p)
	}
	p.stop()
	if err != nil {
		return res, err
	}
	res.current, res.compacted, res.keys, res.rows, res.leases = c.current, c.compacted, c.sum.n, p.rows.Load(), len(c.leases)
	res.sum = c.sum.hex()

	// Read the committed copy back through a fresh snapshot, as a kite
	// server started on it will.
	if err := verifyTarget(ctx, dst, c); err != nil {
		return res, fmt.Errorf("verify after commit: %w (the target holds a copy that differs from the source: rerun with --force)", err)
	}
	res.elapsed = time.Since(start)
	return res, nil
}

// snapshotSource writes the kite database of a snapshot file (converted
// from etcd's if need be) into a temporary SQLite file, which the copy then
// reads as any kite storage. cleanup removes it.
func snapshotSource(ctx context.Context, log *slog.Logger, file string) (endpoint string, cleanup func(), err error) {
	data, err := readSnapshotFile(ctx, log, file)
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "kite-copy-snapshot-")
	if err != nil {
		return "", nil, fmt.Errorf("temporary directory: %w", err)
	}
	path := filepath.Join(dir, "kite.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("write %s: %w", path, err)
	}
	return "sqlite://" + path, func() { os.RemoveAll(dir) }, nil
}

// isEtcdFile reports whether path begins as an etcd (bbolt) database.
func isEtcdFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 64)
	n, _ := io.ReadFull(f, head)
	return detectSnapshot(head[:n]) == formatEtcd
}

// openStore opens a datastore endpoint, giving up after timeout if its
// server cannot be reached (datastore.Open retries until its ctx ends).
func openStore(ctx context.Context, endpoint string, timeout time.Duration) (mvcc.Backend, error) {
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := datastore.Open(octx, datastore.Config{Endpoint: endpoint, MaxOpenConns: 4, MaxIdleConns: 1})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// copied is what a copy wrote, for the verification.
type copied struct {
	current, compacted int64
	sum                keysSum
	leases             []mvcc.Lease
}

// copyFromStore copies the whole log of a kite storage: one read snapshot
// of the source, one write transaction on the target.
func copyFromStore(ctx context.Context, cfg copyConfig, dst mvcc.Backend, p *progress) (copied, error) {
	src, err := openStore(ctx, cfg.from, cfg.dialTimeout)
	if err != nil {
		return copied{}, fmt.Errorf("open source: %w", err)
	}
	defer src.Close()
	rtx, err := src.BeginRead(ctx)
	if err != nil {
		return copied{}, fmt.Errorf("source: begin read: %w", err)
	}
	defer rtx.Rollback()
	var c copied
	if c.current, c.compacted, err = rtx.Revisions(ctx); err != nil {
		return copied{}, fmt.Errorf("source: read revisions: %w", err)
	}
	if c.current == 0 {
		// Never served by kite: most likely the wrong database or file.
		return copied{}, fmt.Errorf("source %s holds no kite data (revision 0)", datastore.Redact(cfg.from))
	}
	if c.leases, err = rtx.Leases(ctx); err != nil {
		return copied{}, fmt.Errorf("source: read leases: %w", err)
	}
	// The source's own hash at its current revision, from the snapshot the
	// copy reads, taken before the target's transaction begins: Postgres
	// ends a write transaction idle for 30 s, and reading every key of a
	// large source takes longer than that.
	if c.sum, err = hashAt(ctx, rtx, c.current); err != nil {
		return copied{}, fmt.Errorf("source: %w", err)
	}

	err = inWriteTx(ctx, cfg, dst, func(wtx mvcc.WriteTx) error {
		p.setTotal(c.current, "revision")
		if err := mvcc.Copy(ctx, progressTx{WriteTx: wtx, p: p}, rtx); err != nil {
			return err
		}
		return checkInTx(ctx, wtx, c)
	})
	return c, err
}

// inWriteTx runs fill in one write transaction on the target, after
// checking (and with --force, emptying) the target in that same
// transaction, and commits it. Everything happens in that one
// transaction, so a copy that fails, is interrupted or is killed leaves
// the target as it was: never a partial copy.
func inWriteTx(ctx context.Context, cfg copyConfig, dst mvcc.Backend, fill func(mvcc.WriteTx) error) error {
	wtx, err := dst.BeginWrite(ctx)
	if err != nil {
		return fmt.Errorf("target: begin write: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = wtx.Rollback()
		}
	}()
	if err := prepareTarget(ctx, wtx, cfg.force); err != nil {
		return fmt.Errorf("target %s: %w", datastore.Redact(cfg.to), err)
	}
	if err := fill(wtx); err != nil {
		return err
	}
	if cfg.pauseBeforeCommit > 0 {
		fmt.Fprintf(os.Stderr, "kite copy: test hook: pausing %v before commit\n", cfg.pauseBeforeCommit)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cfg.pauseBeforeCommit):
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := wtx.Commit(); err != nil {
		return fmt.Errorf("target: commit: %w", err)
	}
	committed = true
	return nil
}
