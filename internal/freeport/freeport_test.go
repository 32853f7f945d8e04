package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortsDistinctBelowEphemeral(t *testing.T) {
	ports, err := N(6)
	if err != nil {
		t.Fatal(err)
	}
	high := ephemeralLow()
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lowestPort || p >= high {
			t.Errorf("port %d outside %d-%d", p, lowestPort, high-1)
		}
		if seen[p] {
			t.Errorf("port %d given twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
