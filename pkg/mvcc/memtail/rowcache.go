package memtail

import "go.etcd.io/etcd/api/v3/mvccpb"

// rowCache holds the newest row of keys the writer touched recently, so
// that the writer's reads of the rows it replaces (a put's previous row,
// a delete's key) are answered from memory instead of a statement on the
// base's read pool, whose page caches every flush drops.
//
// It is exact because every change of the state goes through memtail's
// one writer: only the writer (holding the write lock) reads or changes
// it, it is changed only once a batch is committed, and a flush moves
// rows into the base without changing what the newest row of a key is.
// It is not complete: a key it does not hold is read from the base.
// Nothing may write the base behind the Backend's back while it is open:
// a database file replaced under it (raftsql's snapshot restore) is
// opened with a new Backend, and so a new cache.
type rowCache struct {
	budget, size int64
	m            map[string]*rowEntry
	// newest, oldest: the ends of the list in order of last use; the
	// oldest go first when the budget is exceeded.
	newest, oldest *rowEntry
}

// rowEntry is one key's newest row; kv nil says the key is not live.
type rowEntry struct {
	key string
	kv  *mvccpb.KeyValue
	// meta: kv lacks its value. The key was last written by a put or
	// delete that read its row without the value (mvcc.RowMetaReader),
	// which the next one most likely does too; a whole-row read misses.
	// It is most of the cache's memory saved: 10,000 keys of 1 KiB held
	// 10 MB of values, twice that in the process once the Go heap's
	// headroom is counted.
	meta       bool
	cost       int64
	prev, next *rowEntry // prev is newer
}

// rowOverhead approximates what an entry costs besides its key and value
// (the entry, the KeyValue, the map slot), so that many small rows are
// bounded too.
const rowOverhead = 160

func newRowCache(budget int64) *rowCache {
	return &rowCache{budget: budget, m: map[string]*rowEntry{}}
}

// get returns key's newest row (nil if not live) if the cache holds it
// whole. The row is shared: callers hand out clones.
func (c *rowCache) get(key string) (*mvccpb.KeyValue, bool) {
	e, ok := c.m[key]
	if !ok || e.meta {
		return nil, false
	}
	return e.kv, true
}

// getMeta is get for a caller that needs no value: the row may lack it.
func (c *rowCache) getMeta(key string) (*mvccpb.KeyValue, bool) {
	e, ok := c.m[key]
	if !ok {
		return nil, false
	}
	return e.kv, true
}

// set records kv (nil: not live) as key's newest row, as the newest used.
// A row larger than the whole budget is not kept, and neither is any row
// the key had before.
func (c *rowCache) set(key string, kv *mvccpb.KeyValue) { c.put(key, kv, false) }

// setMeta is set, keeping kv without its value.
func (c *rowCache) setMeta(key string, kv *mvccpb.KeyValue) {
	c.put(key, withoutValue(kv), kv != nil)
}

func (c *rowCache) put(key string, kv *mvccpb.KeyValue, meta bool) {
	cost := int64(rowOverhead + 2*len(key))
	if kv != nil {
		cost += int64(len(kv.Value))
	}
	e, ok := c.m[key]
	if ok {
		c.unlink(e)
		c.size -= e.cost
	}
	if cost > c.budget {
		delete(c.m, key)
		return
	}
	if !ok {
		e = &rowEntry{key: key}
		c.m[key] = e
	}
	e.kv, e.meta, e.cost = kv, meta, cost
	c.size += cost
	c.pushNewest(e)
	for c.size > c.budget && c.oldest != nil {
		old := c.oldest
		c.unlink(old)
		delete(c.m, old.key)
		c.size -= old.cost
	}
}

// touch makes key, if held, the newest used.
func (c *rowCache) touch(key string) {
	if e, ok := c.m[key]; ok && c.newest != e {
		c.unlink(e)
		c.pushNewest(e)
	}
}

// reset forgets every row: used when a commit failed in a way that leaves
// the state uncertain.
func (c *rowCache) reset() {
	c.m = map[string]*rowEntry{}
	c.newest, c.oldest, c.size = nil, nil, 0
}

func (c *rowCache) pushNewest(e *rowEntry) {
	e.prev, e.next = nil, c.newest
	if c.newest != nil {
		c.newest.prev = e
	}
	c.newest = e
	if c.oldest == nil {
		c.oldest = e
	}
}

func (c *rowCache) unlink(e *rowEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else if c.newest == e {
		c.newest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else if c.oldest == e {
		c.oldest = e.prev
	}
	e.prev, e.next = nil, nil
}
