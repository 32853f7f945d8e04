package server

import (
	"testing"
	"time"
)

func TestParseListenURL(t *testing.T) {
	for _, tt := range []struct {
		url, network, address string
		secure, ok            bool
	}{
		{"http://127.0.0.1:2379", "tcp", "127.0.0.1:2379", false, true},
		{"http://[::1]:0", "tcp", "[::1]:0", false, true},
		{"http://localhost:2379/", "tcp", "localhost:2379", false, true},
		{"unix:///run/kite.sock", "unix", "/run/kite.sock", false, true},
		{"unix://kite.sock", "unix", "kite.sock", false, true},
		{"unix://dir/kite.sock", "unix", "dir/kite.sock", false, true},
		{"unix:kite.sock", "unix", "kite.sock", false, true},
		{"http://127.0.0.1", "", "", false, false},
		{"http://127.0.0.1:2379/path", "", "", false, false},
		{"https://127.0.0.1:2379", "tcp", "127.0.0.1:2379", true, true},
		{"https://127.0.0.1", "", "", false, false},
		{"unixs:///run/kite.sock", "unix", "/run/kite.sock", true, true},
		{"unix://", "", "", false, false},
		{"tcp://127.0.0.1:1", "", "", false, false},
		{"127.0.0.1:2379", "", "", false, false},
	} {
		network, address, secure, err := parseListenURL(tt.url)
		if (err == nil) != tt.ok || network != tt.network || address != tt.address || secure != tt.secure {
			t.Errorf("%q: got %q %q %v %v", tt.url, network, address, secure, err)
		}
	}
}

func TestCompactionRetention(t *testing.T) {
	for _, tt := range []struct {
		mode, retention string
		want            time.Duration
		ok              bool
	}{
		{"", "", 0, true},
		{"", "5", 0, true},
		{"periodic", "", 0, true},
		{"periodic", "0", 0, true},
		{"periodic", "2", 2 * time.Hour, true},
		{"periodic", "30m", 30 * time.Minute, true},
		{"periodic", "1h30m", 90 * time.Minute, true},
		{"periodic", "-1h", 0, false},
		{"periodic", "soon", 0, false},
		{"revision", "1000", 1000, true},
		{"revision", "1h", 0, false},
		{"daily", "1", 0, false},
		{"daily", "1h", 0, false},
	} {
		got, err := Config{AutoCompactionMode: tt.mode, AutoCompactionRetention: tt.retention}.compactionRetention()
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("%s %q: got %v %v", tt.mode, tt.retention, got, err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{DataDir: "x"}.withDefaults()
	if c.Name != "default" || c.MaxRequestBytes != 1572864 || c.MaxTxnOps != 128 ||
		c.QuotaBackendBytes != 2<<30 || c.WatchProgressNotifyInterval != 10*time.Minute ||
		len(c.ListenClientURLs) != 1 || c.ListenClientURLs[0] != "http://127.0.0.1:2379" ||
		c.AdvertiseClientURLs[0] != "http://127.0.0.1:2379" || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	if got := (Config{WatchProgressNotifyInterval: time.Millisecond}).withDefaults().WatchProgressNotifyInterval; got != 100*time.Millisecond {
		t.Fatalf("progress interval floor: %v", got)
	}
	if err := (Config{}).withDefaults().validate(); err == nil {
		t.Fatal("config without data dir validated")
	}
}
