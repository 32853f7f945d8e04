package mvcc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/auth"
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
	// step follows how long steps take (compactor.go).
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
// group-committed write path, leases, compaction and the watch hub.
type Store struct {
	cfg Config
	b   Backend
	log *slog.Logger

	// current and compacted mirror the committed revisions; they move only
	// in the writer, after commit.
	current   atomic.Int64
	compacted atomic.Int64

	// shared is the Backend's Shared side (nil when this Store is the only
	// writer of its storage); notices is its feed of other Stores' commits.
	shared  Shared
	notices <-chan Notice
	// primary is set while this Store runs the jobs that must run once per
	// storage (lease expiry, automatic and physical compaction); always
	// set when the storage is not shared.
	primary atomic.Bool
	// repl is the Backend's replicated log (raftsql); nil when writes are
	// applied where they are received.
	repl Replicator

	writec    chan *pending
	lessor    *lessor
	quota     *quota
	compactor *compactor
	hub       *watchHub
	// auth is etcd's auth store over authModel, the authentication state
	// (auth.go); authModel is replaced when the state is read again.
	auth      auth.AuthStore
	authModel *authModel
	// diskFullWarned is when a full disk was last logged (writer only).
	diskFullWarned time.Time
	// pageCounts spares each page of a paginated list a count of the rest
	// of its range.
	pageCounts *pageCounts
	// rangeCounts carries each range's newest count forward through the
	// log (rangecount.go).
	rangeCounts *rangeCounts
	readAhead   *readAhead

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
		writec: make(chan *pending, cfg.MaxBatch),
		lessor: newLessor(time.Now),
		quota:  &quota{limit: cfg.QuotaBackendBytes, b: b, log: cfg.Logger.With("component", "quota")},
		stopc:  make(chan struct{}),

		pageCounts:  newPageCounts(),
		rangeCounts: newRangeCounts(),
	}
	s.readAhead = newReadAhead(s)
	if r, ok := b.(Replicator); ok {
		s.repl = r
	} else if sh, ok := b.(Shared); ok {
		// Subscribed before the state is loaded: no commit after the load
		// can be missed.
		s.shared, s.notices = sh, sh.Notices()
	} else {
		s.primary.Store(true)
	}
	current, compacted, leases, alarms, err := s.load(ctx)
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
	if err := s.openAuth(ctx); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.compactor = newCompactor(s, cfg.CompactBatchRevisions)
	s.hub = newWatchHub(hubConfig{
		history:          s.history,
		compacted:        func() int64 { return s.compacted.Load() },
		startRev:         current,
		progressInterval: cfg.ProgressNotifyInterval,
		ringBytes:        int(cfg.WatchRingBytes),
		logger:           s.log,
	})
	s.wg.Add(3)
	go s.writeLoop()
	go s.compactor.loop(s.ctx)
	go s.expiryLoop(s.ctx, 500*time.Millisecond)
	switch {
	case s.repl != nil:
		s.wg.Add(1)
		go s.roleLoop(s.ctx, s.repl.Primary())
		if compacted > 0 {
			// Physical compaction is every node's own work.
			s.compactor.notify(compacted)
		}
		if err := s.repl.Start(s); err != nil {
			s.Close()
			return nil, fmt.Errorf("start replication: %w", err)
		}
	case s.shared != nil:
		s.wg.Add(1)
		go s.roleLoop(s.ctx, s.shared.Primary())
	case compacted > 0:
		// A crash may have cut a physical compaction short: finish it.
		s.compactor.notify(compacted)
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

// snapshot opens a read snapshot and reads its revisions. The caller ends
// it with Rollback.
func (s *Store) snapshot(ctx context.Context) (tx ReadTx, current, compacted int64, err error) {
	if tx, err = s.b.BeginRead(ctx); err != nil {
		return nil, 0, 0, fmt.Errorf("begin read: %w", err)
	}
	if current, compacted, err = tx.Revisions(ctx); err != nil {
		tx.Rollback()
		return nil, 0, 0, fmt.Errorf("read revisions: %w", err)
	}
	return tx, current, compacted, nil
}

// history serves the watch hub's catch-up reads from one snapshot.
func (s *Store) history(ctx context.Context, fromRev, toRev int64, limit int, withPrev bool) ([]Change, int64, error) {
	tx, _, compacted, err := s.snapshot(ctx)
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
	if !r.Serializable && s.repl != nil {
		traceFrom(ctx).step("linearizable read barrier (raft read index)")
	}
	defer traceFrom(ctx).step("range read from the database")
	if len(r.RangeEnd) == 0 && r.Revision == 0 && !r.CountOnly {
		return s.getLatest(ctx, r)
	}
	if !withCount {
		tx, current, compacted, err := s.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback()
		return executeRange(ctx, s.unchanged(tx, current, compacted), r, current, compacted, false)
	}
	// A page read ahead holds the rows at r.Revision, which never change;
	// only a compaction since can make the answer an error instead.
	if resp := s.readAhead.take(ctx, r); resp != nil && r.Revision >= s.compacted.Load() {
		resp.Header.Revision = s.current.Load()
		return resp, nil
	}
	resp, continued, err := s.readPage(ctx, r)
	if err != nil {
		return nil, err
	}
	if continued {
		s.readAhead.follow(r, resp)
	}
	return resp, nil
}

// unchanged wraps a read transaction for executeRange: older revisions of
// unchanged ranges read from the live index, counts carried forward.
func (s *Store) unchanged(tx ReadTx, current, compacted int64) *unchangedTx {
	return &unchangedTx{ReadTx: tx, current: current, compacted: compacted, counts: s.rangeCounts}
}

// readPage answers a Range from a fresh snapshot, counting through
// pageCounts. continued reports that r continues a paginated list (its count
// was known from the previous page).
func (s *Store) readPage(ctx context.Context, r *pb.RangeRequest) (resp *pb.RangeResponse, continued bool, err error) {
	tx, current, compacted, err := s.snapshot(ctx)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	ctr := &countingTx{ReadTx: s.unchanged(tx, current, compacted), counts: s.pageCounts}
	if resp, err = executeRange(ctx, ctr, r, current, compacted, true); err != nil {
		return nil, false, err
	}
	rev, _ := checkRevision(r.Revision, current, compacted) // executeRange has accepted it
	s.pageCounts.rememberNextPage(r, resp, rev)
	return resp, ctr.hit, nil
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
	if txnReadOnly(r) {
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
		if _, aerr := s.write(ctx, &pb.InternalRaftRequest{Alarm: alarm}); aerr != nil {
			s.log.Warn("raise NOSPACE alarm", "err", aerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return s.write(ctx, r)
}

func txnReadOnly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
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
	tx, current, compacted, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	a := &applier{ctx: ctx, tx: readOnlyWriteTx{tx}, current: current, compacted: compacted}
	return a.applyTxn(r)
}

// readOnlyWriteTx lets the applier run a read-only txn on a ReadTx; its
// write methods are never reached because the txn has no write operation.
type readOnlyWriteTx struct{ ReadTx }

var errReadOnly = errors.New("mvcc: write in a read-only transaction")

func (readOnlyWriteTx) Put(context.Context, *mvccpb.KeyValue, int64) error { return errReadOnly }
func (readOnlyWriteTx) Delete(context.Context, []byte, int64, int64) error { return errReadOnly }
func (readOnlyWriteTx) SetRevisions(context.Context, int64, int64) error   { return errReadOnly }
func (readOnlyWriteTx) PutLease(context.Context, Lease) error              { return errReadOnly }
func (readOnlyWriteTx) DeleteLease(context.Context, int64) error           { return errReadOnly }
func (readOnlyWriteTx) PutAlarm(context.Context, *pb.AlarmMember) error    { return errReadOnly }
func (readOnlyWriteTx) DeleteAlarm(context.Context, *pb.AlarmMember) error { return errReadOnly }
func (readOnlyWriteTx) PutAuthState(context.Context, []byte) error         { return errReadOnly }
func (readOnlyWriteTx) Commit() error                                      { return errReadOnly }
func (readOnlyWriteTx) CompactBatch(context.Context, int64, int64, int64) (int64, error) {
	return 0, errReadOnly
}

// Compact makes revisions below r.Revision unreadable and removes their rows
// in the background; with r.Physical the answer waits for the removal.
func (s *Store) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := s.write(ctx, &pb.InternalRaftRequest{Compaction: r})
	if err != nil {
		return nil, err
	}
	if r.Physical {
		if err := s.compactor.wait(ctx, r.Revision); err != nil {
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
	resp, err := s.write(ctx, &pb.InternalRaftRequest{LeaseRevoke: r})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.LeaseRevokeResponse), nil
}

// LeaseRenew restarts lease id's TTL and returns it (ErrLeaseNotFound if it
// does not exist or has already expired). On a shared storage the renewal
// is also sent to the other Stores, whose clocks must follow it.
func (s *Store) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	if s.repl != nil && !s.primary.Load() {
		// Only the leader's clocks decide expiry.
		return s.repl.LeaseRenewAtLeader(ctx, id)
	}
	// The leader may not have applied a grant its cluster committed yet.
	if err := s.linearizable(ctx, false); err != nil {
		return 0, err
	}
	ttl, err := s.lessor.renew(id)
	if errors.Is(err, ErrLeaseNotFound) && s.shared != nil {
		// Granted through another server a moment ago?
		if err := s.sync(ctx); err != nil {
			return 0, err
		}
		ttl, err = s.lessor.renew(id)
	}
	// Announced by the primary too: every Store's clock answers TimeToLive
	// and KeepAlive, and any of them may become primary.
	if err != nil || s.shared == nil {
		return ttl, err
	}
	if err := s.shared.RenewLease(ctx, id); err != nil {
		return 0, fmt.Errorf("announce renewal of lease %d: %w", id, err)
	}
	return ttl, nil
}

// LeaseTimeToLive answers with ErrLeaseNotFound for an unknown lease; the
// gRPC layer turns that into etcd's TTL -1 answer.
func (s *Store) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if s.repl != nil && !s.primary.Load() {
		return s.repl.LeaseTimeToLiveAtLeader(ctx, r)
	}
	if err := s.linearizable(ctx, false); err != nil {
		return nil, err
	}
	// On a shared storage the lease may have been granted or revoked
	// through another server a moment ago: catch up first, so the answer is
	// linearizable as etcd's (which asks its leader).
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	granted, left, ok := s.lessor.remaining(r.ID)
	if !ok {
		return nil, ErrLeaseNotFound
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{Revision: s.current.Load()}, ID: r.ID, TTL: left, GrantedTTL: granted}
	if r.Keys {
		tx, err := s.b.BeginRead(ctx)
		if err != nil {
			return nil, fmt.Errorf("begin read: %w", err)
		}
		defer tx.Rollback()
		if resp.Keys, err = tx.LeaseKeys(ctx, r.ID); err != nil {
			return nil, fmt.Errorf("keys of lease %d: %w", r.ID, err)
		}
	}
	return resp, nil
}

// LeaseLeases lists the stored leases: the lease table decides which exist.
func (s *Store) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := s.linearizable(ctx, false); err != nil {
		return nil, err
	}
	tx, current, _, err := s.snapshot(ctx)
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

// Revisions returns the current and compacted revisions.
func (s *Store) Revisions() (current, compacted int64) {
	return s.current.Load(), s.compacted.Load()
}

// Alarm lists, activates or deactivates alarms. Changes go through the write
// path and are stored; kite itself raises only NOSPACE.
func (s *Store) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action == pb.AlarmRequest_GET {
		return &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: s.current.Load()}, Alarms: s.quota.get(r.Alarm)}, nil
	}
	resp, err := s.write(ctx, &pb.InternalRaftRequest{Alarm: r})
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
		s.readAhead.close()
		s.wg.Wait()
		s.hub.close()
	})
	return nil
}
