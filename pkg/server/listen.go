package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"time"
)

// parseListenURL turns a client URL into a network and address for
// net.Listen, and says whether it serves TLS. Accepted forms, etcd's:
//
//	http://host:port   tcp
//	https://host:port  tcp with TLS (tls.go)
//	unix:///abs/path   unix socket at /abs/path
//	unix://rel/path    unix socket at rel/path, relative to the working dir
//	unix:rel/path      the same, as etcd also accepts it
//	unixs://...        a unix socket with TLS, as etcd's unixs scheme
func parseListenURL(raw string) (network, address string, secure bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", false, fmt.Errorf("parse listen url %q: %w", raw, err)
	}
	secure = u.Scheme == "https" || u.Scheme == "unixs"
	switch u.Scheme {
	case "http", "https":
		if u.Path != "" && u.Path != "/" {
			return "", "", false, fmt.Errorf("listen url %q: a path is not allowed", raw)
		}
		if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
			return "", "", false, fmt.Errorf("listen url %q: want %s://host:port", raw, u.Scheme)
		}
		return "tcp", u.Host, secure, nil
	case "unix", "unixs":
		var path string
		switch {
		case u.Opaque != "":
			path = u.Opaque
		default:
			// unix://rel/path puts "rel" in Host; unix:///abs has Host "".
			path = u.Host + u.Path
		}
		if path == "" {
			return "", "", false, fmt.Errorf("listen url %q: empty socket path", raw)
		}
		return "unix", path, secure, nil
	default:
		return "", "", false, fmt.Errorf("listen url %q: unsupported scheme %q (want http, https, unix or unixs)", raw, u.Scheme)
	}
}

// listen opens one listener for a client URL. A stale unix socket file left
// by a previous run is removed first, as etcd does; a socket something still
// listens on, or any other file at that path, makes the listen fail.
func listen(ctx context.Context, raw string) (net.Listener, error) {
	network, address, _, err := parseListenURL(raw)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := removeStaleSocket(address); err != nil {
			return nil, err
		}
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", raw, err)
	}
	return l, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat unix socket %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("unix socket path %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("unix socket %s is in use by another process", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale unix socket %s: %w", path, err)
	}
	return nil
}
