package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The soak's keys, as kube-apiserver lays them out.
const (
	soakEventsPrefix = "/registry/events/"
	soakLeasesPrefix = "/registry/leases/"
	// kube-apiserver's endpoint reconciler keeps one key per apiserver
	// here on a lease it keeps alive.
	soakMasterLeasesPrefix = "/registry/masterleases/"
	// compactRevKey is kube-apiserver's compaction bookkeeping key: its
	// version is the compaction's logical clock, shared by every apiserver.
	compactRevKey = "compact_rev_key"
)

const (
	soakNamespaces = 10
	// kube-apiserver's lease reuse for events: an event joins the previous
	// lease while that lease outlives the event's TTL by at most 5% of it
	// (--lease-reuse-duration-seconds is a fraction of the TTL), and a lease
	// takes at most 1000 objects.
	leaseReuseFraction = 0.05
	leaseMaxObjects    = 1000
	// expiryGrace is how late after its lease's TTL an event may be deleted
	// before it counts as not expired: both servers look for expired leases
	// every 500 ms, the rest is a busy shared machine.
	expiryGrace = 15 * time.Second
)

// soakResources are the resources whose objects are created, updated and
// deleted. A function, not a variable: nothing global can change.
func soakResources() []string {
	return []string{"pods", "configmaps", "secrets", "deployments"}
}

// soakPrefixes are the prefixes that are watched: every one the drivers
// write under.
func soakPrefixes() []string {
	var p []string
	for _, r := range soakResources() {
		p = append(p, "/registry/"+r+"/")
	}
	return append(p, soakEventsPrefix, soakLeasesPrefix, soakMasterLeasesPrefix)
}

// soakLoad drives one server. Each server has its own, seeded alike, so
// both see the same sequence of operations at the same rates.
type soakLoad struct {
	cfg   *soakConfig
	t     *target
	stats *soakStats
	watch *soakWatch
	log   *slog.Logger
	// blob is where values are cut from (read-only after construction).
	blob string

	objects []*objectSet // one per resource, each owned by one goroutine
	nodes   []liveObject // the node Lease keys, owned by the node driver
	live    atomic.Int64 // live objects, for the samples

	aborted   chan struct{} // closed by abort
	abortOnce sync.Once

	keepaliveStop context.CancelFunc
	keepalives    sync.WaitGroup
}

// objectSet is one resource's live objects.
type objectSet struct {
	resource string
	prefix   string
	target   int // live objects to hover around
	next     int // sequence of the next name
	live     []liveObject
	rng      *rand.Rand
}

// liveObject is a key and the revision it was last written at, which the
// next update or delete compares against.
type liveObject struct {
	key string
	rev int64
}

func newSoakLoad(cfg *soakConfig, t *target, stats *soakStats, watch *soakWatch, log *slog.Logger) *soakLoad {
	l := &soakLoad{cfg: cfg, t: t, stats: stats, watch: watch, log: log,
		blob: makeValue(2048, 7), aborted: make(chan struct{}), keepaliveStop: func() {}}
	res := soakResources()
	for i, r := range res {
		n := cfg.objects / len(res)
		if i < cfg.objects%len(res) {
			n++
		}
		l.objects = append(l.objects, &objectSet{resource: r, prefix: "/registry/" + r + "/", target: n,
			rng: rand.New(rand.NewPCG(uint64(i), 0x736f616b))})
	}
	return l
}

// conn is the i-th driver connection; connection 0 carries the watchers.
func (l *soakLoad) conn(i int) *clientv3.Client {
	return l.t.conns[1+i%(len(l.t.conns)-1)]
}

// abort stops the drivers early (the server exited).
func (l *soakLoad) abort() { l.abortOnce.Do(func() { close(l.aborted) }) }

// preload creates the live set, the node Leases and the kept-alive leases,
// each resource's objects in its own goroutine.
func (l *soakLoad) preload(ctx context.Context) error {
	errs := make([]error, len(l.objects)+1)
	var wg sync.WaitGroup
	for i, set := range l.objects {
		wg.Go(func() {
			for len(set.live) < set.target && errs[i] == nil {
				errs[i] = l.createObject(ctx, l.conn(i), set)
			}
		})
	}
	wg.Go(func() { errs[len(errs)-1] = l.preloadLeases(ctx) })
	wg.Wait()
	return errors.Join(errs...)
}

func (l *soakLoad) preloadLeases(ctx context.Context) error {
	kv := l.conn(1)
	for i := range l.cfg.nodes {
		k := soakLeasesPrefix + "kube-node-lease/node-" + fmt.Sprintf("%03d", i)
		rev, err := l.txn(ctx, kv, k, clientv3.Compare(clientv3.ModRevision(k), "=", 0),
			clientv3.OpPut(k, l.blob[:350]), false, time.Time{})
		if err != nil {
			return err
		}
		l.nodes = append(l.nodes, liveObject{key: k, rev: rev})
	}
	kaCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.keepaliveStop = stop
	ttl := int64(l.cfg.keepaliveTTL / time.Second)
	for i := range l.cfg.keepalives {
		opCtx, cancel := context.WithTimeout(ctx, l.cfg.OpTimeout)
		t0 := time.Now()
		g, err := kv.Grant(opCtx, ttl)
		cancel()
		if err != nil {
			return fmt.Errorf("grant kept-alive lease: %w", err)
		}
		l.stats.write(t0, time.Now(), g.ResponseHeader.Revision)
		k := soakMasterLeasesPrefix + "10.0.0." + strconv.Itoa(i+1)
		if _, err := l.txn(ctx, kv, k, clientv3.Compare(clientv3.ModRevision(k), "=", 0),
			clientv3.OpPut(k, l.blob[:64], clientv3.WithLease(g.ID)), false, time.Time{}); err != nil {
			return err
		}
		ch, err := kv.KeepAlive(kaCtx, g.ID)
		if err != nil {
			return fmt.Errorf("keep lease %x alive: %w", g.ID, err)
		}
		l.keepalives.Go(func() {
			for range ch {
			}
			// The channel closes when kaCtx ends, or when the lease is gone.
			if kaCtx.Err() == nil {
				l.stats.fail("keepalive", fmt.Errorf("keepalive of lease %x ended: the lease expired or was lost", g.ID))
			}
		})
	}
	return nil
}

// stopKeepalives ends the keepalives and waits for their goroutines.
func (l *soakLoad) stopKeepalives() {
	l.keepaliveStop()
	l.keepalives.Wait()
}

// drive runs every driver until ctx ends (or abort), then waits for them.
// Every request runs to its own end even then: a write cut short after
// the server applied it would leave an event no driver acknowledged.
func (l *soakLoad) drive(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-l.aborted:
			cancel()
		case <-ctx.Done():
		}
	})
	res := len(l.objects)
	if perResource := (2*l.cfg.createRate + l.cfg.updateRate) / float64(res); perResource > 0 {
		for i, set := range l.objects {
			wg.Go(func() { pace(ctx, perResource, func() { l.objectOp(ctx, l.conn(i), set) }) })
		}
	}
	if l.cfg.eventRate > 0 {
		wg.Go(func() {
			var ev eventLeases
			seq := 0
			pace(ctx, l.cfg.eventRate, func() {
				l.createEvent(ctx, l.conn(0), &ev, seq)
				seq++
			})
		})
	}
	if len(l.nodes) > 0 {
		rate := float64(len(l.nodes)) / l.cfg.nodeLeaseEvery.Seconds()
		wg.Go(func() {
			i := 0
			pace(ctx, rate, func() {
				l.renewNode(ctx, l.conn(1), i%len(l.nodes))
				i++
			})
		})
	}
	wg.Go(func() {
		i := 0
		pace(ctx, 1/l.cfg.listEvery.Seconds(), func() {
			l.list(ctx, l.conn(2), l.objects[i%res].prefix)
			i++
		})
	})
	wg.Go(func() { l.compactor(ctx, l.conn(0)) })
	wg.Wait()
}

// pace calls op about rate times a second until ctx ends. A slow op
// delays the next; after a stall of over a second the schedule restarts
// instead of bursting to catch up, as a real client would not.
func pace(ctx context.Context, rate float64, op func()) {
	every := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for ctx.Err() == nil {
		op()
		next = next.Add(every)
		wait := time.Until(next)
		if wait < -time.Second {
			next, wait = time.Now(), 0
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}

// objectOp creates, updates or deletes one object of set. Creates and
// deletes are equally likely; whichever would take the live set more than
// 5% from its target is swapped for the other.
func (l *soakLoad) objectOp(ctx context.Context, kv *clientv3.Client, set *objectSet) {
	total := 2*l.cfg.createRate + l.cfg.updateRate
	x := set.rng.Float64() * total
	create, del := x < l.cfg.createRate, x >= l.cfg.createRate && x < 2*l.cfg.createRate
	slack := max(1, set.target/20)
	switch {
	case del && len(set.live) < set.target-slack:
		create, del = true, false
	case create && len(set.live) > set.target+slack:
		create, del = false, true
	}
	var err error
	switch {
	case create || len(set.live) == 0:
		err = l.createObject(ctx, kv, set)
	case del:
		err = l.deleteObject(ctx, kv, set)
	default:
		err = l.updateObject(ctx, kv, set)
	}
	if err != nil {
		l.stats.fail(set.resource, err)
	}
}

// createObject is kube-apiserver's create: put if the key does not exist.
func (l *soakLoad) createObject(ctx context.Context, kv *clientv3.Client, set *objectSet) error {
	ns := set.rng.IntN(soakNamespaces)
	k := fmt.Sprintf("%sns-%02d/%s-%08d", set.prefix, ns, set.resource, set.next)
	set.next++
	rev, err := l.txn(ctx, kv, k, clientv3.Compare(clientv3.ModRevision(k), "=", 0),
		clientv3.OpPut(k, l.value(set.rng, 1024)), false, time.Time{})
	if err != nil {
		return err
	}
	set.live = append(set.live, liveObject{key: k, rev: rev})
	l.live.Add(1)
	return nil
}

// updateObject is kube-apiserver's GuaranteedUpdate: put if the key is
// still at the revision this client last saw.
func (l *soakLoad) updateObject(ctx context.Context, kv *clientv3.Client, set *objectSet) error {
	o := &set.live[set.rng.IntN(len(set.live))]
	rev, err := l.txn(ctx, kv, o.key, clientv3.Compare(clientv3.ModRevision(o.key), "=", o.rev),
		clientv3.OpPut(o.key, l.value(set.rng, 1024)), false, time.Time{})
	if err != nil {
		return err
	}
	o.rev = rev
	return nil
}

// deleteObject is kube-apiserver's delete with its revision precondition.
func (l *soakLoad) deleteObject(ctx context.Context, kv *clientv3.Client, set *objectSet) error {
	i := set.rng.IntN(len(set.live))
	o := set.live[i]
	if _, err := l.txn(ctx, kv, o.key, clientv3.Compare(clientv3.ModRevision(o.key), "=", o.rev),
		clientv3.OpDelete(o.key), true, time.Time{}); err != nil {
		return err
	}
	set.live[i] = set.live[len(set.live)-1]
	set.live = set.live[:len(set.live)-1]
	l.live.Add(-1)
	return nil
}

// renewNode is a kubelet renewing its node's Lease object.
func (l *soakLoad) renewNode(ctx context.Context, kv *clientv3.Client, i int) {
	o := &l.nodes[i]
	rev, err := l.txn(ctx, kv, o.key, clientv3.Compare(clientv3.ModRevision(o.key), "=", o.rev),
		clientv3.OpPut(o.key, l.blob[i%1024:i%1024+350]), false, time.Time{})
	if err != nil {
		l.stats.fail("node lease", err)
		return
	}
	o.rev = rev
}

// value is a value of base to 2*base bytes (1-2 KiB for objects).
func (l *soakLoad) value(rng *rand.Rand, base int) string {
	n := base + rng.IntN(base)
	off := rng.IntN(len(l.blob) - n + 1)
	return l.blob[off : off+n]
}

// txn runs If(cmp).Then(op).Else(Get(key)), kube-apiserver's shape for
// every write, times it as a write, and tells the watchers' ledger what
// was written at which revision. A failed compare is an error: each key
// has one writer, which knows its revision. expireBy is when an event's
// lease should have deleted it (zero for keys without one).
func (l *soakLoad) txn(ctx context.Context, kv *clientv3.Client, key string, cmp clientv3.Cmp, op clientv3.Op, del bool, expireBy time.Time) (int64, error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.OpTimeout)
	defer cancel()
	t0 := time.Now()
	resp, err := kv.Txn(opCtx).If(cmp).Then(op).Else(clientv3.OpGet(key)).Commit()
	t1 := time.Now()
	if err != nil {
		return 0, fmt.Errorf("txn on %s: %w", key, err)
	}
	rev := resp.Header.Revision
	l.stats.write(t0, t1, rev)
	if !resp.Succeeded {
		return 0, fmt.Errorf("txn on %s: compare failed at revision %d (the key changed under its only writer)", key, rev)
	}
	l.watch.ack(key, rev, del, t1, expireBy)
	return rev, nil
}

// eventLeases is kube-apiserver's lease manager for events: one lease is
// shared by the events created within a short window.
type eventLeases struct {
	id       clientv3.LeaseID
	expires  time.Time // when the lease runs out, as the client reckons
	attached int
}

// lease returns the lease for an event created now, granting a new one as
// kube-apiserver's leaseManager.GetLease does, and when the server should
// have deleted the event.
func (l *soakLoad) eventLease(ctx context.Context, kv *clientv3.Client, ev *eventLeases) (clientv3.LeaseID, time.Time, error) {
	ttl := l.cfg.eventTTL
	reuse := time.Duration(int64(leaseReuseFraction*ttl.Seconds())) * time.Second
	now := time.Now()
	valid := now.Add(ttl).Before(ev.expires)
	sufficient := now.Add(ttl + reuse).After(ev.expires)
	ev.attached++
	if valid && sufficient && ev.attached <= leaseMaxObjects {
		return ev.id, ev.expires.Add(expiryGrace), nil
	}
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.OpTimeout)
	defer cancel()
	g, err := kv.Grant(opCtx, int64((ttl + reuse).Seconds()))
	t1 := time.Now()
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("grant event lease: %w", err)
	}
	l.stats.write(now, t1, g.ResponseHeader.Revision)
	// The server's clock starts at the grant, before its answer arrived.
	ev.id, ev.expires, ev.attached = g.ID, t1.Add(time.Duration(g.TTL)*time.Second), 1
	return ev.id, ev.expires.Add(expiryGrace), nil
}

// createEvent creates one event on the shared events lease.
func (l *soakLoad) createEvent(ctx context.Context, kv *clientv3.Client, ev *eventLeases, seq int) {
	id, expireBy, err := l.eventLease(ctx, kv, ev)
	if err != nil {
		l.stats.fail("event", err)
		return
	}
	k := fmt.Sprintf("%sns-%02d/pod-%08d.%08d", soakEventsPrefix, seq%soakNamespaces, seq/7, seq)
	v := l.blob[seq%1024 : seq%1024+512+seq%512]
	if _, err := l.txn(ctx, kv, k, clientv3.Compare(clientv3.ModRevision(k), "=", 0),
		clientv3.OpPut(k, v, clientv3.WithLease(id)), false, expireBy); err != nil {
		l.stats.fail("event", err)
	}
}

// list reads prefix in pages of 500 as kube-apiserver paginates: the first
// page at the latest revision, every further page at that revision.
func (l *soakLoad) list(ctx context.Context, kv *clientv3.Client, prefix string) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.OpTimeout)
	defer cancel()
	end := clientv3.GetPrefixRangeEnd(prefix)
	t0 := time.Now()
	var rev int64
	start, pages := prefix, 0
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPageLimit)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(opCtx, start, opts...)
		if err != nil {
			l.stats.fail("list", fmt.Errorf("list %s page %d: %w", prefix, pages, err))
			return
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		pages++
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	l.stats.list(time.Since(t0))
}

// compactor is kube-apiserver's (storage/etcd3/compact.go): every interval
// it bumps compact_rev_key's version if it still holds the version this
// compactor last saw, and if so compacts to the revision it saw at the
// previous cycle (physical=false); so at least one interval of history
// is always kept. The first cycle only records the revision.
func (l *soakLoad) compactor(ctx context.Context, kv *clientv3.Client) {
	var compactTime, rev int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.cfg.compactEvery):
		}
		compactTime, rev = l.compact(ctx, kv, compactTime, rev)
	}
}

// compact is one cycle of compactor; it returns the compaction's logical
// time and the current revision, or on error what it was given.
func (l *soakLoad) compact(ctx context.Context, kv *clientv3.Client, t, rev int64) (int64, int64) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.OpTimeout)
	defer cancel()
	t0 := time.Now()
	resp, err := kv.Txn(opCtx).If(clientv3.Compare(clientv3.Version(compactRevKey), "=", t)).
		Then(clientv3.OpPut(compactRevKey, strconv.FormatInt(rev, 10))).
		Else(clientv3.OpGet(compactRevKey)).Commit()
	if err != nil {
		l.stats.fail("compact", fmt.Errorf("compaction txn: %w", err))
		return t, rev
	}
	cur := resp.Header.Revision
	l.stats.write(t0, time.Now(), cur)
	if !resp.Succeeded {
		// Another compactor moved the clock (there is none here, but this
		// is what kube-apiserver does).
		return resp.Responses[0].GetResponseRange().Kvs[0].Version, cur
	}
	if rev == 0 {
		return t + 1, cur // no compaction on bootstrap
	}
	l.stats.openWindow(time.Now())
	c0 := time.Now()
	_, err = kv.Compact(opCtx, rev)
	took := time.Since(c0)
	l.stats.closeWindow(time.Now().Add(l.cfg.compactWindow), took)
	if err != nil {
		l.stats.fail("compact", fmt.Errorf("compact to revision %d: %w", rev, err))
		return t + 1, cur
	}
	l.log.Debug("compacted", "server", l.t.name, "revision", rev, "took", took)
	return t + 1, cur
}

// listPageLimit is the page size of the soak's lists: kube-apiserver's
// (and kite-bench's list workload's).
const listPageLimit = 500

// makeValue returns a deterministic value of size bytes: the same
// stream for every server, so each is loaded alike.
func makeValue(size int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 0x6b697465))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return string(b)
}
