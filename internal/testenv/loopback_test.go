package testenv

import "testing"

func TestCheckLoopback(t *testing.T) {
	for ep, ok := range map[string]bool{
		"http://127.0.0.1:2379": true,
		"http://localhost:2379": true,
		"http://[::1]:2379":     true,
		"127.0.0.2:2379":        true,
		"http://10.0.0.1:2379":  false,
		"https://example.com":   false,
	} {
		if err := CheckLoopback(ep); (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", ep, err, ok)
		}
	}
}
