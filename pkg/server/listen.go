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
// net.Listen. Accepted forms:
//
//	http://host:port   tcp (TLS is out of scope, so no https)
//	unix:///abs/path   unix socket at /abs/path
//	unix://rel/path    unix socket at rel/path, relative to the working dir
//	unix:rel/path      the same, as etcd also accepts it
func parseListenURL(raw string) (network, address string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("parse listen url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http":
		if u.Path != "" && u.Path != "/" {
			return "", "", fmt.Errorf("listen url %q: a path is not allowed", raw)
		}
		if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
			return "", "", fmt.Errorf("listen url %q: want http://host:port", raw)
		}
		return "tcp", u.Host, nil
	case "unix":
		var path string
		switch {
		case u.Opaque != "":
			path = u.Opaque
		default:
			// unix://rel/path puts "rel" in Host; unix:///abs has Host "".
			path = u.Host + u.Path
		}
		if path == "" {
			return "", "", fmt.Errorf("listen url %q: empty socket path", raw)
		}
		return "unix", path, nil
	case "https", "unixs":
		return "", "", fmt.Errorf("listen url %q: TLS is not supported", raw)
	default:
		return "", "", fmt.Errorf("listen url %q: unsupported scheme %q (want http or unix)", raw, u.Scheme)
	}
}

// listen opens one listener for a client URL. A stale unix socket file left
// by a previous run is removed first, as etcd does; a socket something still
// listens on, or any other file at that path, makes the listen fail.
func listen(ctx context.Context, raw string) (net.Listener, error) {
	network, address, err := parseListenURL(raw)
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
