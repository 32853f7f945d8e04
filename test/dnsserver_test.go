package test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// testDNS is an authoritative DNS server on a loopback UDP port that
// answers A, AAAA and SRV questions from records the test sets, and that
// the test may change while kite runs: a name published late is how a
// StatefulSet pod's record appears. kite is pointed at it through
// KITE_TEST_DNS_SERVER (cmd/kite/main.go). Names it has no record of are
// NXDOMAIN, so a lookup fails as for a record not published yet.
type testDNS struct {
	conn net.PacketConn
	done chan struct{}

	mu   sync.Mutex
	addr map[string][]netip.Addr // fully qualified lower-case name -> addresses
	srv  map[string][]srvRecord  // _service._proto.domain. -> records
}

// srvRecord is one SRV answer: a target host and port.
type srvRecord struct {
	Target string
	Port   uint16
}

// startTestDNS serves until the test ends.
func startTestDNS(t testing.TB) *testDNS {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("test DNS: %v", err)
	}
	d := &testDNS{conn: conn, done: make(chan struct{}),
		addr: map[string][]netip.Addr{}, srv: map[string][]srvRecord{}}
	go d.serve()
	t.Cleanup(d.Close)
	return d
}

// Addr is the server's host:port, the value of KITE_TEST_DNS_SERVER.
func (d *testDNS) Addr() string { return d.conn.LocalAddr().String() }

// Env is the environment entry that points a kite process at the server.
func (d *testDNS) Env() string { return "KITE_TEST_DNS_SERVER=" + d.Addr() }

// Close stops the server and waits for its goroutine.
func (d *testDNS) Close() {
	d.conn.Close()
	<-d.done
}

// SetHost publishes name's addresses (none: the name is unpublished).
func (d *testDNS) SetHost(name string, addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(addrs) == 0 {
		delete(d.addr, fqdn(name))
		return
	}
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	d.addr[fqdn(name)] = as
}

// SetSRV publishes the SRV records of name (_service._tcp.domain).
func (d *testDNS) SetSRV(name string, records ...srvRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(records) == 0 {
		delete(d.srv, fqdn(name))
		return
	}
	d.srv[fqdn(name)] = records
}

func fqdn(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, ".")) + "."
}

func (d *testDNS) serve() {
	defer close(d.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp, ok := d.answer(buf[:n]); ok {
			_, _ = d.conn.WriteTo(resp, from)
		}
	}
}

// answer builds the response to one query; a message that is no query is
// dropped, as a real server would.
func (d *testDNS) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	// Go's resolver wants the question echoed exactly and an
	// authoritative (or recursive) answer, or it takes it for a referral.
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	name := strings.ToLower(q.Name.String())
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}

	d.mu.Lock()
	addrs, hasAddr := d.addr[name]
	srvs, hasSRV := d.srv[name]
	addrs, srvs = append([]netip.Addr(nil), addrs...), append([]srvRecord(nil), srvs...)
	d.mu.Unlock()
	if !hasAddr && !hasSRV {
		rh.RCode = dnsmessage.RCodeNameError
	}

	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, false
		}
	}
	if q.Type == dnsmessage.TypeSRV {
		for _, s := range srvs {
			target, err := dnsmessage.NewName(fqdn(s.Target))
			if err != nil {
				return nil, false
			}
			if err := b.SRVResource(rr, dnsmessage.SRVResource{Priority: 0, Weight: 10, Port: s.Port, Target: target}); err != nil {
				return nil, false
			}
		}
	}
	resp, err := b.Finish()
	return resp, err == nil
}
