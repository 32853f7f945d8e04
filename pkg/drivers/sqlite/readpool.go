package sqlite

import (
	"context"
	"sync"
)

// readPool holds the idle pinned read connections and hands out the one
// returned last. Each connection maps the database file on its own and a
// file page counts in the resident set once per mapping that touched it;
// reusing the most recent connection keeps the pages of a light load (one
// list, a few gets) in one or two mappings instead of spreading them over
// all of them, and the connection's own page cache is the warmest.
type readPool struct {
	tokens chan struct{} // one per idle connection
	mu     sync.Mutex
	idle   []*readConn
}

func newReadPool(size int) *readPool {
	return &readPool{tokens: make(chan struct{}, size), idle: make([]*readConn, 0, size)}
}

// get waits for an idle connection until ctx ends.
func (p *readPool) get(ctx context.Context) (*readConn, error) {
	select {
	case <-p.tokens:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rc := p.idle[len(p.idle)-1]
	p.idle = p.idle[:len(p.idle)-1]
	return rc, nil
}

// put returns a connection; its token is given after it is on the stack,
// so a get that has a token always finds one.
func (p *readPool) put(rc *readConn) {
	p.mu.Lock()
	p.idle = append(p.idle, rc)
	p.mu.Unlock()
	p.tokens <- struct{}{}
}
