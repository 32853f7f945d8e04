package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// Opening the storage can take long: a database server that is down is
// retried until it answers (pkg/datastore). Meanwhile the client URLs are
// already bound and answer as a starting member should: /livez ok (the
// process is alive; restarting it would not bring the database back),
// /readyz and /health not ready, so an orchestrator keeps traffic away
// without killing the process. gRPC is served only once the store is open;
// until then a client's connection gets no answer and its dial retries.

// handoff accepts the connections of one bound listener and hands them to
// whoever asks: the opening phase's HTTP server first, then the real
// servers. Neither closing the first view nor anything else but the last
// view's Close closes the bound listener.
type handoff struct {
	l     net.Listener
	conns chan net.Conn
	errc  chan error // the accept loop's final error; closed after it
	stop  chan struct{}
	once  sync.Once
}

func newHandoff(l net.Listener) *handoff {
	h := &handoff{l: l, conns: make(chan net.Conn), errc: make(chan error, 1), stop: make(chan struct{})}
	go h.acceptLoop()
	return h
}

func (h *handoff) acceptLoop() {
	for {
		c, err := h.l.Accept()
		if err != nil {
			h.errc <- err
			close(h.errc)
			return
		}
		select {
		case h.conns <- c:
		case <-h.stop:
			c.Close()
			return
		}
	}
}

// view is one consumer's listener over h; final views own the bound
// listener and close it.
func (h *handoff) view(final bool) *handoffView {
	return &handoffView{h: h, final: final, done: make(chan struct{})}
}

type handoffView struct {
	h     *handoff
	final bool
	done  chan struct{}
	once  sync.Once
}

func (v *handoffView) Accept() (net.Conn, error) {
	select {
	case c := <-v.h.conns:
		return c, nil
	case err, ok := <-v.h.errc:
		if !ok {
			err = net.ErrClosed
		}
		return nil, err
	case <-v.done:
		return nil, net.ErrClosed
	}
}

func (v *handoffView) Close() error {
	var err error
	v.once.Do(func() {
		close(v.done)
		if v.final {
			v.h.once.Do(func() { close(v.h.stop) })
			err = v.h.l.Close()
		}
	})
	return err
}

func (v *handoffView) Addr() net.Addr { return v.h.l.Addr() }

// openingServer answers the probes on every listener while the storage
// opens, over TLS on the TLS listeners.
type openingServer struct {
	http      *http.Server
	wg        sync.WaitGroup
	listeners []net.Listener // views, or TLS listeners over views
}

// startOpeningServer serves the probes on hs; secure[i] says whether hs[i]
// serves TLS (with info).
func startOpeningServer(hs []*handoff, secure []bool, info *transport.TLSInfo) (*openingServer, error) {
	// No TLSConfig: net/http then serves HTTP/2 to TLS clients that chose
	// it, as the final server does.
	o := &openingServer{http: &http.Server{Handler: openingHandler(), ReadHeaderTimeout: 10 * time.Second}}
	for i, h := range hs {
		var l net.Listener = h.view(false)
		if secure[i] {
			tl, err := newTLSListener(l, info)
			if err != nil {
				o.stop()
				return nil, err
			}
			l = tl
		}
		o.listeners = append(o.listeners, l)
		o.wg.Go(func() { _ = o.http.Serve(l) })
	}
	return o, nil
}

// stop ends the opening phase; the bound listeners stay open.
func (o *openingServer) stop() {
	for _, l := range o.listeners {
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := o.http.Shutdown(ctx); err != nil {
		o.http.Close()
	}
	o.wg.Wait()
}

func openingHandler() http.Handler {
	const reason = "the storage is not open yet"
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { writeProbe(w, r, nil) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		writeProbe(w, r, map[string]error{"storage": errString(reason)})
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		body, _ := json.Marshal(healthResult{Health: "false", Reason: reason})
		w.Write(body)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, reason, http.StatusServiceUnavailable)
	})
	return mux
}

type errString string

func (e errString) Error() string { return string(e) }
