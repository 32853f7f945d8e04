// Package freeport picks loopback ports for servers that tests and load
// tools start: below the kernel's ephemeral range, so that a server stopped
// and started again on its port finds it free. It depends on nothing of
// kite's, so that pkg/drivers/postgres/pgtest can use it without the
// embedded etcd that internal/testenv brings.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowestPort is the bottom of the range ports are picked from.
const lowestPort = 20000

// One returns a loopback port that was free a moment ago, picked
// below the kernel's ephemeral range. A port from bind(:0) lies inside
// that range, and a server that is stopped and started again on it (a
// restarted Postgres, a crashed kite, a raft member killed by a failover)
// can find it taken by one of the thousands of outgoing connections made
// meanwhile.
func One() (int, error) {
	ports, err := N(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// N returns n distinct loopback ports that were free a moment ago
// (a raft cluster needs a client and a peer port per member, and two
// random picks can coincide).
func N(n int) ([]int, error) {
	high := ephemeralLow()
	ports := make([]int, 0, n)
	seen := make(map[int]bool, n)
	for range 1000 * n {
		if len(ports) == n {
			break
		}
		port := lowestPort + rand.IntN(high-lowestPort)
		if seen[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		seen[port] = true
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("free port: found %d of %d free in %d-%d", len(ports), n, lowestPort, high-1)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low <= lowestPort+1000 {
		low = 32768 // an unusual range: fall back to the default's floor
	}
	return low
}
