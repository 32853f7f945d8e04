package testenv

import (
	"fmt"
	"net/url"
	"os"
)

// The command lines the load tools start etcd, kite and kine with, one
// definition for all of them, so that a number from one tool can be set
// beside another's: each server runs with the same flags wherever it is
// measured.

// EtcdServerBinary is the running executable, which serves the reference
// etcd as its EtcdServerCommand subcommand (etcdserver.go).
func EtcdServerBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable for the reference etcd: %w", err)
	}
	return self, nil
}

// EtcdArgv is the reference etcd's command line for m: self (the tool,
// EtcdServerBinary) with its EtcdServerCommand, and for a raft member
// etcd's clustering flags.
func EtcdArgv(self string, m Member) []string {
	argv := []string{self, EtcdServerCommand, "--name", m.Name, "--data-dir", m.DataDir, "--listen", m.ClientURL}
	if m.InitialCluster != "" {
		argv = append(argv, "--listen-peer", m.PeerURL, "--initial-cluster", m.InitialCluster,
			"--initial-cluster-token", m.Token)
	}
	return argv
}

// KiteArgv is kite's command line for m, at log level warn (kite's info
// logging would cost CPU the reference, at level error, does not pay).
// A raft member gets etcd's own clustering flags, which is what selects
// raftsql, as an etcd member would be started, and etcd's defaults for
// heartbeat and election timeout.
func KiteArgv(kite string, m Member) []string {
	argv := []string{kite, "--name", m.Name, "--data-dir", m.DataDir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL, "--log-level", "warn"}
	if m.InitialCluster != "" {
		argv = append(argv, "--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", m.InitialCluster, "--initial-cluster-state", "new",
			"--initial-cluster-token", m.Token)
	}
	return argv
}

// KineArgv is kine's command line serving etcd clients on clientURL, on
// the database endpoint names ("": kine reads KINE_ENDPOINT, which keeps a
// DSN out of the process listing). Its metrics listener, by default on
// every interface's port 8080, is switched off: two kine servers would
// collide on it.
func KineArgv(kine, clientURL, endpoint string) []string {
	argv := []string{kine, "--listen-address", hostPort(clientURL), "--metrics-bind-address", "0"}
	if endpoint != "" {
		argv = append(argv, "--endpoint", endpoint)
	}
	return argv
}

// hostPort is the host:port of a client URL.
func hostPort(clientURL string) string {
	if u, err := url.Parse(clientURL); err == nil && u.Host != "" {
		return u.Host
	}
	return clientURL
}
