package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kite-db/kite/pkg/datastore"
	"github.com/kite-db/kite/pkg/drivers/raftsql"
	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

const snapshotUsage = `usage:
  kite snapshot status [-w simple|table|json] FILE
      print a snapshot's HashKV hash, revision, live keys and size (etcdutl's
      columns; the hash is what 'etcdctl endpoint hashkv' showed on the
      kite or etcd the snapshot was taken of)
  kite snapshot save [--endpoints URL] FILE
      stream a consistent snapshot from a running kite (or etcd) to FILE,
      exactly as 'etcdctl snapshot save' does (database + sha256 trailer)
  kite snapshot restore --data-dir DIR FILE
      create DIR from a snapshot of kite or of etcd ('etcdctl snapshot
      save', or the member/snap/db of a stopped etcd); start kite with
      --data-dir DIR afterwards. Every key keeps its revisions, version, value and lease;
      leases, the current and the compacted revision are kept.
      Refuses to overwrite an existing database.
  kite snapshot restore --data-dir DIR --name NAME --initial-cluster N=URL,...
        [--initial-cluster-token T] [--initial-advertise-peer-urls URL] FILE
      create DIR as member NAME of a NEW raftsql cluster holding the
      snapshot's keys, as etcdutl snapshot restore does: restore every
      member from the same FILE with the same cluster flags, then start
      each with those flags (--initial-cluster-state is then ignored).`

// runSnapshot is `kite snapshot save|restore`.
func runSnapshot(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, snapshotUsage)
		return 2
	}
	switch args[0] {
	case "save":
		return runSnapshotSave(args[1:])
	case "restore":
		return runSnapshotRestore(args[1:])
	case "status":
		return runSnapshotStatus(args[1:])
	default:
		fmt.Fprintln(os.Stderr, snapshotUsage)
		return 2
	}
}

func runSnapshotSave(args []string) int {
	fs := flag.NewFlagSet("kite snapshot save", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "http://127.0.0.1:2379", "client URL of the server to snapshot")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		return fatalf("snapshot save needs exactly one FILE argument")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := saveSnapshot(ctx, *endpoints, fs.Arg(0)); err != nil {
		return fatalf("snapshot save: %v", err)
	}
	fmt.Printf("Snapshot saved at %s\n", fs.Arg(0))
	return 0
}

// saveSnapshot writes the stream to a temporary file and renames it, so a
// failed save never leaves a truncated snapshot under the final name.
func saveSnapshot(ctx context.Context, endpoint, file string) (err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("connect %s: %w", endpoint, err)
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("start snapshot: %w", err)
	}
	defer rc.Close()
	tmp := file + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, rc); err != nil {
		return fmt.Errorf("receive snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	return os.Rename(tmp, file)
}

func runSnapshotRestore(args []string) int {
	fs := flag.NewFlagSet("kite snapshot restore", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory to create (required)")
	name := fs.String("name", "default", "raftsql: this member's name in --initial-cluster")
	initial := fs.String("initial-cluster", "", "raftsql: the new cluster's members, name=peerURL,...; makes DIR a member of it")
	token := fs.String("initial-cluster-token", "etcd-cluster", "raftsql: the new cluster's token")
	var advertise urlsFlag
	fs.Var(&advertise, "initial-advertise-peer-urls", "raftsql: this member's peer URLs (checked against --initial-cluster)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *dataDir == "" {
		return fatalf("snapshot restore needs --data-dir DIR and exactly one FILE argument")
	}
	if *initial != "" {
		cluster, err := raftsql.ParseInitialCluster(*initial)
		if err != nil {
			return fatalf("snapshot restore: %v", err)
		}
		data, err := readSnapshotFile(context.Background(), slog.Default(), fs.Arg(0))
		if err != nil {
			return fatalf("snapshot restore: %v", err)
		}
		rev, err := raftsql.Restore(context.Background(), raftsql.Config{Name: *name, DataDir: *dataDir,
			InitialCluster: cluster, Token: *token, AdvertisePeer: advertise}, data)
		if err != nil {
			return fatalf("snapshot restore: %v", err)
		}
		fmt.Printf("Restored %s into %s at revision %d as member %s of a new cluster\n", fs.Arg(0), *dataDir, rev, *name)
		return 0
	}
	rev, err := restoreSnapshot(context.Background(), slog.Default(), fs.Arg(0), *dataDir)
	if err != nil {
		return fatalf("snapshot restore: %v", err)
	}
	fmt.Printf("Restored %s into %s at revision %d\n", fs.Arg(0), *dataDir, rev)
	return 0
}

// restoreSnapshot writes the kite database of a snapshot file (kite's, or
// etcd's converted) into dataDir and opens it once to prove it is a kite
// database. It returns the restored revision.
func restoreSnapshot(ctx context.Context, log *slog.Logger, file, dataDir string) (int64, error) {
	dbPath := datastore.SQLitePath("", dataDir)
	if _, err := os.Stat(dbPath); err == nil {
		return 0, fmt.Errorf("%s already exists; restore into a new data directory", dbPath)
	}
	data, err := readSnapshotFile(ctx, log, file)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return 0, fmt.Errorf("create data dir: %w", err)
	}
	if err := writeFileSync(dbPath, data); err != nil {
		return 0, err
	}
	b, err := sqlite.Open(ctx, dbPath, sqlite.Options{})
	if err != nil {
		os.Remove(dbPath)
		return 0, fmt.Errorf("snapshot is not a kite database: %w", err)
	}
	defer b.Close()
	return readRevision(ctx, b)
}

// readSnapshotFile returns the kite database a snapshot file holds, after
// checking its sha256 trailer (present when the file came through the
// Snapshot RPC): a kite snapshot as it is, an etcd snapshot converted
// (snapshot_etcd.go).
func readSnapshotFile(ctx context.Context, log *slog.Logger, file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	if data, err = stripChecksum(data); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if data, err = snapshotDatabase(ctx, log, data); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return data, nil
}

// stripChecksum verifies and removes the 32-byte sha256 trailer that etcd's
// snapshot stream appends (a database is a whole number of 512-byte
// sectors, so a trailer shows as size % 512 == 32).
func stripChecksum(data []byte) ([]byte, error) {
	if len(data)%512 != sha256.Size {
		return data, nil
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("sha256 checksum mismatch: the snapshot is corrupt or truncated")
	}
	return body, nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	// The new directory entry must be durable too.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		defer d.Close()
		return d.Sync()
	}
	return nil
}

func readRevision(ctx context.Context, b mvcc.Backend) (int64, error) {
	tx, err := b.BeginRead(ctx)
	if err != nil {
		return 0, fmt.Errorf("read restored database: %w", err)
	}
	defer tx.Rollback()
	current, _, err := tx.Revisions(ctx)
	if err != nil {
		return 0, fmt.Errorf("read restored revision: %w", err)
	}
	return current, nil
}
