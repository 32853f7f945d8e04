package test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// forwarder is a TCP address that always leads to the database server of
// the moment, as a virtual IP or a DNS name does in front of a primary
// and its replica: the test moves it at a failover, and kite's DSN never
// changes. Moving it closes the connections it carried, as the old
// primary's death does.
type forwarder struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// newForwarder listens on a free loopback port and forwards to target
// until the test ends.
func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// Addr is the host:port to give kite.
func (f *forwarder) Addr() string { return f.ln.Addr().String() }

// moveTo sends new connections to target and closes the current ones.
func (f *forwarder) moveTo(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = target
	for c := range f.conns {
		c.Close()
	}
}

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.mu.Lock()
		target := f.target
		f.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns[c], f.conns[up] = struct{}{}, struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go f.pipe(c, up)
	}
}

// pipe copies both ways until either side ends, then closes both.
func (f *forwarder) pipe(a, b net.Conn) {
	defer f.wg.Done()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src) // ends with the first side closed or reset: no error to report
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, a)
	delete(f.conns, b)
	f.mu.Unlock()
}

// close stops accepting, ends every connection and waits for the copies.
func (f *forwarder) close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
