package mvcc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/crypto/bcrypt"
)

// Config tunes a Store. Zero values take etcd's defaults.
type Config struct {
	// QuotaBackendBytes raises the NOSPACE alarm when the database would
	// grow past it (etcd --quota-backend-bytes; 0: 2 GiB; negative: none).
	QuotaBackendBytes int64
	// ProgressNotifyInterval is the period of progress notifications to
	// watchers that asked for them (etcd: 10 min).
	ProgressNotifyInterval time.Duration
	// MaxBatch bounds how many queued write requests share one commit.
	MaxBatch int
	// CompactBatchRevisions bounds the revisions one physical compaction
	// step walks before it lets writers in again (1000); within it the
	// step follows how long steps take (compact_physical.go).
	CompactBatchRevisions int64
	// MinLeaseTTL is the smallest TTL a lease gets (etcd: 2 s with default
	// election timing).
	MinLeaseTTL int64
	// MemberID names this member in alarms.
	MemberID uint64
	// AuthToken is etcd's --auth-token: "simple" (default) or
	// "jwt,pub-key=...,priv-key=...,sign-method=...[,ttl=...]".
	AuthToken string
	// AuthTokenTTL is how long an unused simple token lives (etcd's
	// --auth-token-ttl, default 300 s).
	AuthTokenTTL time.Duration
	// BcryptCost hashes passwords (etcd's --bcrypt-cost, default 10).
	BcryptCost int
	// ReadAheadBytes bounds the pages of paginated lists read ahead and
	// not yet asked for (readahead.go; 64 MiB).
	ReadAheadBytes int64
	// WatchRingBytes bounds the events of recent revisions kept in memory
	// for watchers that fall a little behind or start a few revisions
	// back (watch_ring.go; 16 MiB). Older history is read from the log.
	WatchRingBytes int64
	Logger         *slog.Logger
}

func (c *Config) setDefaults() {
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = 2 << 30
	}
	if c.ProgressNotifyInterval == 0 {
		c.ProgressNotifyInterval = 10 * time.Minute
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 256
	}
	if c.ReadAheadBytes <= 0 {
		c.ReadAheadBytes = 64 << 20
	}
	if c.WatchRingBytes <= 0 {
		c.WatchRingBytes = defaultRingBytes
	}
	if c.CompactBatchRevisions == 0 {
		c.CompactBatchRevisions = 1000
	}
	if c.MinLeaseTTL == 0 {
		c.MinLeaseTTL = 2
	}
	if c.AuthToken == "" {
		c.AuthToken = DefaultAuthToken
	}
	if c.AuthTokenTTL == 0 {
		c.AuthTokenTTL = DefaultAuthTokenTTL
	}
	if c.BcryptCost == 0 {
		c.BcryptCost = bcrypt.DefaultCost
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Store is etcd's key-value state machine over a Backend: reads, the
// group-committed write path, leases, compaction and the watch hub. How
// its writes are ordered is its sequencer's business (sequencer.go); the
// package doc follows a write through the Store in each mode.
type Store struct {
	cfg Config
	b   Backend
	log *slog.Logger
	// seq orders writes; chosen once, in Open, from what b is.
	seq sequencer

	// current and compacted mirror the committed revisions; they move only
	// on the writer's goroutine, after commit (commit.go's publish step).
	current   atomic.Int64
	compacted atomic.Int64
	// primary is set while this Store runs the jobs that must run once per
	// storage (lease expiry, automatic and physical compaction): always for
	// a local storage; otherwise while the shared storage or the replicated
	// log says this Store holds the role (primary.go).
	primary atomic.Bool
	// conflicts counts the batches applied again after losing to a
	// concurrent writer (commit.go).
	conflicts atomic.Int64

	// writec is the writer's queue (writer.go).
	writec   chan job
	lessor   *lessor
	quota    *quota
	physical *physicalCompactor
	hub      *watchHub
	auth     *authority
	reads    *readCache
	// diskFullWarned is when a full disk was last logged (writer only).
	diskFullWarned time.Time
	// guard refuses everything once the storage is behind what was
	// served (history.go).
	guard historyGuard

	ctx       context.Context // ends at Close; every goroutine watches it
	cancel    context.CancelFunc
	stopc     chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Open starts a Store over b. A new store starts at revision 1, as etcd
// does. Leases are read back from b and every one gets its full TTL again,
// as after an etcd restart.
func Open(ctx context.Context, b Backend, cfg Config) (*Store, error) {
	cfg.setDefaults()
	s := &Store{
		cfg:    cfg,
		b:      b,
		log:    cfg.Logger.With("component", "mvcc"),
		writec: make(chan job, cfg.MaxBatch),
		lessor: newLessor(time.Now),
		quota:  &quota{limit: cfg.QuotaBackendBytes, b: b, log: cfg.Logger.With("component", "quota")},
		stopc:  make(chan struct{}),
	}
	s.guard.log = s.log
	s.seq = newSequencer(s, b)
	var current, compacted int64
	var leases []Lease
	var alarms []*pb.AlarmMember
	err := s.retryConflicts(ctx, func() (err error) {
		current, compacted, leases, alarms, err = s.load(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.quota.setAlarms(alarms)
	s.current.Store(current)
	s.compacted.Store(compacted)
	for _, l := range leases {
		s.lessor.granted(l)
	}
	s.quota.refresh(ctx)
	if s.auth, err = openAuth(ctx, b, cfg, s.log); err != nil {
		return nil, err
	}
	s.reads = newReadCache(s.beginRead, s.Revisions, cfg.ReadAheadBytes)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.physical = newPhysicalCompactor(s, cfg.CompactBatchRevisions)
	s.hub = newWatchHub(hubConfig{
		history:          s.history,
		compacted:        func() int64 { return s.compacted.Load() },
		startRev:         current,
		progressInterval: cfg.ProgressNotifyInterval,
		ringBytes:        int(cfg.WatchRingBytes),
		logger:           s.log,
	})
	s.guard.onLost = s.hub.fail
	s.wg.Add(3)
	go s.writeLoop()
	go s.physical.loop(s.ctx)
	go s.expiryLoop(s.ctx, 500*time.Millisecond)
	if err := s.seq.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// load reads the revisions, leases and alarms, initialising an empty store at
// revision 1.
func (s *Store) load(ctx context.Context) (current, compacted int64, leases []Lease, alarms []*pb.AlarmMember, err error) {
	tx, err := s.b.BeginWrite(ctx)
	if err != nil {
		return 0, 0, nil, nil, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if current, compacted, err = tx.Revisions(ctx); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("read revisions: %w", err)
	}
	if current == 0 {
		current = 1
		if err = tx.SetRevisions(ctx, current, compacted); err != nil {
			return 0, 0, nil, nil, fmt.Errorf("initialise revision: %w", err)
		}
	}
	if leases, err = tx.Leases(ctx); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("read leases: %w", err)
	}
	if alarms, err = tx.Alarms(ctx); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("read alarms: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("commit: %w", err)
	}
	return current, compacted, leases, alarms, nil
}

// beginRead opens a read transaction and reads its revisions. The caller ends
// it with Rollback.
func (s *Store) beginRead(ctx context.Context) (tx ReadTx, current, compacted int64, err error) {
	if err := s.guard.lost(); err != nil {
		return nil, 0, 0, err
	}
	// Loaded first: every revision published by then was committed, so
	// the snapshot must hold it.
	published := s.current.Load()
	if tx, err = s.b.BeginRead(ctx); err != nil {
		return nil, 0, 0, s.guard.note(fmt.Errorf("begin read: %w", err))
	}
	if current, compacted, err = tx.Revisions(ctx); err != nil {
		tx.Rollback()
		return nil, 0, 0, fmt.Errorf("read revisions: %w", err)
	}
	if err := s.guard.behind(current, published); err != nil {
		tx.Rollback()
		return nil, 0, 0, err
	}
	return tx, current, compacted, nil
}

// history serves the watch hub's catch-up reads from one snapshot.
func (s *Store) history(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]Change, int64, error) {
	tx, _, compacted, err := s.beginRead(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer tx.Rollback()
	changes, err := tx.Changes(ctx, fromRev, toRev, limit, withPrev)
	if err != nil {
		return nil, 0, fmt.Errorf("read changes: %w", err)
	}
	return changes, compacted, nil
}

// Range serves a RangeRequest. Every acknowledged write is committed before
// its answer, so a fresh snapshot makes the read linearizable.
func (s *Store) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return s.rangeRead(ctx, r, true)
}

// RangePage is Range without counting the keys of the whole range (Count
// stays 0 unless r is count-only). RangeStream reads a large range page by
// page and counts once at the end, as etcd does, instead of recounting the
// rest of the range for every page.
func (s *Store) RangePage(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return s.rangeRead(ctx, r, false)
}

func (s *Store) rangeRead(ctx context.Context, r *pb.RangeRequest, withCount bool) (*pb.RangeResponse, error) {
	if err := s.linearizable(ctx, r.Serializable); err != nil {
		return nil, err
	}
	defer traceFrom(ctx).step("range read from the database")
	switch {
	case len(r.RangeEnd) == 0 && r.Revision == 0 && !r.CountOnly:
		return s.getLatest(ctx, r)
	case !withCount:
		return s.reads.rangeUncounted(ctx, r)
	}
	return s.reads.rangeCounted(ctx, r)
}

// linearizable is the barrier in front of a read that must see every write
// acknowledged before it.
func (s *Store) linearizable(ctx context.Context, serializable bool) error {
	if serializable {
		return nil
	}
	return s.seq.readBarrier(ctx)
}

// Put, DeleteRange and Txn go through the group-committed write path.
func (s *Store) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	resp, err := s.admit(ctx, &pb.InternalRaftRequest{Put: r})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.PutResponse), nil
}

func (s *Store) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := s.admit(ctx, &pb.InternalRaftRequest{DeleteRange: r})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.DeleteRangeResponse), nil
}

// Txn serves read-only txns from a snapshot and the rest through the writer.
func (s *Store) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if IsReadOnlyTxn(r) {
		return s.readTxn(ctx, r)
	}
	resp, err := s.admit(ctx, &pb.InternalRaftRequest{Txn: r})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.TxnResponse), nil
}

// admit checks the quota, then queues the write. The request that finds the
// quota exhausted raises the NOSPACE alarm through the write path, so the
// alarm is stored like any other state, then fails as etcd's does.
func (s *Store) admit(ctx context.Context, r *pb.InternalRaftRequest) (any, error) {
	s.quota.refreshIfForgotten(ctx)
	raise, err := s.quota.check(r)
	if raise {
		alarm := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: s.cfg.MemberID, Alarm: pb.AlarmType_NOSPACE}
		if _, aerr := s.seq.write(ctx, &pb.InternalRaftRequest{Alarm: alarm}); aerr != nil {
			s.log.Warn("raise NOSPACE alarm", "err", aerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return s.seq.write(ctx, r)
}

// IsReadOnlyTxn reports whether t is served as a read, from a snapshot
// and without the write path: etcd's rule (etcdserver/txn.IsTxnReadonly),
// every operation of both branches a Range. A nested Txn counts as a write
// even when it only reads, as in etcd, which proposes such a txn; the
// server's request checks and metrics use this same predicate.
func IsReadOnlyTxn(t *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// readTxn evaluates a txn whose every operation is a range on a read
// snapshot: it cannot write, so it need not wait for the writer.
func (s *Store) readTxn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := s.linearizable(ctx, false); err != nil {
		return nil, err
	}
	tx, current, compacted, err := s.beginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	a := &evaluator{ctx: ctx, tx: tx, current: current, compacted: compacted}
	return a.applyTxn(r)
}

// Compact makes revisions below r.Revision unreadable and removes their rows
// in the background; with r.Physical the answer waits for the removal.
func (s *Store) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := s.seq.write(ctx, &pb.InternalRaftRequest{Compaction: r})
	if err != nil {
		return nil, err
	}
	if r.Physical {
		if err := s.physical.wait(ctx, r.Revision); err != nil {
			return nil, err
		}
	}
	return resp.(*pb.CompactionResponse), nil
}

// LeaseGrant picks an ID when the client left it 0 (before the request
// enters the write path, so that applying it stays deterministic) and raises
// the TTL to the minimum, as etcd's lessor does.
func (s *Store) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if r.TTL > MaxLeaseTTL {
		return nil, ErrLeaseTTLTooLarge
	}
	g := &pb.LeaseGrantRequest{ID: r.ID, TTL: max(r.TTL, s.cfg.MinLeaseTTL)}
	if g.ID == 0 {
		g.ID = newLeaseID()
	}
	resp, err := s.admit(ctx, &pb.InternalRaftRequest{LeaseGrant: g})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.LeaseGrantResponse), nil
}

// newLeaseID returns a random positive ID, as unlikely to collide as etcd's
// member-prefixed, time-based IDs.
func newLeaseID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id != 0 {
			return id
		}
	}
}

func (s *Store) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := s.seq.write(ctx, &pb.InternalRaftRequest{LeaseRevoke: r})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.LeaseRevokeResponse), nil
}

// LeaseRenew restarts lease id's TTL and returns it (ErrLeaseNotFound if it
// does not exist or has already expired), where expiry is decided.
func (s *Store) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	return s.seq.renewLease(ctx, id)
}

// LeaseTimeToLive answers with ErrLeaseNotFound for an unknown lease; the
// gRPC layer turns that into etcd's TTL -1 answer.
func (s *Store) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return s.seq.leaseTimeToLive(ctx, r)
}

// LeaseLeases lists the stored leases: the lease table decides which exist.
func (s *Store) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := s.linearizable(ctx, false); err != nil {
		return nil, err
	}
	tx, current, _, err := s.beginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	leases, err := tx.Leases(ctx)
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{Revision: current}}
	for _, l := range leases {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: l.ID})
	}
	return resp, nil
}

// Primary reports whether this Store runs the jobs that must run once per
// storage (always true unless the storage is shared).
func (s *Store) Primary() bool { return s.primary.Load() }

// SlowWatchers returns how many watchers are not on the live feed: their
// client reads too slowly, or they are catching up from history (etcd's
// etcd_debugging_mvcc_slow_watcher_total).
func (s *Store) SlowWatchers() int { return s.hub.slowWatchers() }

// WriteConflicts is how often a write batch lost to a concurrent writer
// on a shared storage (Galera) and was applied again.
func (s *Store) WriteConflicts() int64 { return s.conflicts.Load() }

// Revisions returns the current and compacted revisions.
func (s *Store) Revisions() (current, compacted int64) {
	return s.current.Load(), s.compacted.Load()
}

// Alarm lists, activates or deactivates alarms. Changes go through the write
// path and are stored; kite itself raises only NOSPACE.
func (s *Store) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action == pb.AlarmRequest_GET {
		alarms := s.guard.alarms(s.cfg.MemberID, r.Alarm, s.quota.get(r.Alarm))
		return &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: s.current.Load()}, Alarms: alarms}, nil
	}
	resp, err := s.seq.write(ctx, &pb.InternalRaftRequest{Alarm: r})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.AlarmResponse), nil
}

// Backend returns the storage (for Status, Defragment and Snapshot).
func (s *Store) Backend() Backend { return s.b }

// Close stops every goroutine of the store and closes the watch streams. It
// does not close the Backend.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		close(s.stopc)
		s.reads.close()
		s.wg.Wait()
		s.hub.close()
		if err := s.auth.close(); err != nil {
			s.log.Warn("close auth store", "err", err)
		}
	})
	return nil
}
