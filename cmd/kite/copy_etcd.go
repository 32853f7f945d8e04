package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kite-db/kite/pkg/mvcc"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// copyFromEtcd copies every key of a running etcd-compatible server at one
// revision R, with its revisions, version and lease, and the leases.
func copyFromEtcd(ctx context.Context, cfg copyConfig, dst mvcc.Backend, p *progress, logw io.Writer) (copied, error) {
	cc := clientv3.Config{
		Endpoints:   cfg.fromEtcd,
		DialTimeout: cfg.dialTimeout,
		Username:    cfg.user,
		Password:    cfg.password,
		Logger:      zap.NewNop(),
	}
	for _, ep := range cfg.fromEtcd {
		if s, _, _ := strings.Cut(strings.ToLower(ep), "://"); s == "https" || s == "unixs" {
			tc, err := cfg.tls.ClientConfig()
			if err != nil {
				return copied{}, fmt.Errorf("source TLS: %w", err)
			}
			cc.TLS = tc
			break
		}
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return copied{}, fmt.Errorf("connect source: %w", err)
	}
	defer cli.Close()

	// The leases and their TTLs are read before the target's transaction
	// begins, one request per lease: Postgres ends a write transaction
	// idle for 30 s, and a cluster may have many leases.
	ttls, err := leaseTTLs(ctx, cli, cfg.commandTimeout)
	kine := isKineUnsupported(err)
	if kine {
		fmt.Fprintln(logw, "kite copy: the source is kine (no lease listing): lease IDs are TTLs, versions are not kept, whole-keyspace ranges are not paged")
		ttls, err = map[int64]int64{}, nil
	}
	if err != nil {
		return copied{}, err
	}
	var c copied
	err = inWriteTx(ctx, cfg, dst, func(wtx mvcc.WriteTx) error {
		out := progressTx{WriteTx: wtx, p: p}
		// Keys sharing a mod revision (written by one txn) get
		// sub-revisions 0, 1, 2... in key order, which is the order Range
		// returns them in. One entry per distinct mod revision.
		subs := make(map[int64]int64)
		leased := make(map[int64]bool)
		c.sum = newKeysSum()
		key := []byte{0}
		var total int64
		for {
			opts := []clientv3.OpOption{clientv3.WithRange("\x00")}
			if !kine {
				// kine answers its whole key space in one response whatever
				// the limit, and nothing for any other range ending at "\x00".
				opts = append(opts, clientv3.WithLimit(cfg.pageSize))
			}
			if c.current != 0 {
				opts = append(opts, clientv3.WithRev(c.current))
			}
			rctx, cancel := context.WithTimeout(ctx, cfg.commandTimeout)
			resp, err := cli.Get(rctx, string(key), opts...)
			cancel()
			if errors.Is(err, rpctypes.ErrCompacted) {
				return fmt.Errorf("source compacted revision %d during the copy (stop its compactor or its writers, then retry): %w", c.current, err)
			}
			if err != nil {
				return fmt.Errorf("source: range from %q: %w", key, err)
			}
			if c.current == 0 {
				// The first page fixes R; every later page is read at R,
				// as kube-apiserver reads a paginated list.
				c.current, total = resp.Header.Revision, resp.Count
				p.setTotal(total, "keys")
			}
			if kine {
				sortKeys(resp.Kvs)
			}
			for _, kv := range resp.Kvs {
				if kine && string(kv.Key) == "compact_rev_key" && kv.Version == 0 {
					// kine's own compaction bookkeeping, listed under the name
					// of kube-apiserver's compact_rev_key (which kine keeps
					// as compact_rev_key_apiserver, its version encoded).
					total--
					continue
				}
				if kine && kv.Version == 0 {
					// kine keeps no versions: the least etcd could report.
					kv.Version = 1
					if kv.ModRevision != kv.CreateRevision {
						kv.Version = 2
					}
				}
				if kv.ModRevision > c.current || kv.CreateRevision > kv.ModRevision || kv.Version < 1 {
					return fmt.Errorf("source: key %q at revision %d has create %d, mod %d, version %d", kv.Key, c.current, kv.CreateRevision, kv.ModRevision, kv.Version)
				}
				sub := subs[kv.ModRevision]
				subs[kv.ModRevision] = sub + 1
				if err := out.Put(ctx, kv, sub); err != nil {
					return fmt.Errorf("target: put %q: %w", kv.Key, err)
				}
				p.keys.Add(1)
				c.sum.add(kv)
				if kv.Lease != 0 {
					leased[kv.Lease] = true
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			key = append(slices.Clone(resp.Kvs[len(resp.Kvs)-1].Key), 0)
		}
		if c.sum.n != total {
			return fmt.Errorf("source: read %d keys at revision %d, but its first page counted %d", c.sum.n, c.current, total)
		}
		if kine {
			// kine's LeaseGrant answers ID = TTL: a key's lease is its TTL.
			for id := range leased {
				ttls[id] = id
			}
		}
		if c.leases, err = copyLeases(ctx, cli, cfg.commandTimeout, out, ttls, leased, logw); err != nil {
			return err
		}
		// History before R is not copied: the target reads as compacted at
		// R, as after a compaction, and its next write is R+1.
		c.compacted = c.current
		if err := wtx.SetRevisions(ctx, c.current, c.compacted); err != nil {
			return fmt.Errorf("target: set revisions: %w", err)
		}
		return checkInTx(ctx, wtx, c)
	})
	return c, err
}

// orphanLeaseTTL is given to a lease that keys at R were attached to but
// that was revoked or expired on the source before its TTL could be read:
// the source has deleted those keys since, so the copy lets them expire
// as soon as a kite serves it.
const orphanLeaseTTL = 1

// leaseTTLs lists the source's leases with their granted TTLs.
func leaseTTLs(ctx context.Context, cli *clientv3.Client, timeout time.Duration) (map[int64]int64, error) {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	list, err := cli.Leases(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("source: list leases: %w", err)
	}
	ttls := make(map[int64]int64, len(list.Leases))
	for _, l := range list.Leases {
		ttl, err := timeToLive(ctx, cli, timeout, l.ID)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && ttl.TTL == -1):
			// Revoked since it was listed.
		case err != nil:
			return nil, fmt.Errorf("source: lease %x: %w", int64(l.ID), err)
		default:
			ttls[int64(l.ID)] = ttl.GrantedTTL
		}
	}
	return ttls, nil
}

// timeToLive is one TimeToLive request, bounded by timeout: clientv3 retries
// an unreachable server for as long as its context allows.
func timeToLive(ctx context.Context, cli *clientv3.Client, timeout time.Duration, id clientv3.LeaseID) (*clientv3.LeaseTimeToLiveResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cli.TimeToLive(ctx, id)
}

// copyLeases writes the source's leases (ID and granted TTL): those listed
// before the copy, and every lease a copied key is attached to. A lease
// granted after the list was taken is looked up; one that is gone by then
// was revoked or expired after R, and its keys get a short TTL.
func copyLeases(ctx context.Context, cli *clientv3.Client, timeout time.Duration, dst mvcc.WriteTx, ttls map[int64]int64, leased map[int64]bool, logw io.Writer) ([]mvcc.Lease, error) {
	for id := range leased {
		if _, ok := ttls[id]; ok {
			continue
		}
		ttl, err := timeToLive(ctx, cli, timeout, clientv3.LeaseID(id))
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && ttl.TTL == -1):
			fmt.Fprintf(logw, "kite copy: warning: lease %x of copied keys was revoked on the source after the copied revision; its keys get a %ds TTL\n", id, orphanLeaseTTL)
			ttls[id] = orphanLeaseTTL
		case err != nil:
			return nil, fmt.Errorf("source: lease %x: %w", id, err)
		default:
			ttls[id] = ttl.GrantedTTL
		}
	}
	var out []mvcc.Lease
	for _, id := range slices.Sorted(maps.Keys(ttls)) {
		l := mvcc.Lease{ID: id, TTL: ttls[id]}
		if err := dst.PutLease(ctx, l); err != nil {
			return nil, fmt.Errorf("target: lease %x: %w", l.ID, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// sortKeys puts a whole-key-space answer of kine in etcd's order, bytewise
// by key. kine on MySQL answers in its name column's collation
// (ascii_general_ci: capitals equal to small letters, so '_' after every
// letter), and the copy's sum, compared with the target read back in byte
// order, is taken in the order the keys come. kine answers its whole key
// space in one response, so sorting that response sorts the copy.
func sortKeys(kvs []*mvccpb.KeyValue) {
	slices.SortStableFunc(kvs, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
}

// isKineUnsupported tells kine's answer to LeaseLeases.
func isKineUnsupported(err error) bool {
	return err != nil && strings.Contains(err.Error(), "lease leases is not supported")
}
