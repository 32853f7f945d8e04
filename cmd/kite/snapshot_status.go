package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/kite-db/kite/pkg/drivers/sqlite"
	"github.com/kite-db/kite/pkg/mvcc"
)

// snapshotStatus is what `kite snapshot status` reports of a snapshot
// file, in etcdutl's columns. Hash is the key space's HashKV at Revision
// (what `etcdctl endpoint hashkv` reports of a running member, so a
// snapshot can be matched with the cluster it came from); TotalKeys counts
// the keys alive at Revision.
type snapshotStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKeys int64  `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	Version   string `json:"version"`
}

func runSnapshotStatus(args []string) int {
	fs := flag.NewFlagSet("kite snapshot status", flag.ContinueOnError)
	format := fs.String("w", "simple", "output format: simple, table or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		return fatalf("snapshot status needs exactly one FILE argument")
	}
	st, err := readSnapshotStatus(context.Background(), fs.Arg(0))
	if err != nil {
		return fatalf("snapshot status: %v", err)
	}
	switch *format {
	case "simple":
		fmt.Printf("%x, %d, %d, %d B, %s\n", st.Hash, st.Revision, st.TotalKeys, st.TotalSize, st.Version)
	case "table":
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HASH\tREVISION\tTOTAL KEYS\tTOTAL SIZE\tVERSION")
		fmt.Fprintf(tw, "%x\t%d\t%d\t%d B\t%s\n", st.Hash, st.Revision, st.TotalKeys, st.TotalSize, st.Version)
		tw.Flush()
	case "json":
		b, _ := json.Marshal(st)
		fmt.Println(string(b))
	default:
		return fatalf("snapshot status: -w %q: want simple, table or json", *format)
	}
	return 0
}

// readSnapshotStatus opens a copy of the snapshot's database (opening
// writes to a SQLite file; the snapshot itself stays as it was).
func readSnapshotStatus(ctx context.Context, file string) (*snapshotStatus, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	if data, err = stripChecksum(data); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	switch detectSnapshot(data) {
	case formatEtcd:
		return etcdSnapshotStatus(data)
	case formatUnknown:
		return nil, fmt.Errorf("%s: %w", file, errUnknownSnapshot)
	}
	dir, err := os.MkdirTemp("", "kite-snapshot-status-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "kite.db")
	if err := writeFileSync(path, data); err != nil {
		return nil, err
	}
	b, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return nil, fmt.Errorf("snapshot is not a kite database: %w", err)
	}
	defer b.Close()
	s, err := mvcc.Open(ctx, b, mvcc.Config{})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	h, err := s.HashKV(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("hash: %w", err)
	}
	tx, err := b.BeginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	keys, err := tx.Count(ctx, []byte{0}, []byte{0}, h.HashRevision)
	if err != nil {
		return nil, fmt.Errorf("count keys: %w", err)
	}
	return &snapshotStatus{Hash: h.Hash, Revision: h.HashRevision, TotalKeys: keys,
		TotalSize: int64(len(data)), Version: version.Version}, nil
}

// etcdSnapshotStatus reads an etcd snapshot as it is, without converting
// it: the hash must be etcd's HashKV, which is over etcd's own encoding of
// the rows (kite's HashKV of a converted copy is over kite's), so that it
// matches what the etcd it was taken of answered.
func etcdSnapshotStatus(data []byte) (*snapshotStatus, error) {
	snap, err := openEtcdSnapshot(data)
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	current, compacted, err := snap.revisions()
	if err != nil {
		return nil, err
	}
	hash, keys, err := snap.hashKV(compacted, current)
	if err != nil {
		return nil, fmt.Errorf("hash: %w", err)
	}
	v := snap.storageVersion()
	if v == "" {
		v = version.Version
	}
	return &snapshotStatus{Hash: hash, Revision: current, TotalKeys: keys, TotalSize: int64(len(data)), Version: v}, nil
}
