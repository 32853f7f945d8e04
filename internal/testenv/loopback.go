package testenv

import (
	"fmt"
	"net"
	"net/url"
)

// CheckLoopback refuses an endpoint (a URL or host:port) off this
// machine: a load tool generates enough load to hurt a server someone
// depends on.
func CheckLoopback(endpoint string) error {
	host := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		host = u.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("endpoint %q is not a loopback address; the load tools only load this machine", endpoint)
}
