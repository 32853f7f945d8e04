package server

import (
	"net"
	"sync"
)

// trackingListener remembers every connection it accepted until the
// connection is closed, so that Close can cut the ones nobody else will:
// cmux holds a new connection until its first bytes tell HTTP/1 from HTTP/2,
// and a client that connects and stays silent would otherwise keep cmux (and
// so Close) waiting forever.
type trackingListener struct {
	net.Listener

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newTrackingListener(l net.Listener) *trackingListener {
	return &trackingListener{Listener: l, conns: make(map[*trackedConn]struct{})}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

// closeConns closes every connection still open.
func (l *trackingListener) closeConns() {
	l.mu.Lock()
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
