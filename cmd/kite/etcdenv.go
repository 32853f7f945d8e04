package main

import (
	"slices"
	"strings"
)

// Manifests written for etcd set its flags through ETCD_ variables
// (ETCD_NAME, ETCD_DATA_DIR, ETCD_LISTEN_CLIENT_URLS, ...). Every kite flag
// that means what the etcd flag of the same name means also reads that
// variable, so such a manifest runs kite unchanged. The order is etcd's
// own, with kite's variables between: a flag on the command line wins, then
// KITE_<FLAG>, then ETCD_<FLAG>.

// etcdEnvPrefix is the prefix of etcd's environment variables.
const etcdEnvPrefix = "ETCD_"

// etcdFlags returns kite's flags with etcd's name and meaning. kite's own
// flags (--log-format, whose values differ from etcd's, and the
// --datastore-* flags of k3s) read only their KITE_ variable.
func etcdFlags() []string {
	return []string{
		"name", "data-dir", "listen-client-urls", "listen-metrics-urls", "advertise-client-urls", "initial-advertise-peer-urls",
		"max-request-bytes", "max-txn-ops", "quota-backend-bytes",
		"watch-progress-notify-interval", "experimental-watch-progress-notify-interval",
		"auto-compaction-mode", "auto-compaction-retention", "log-level", "logger", "log-outputs",
		"auth-token", "auth-token-ttl", "bcrypt-cost",
		"warning-apply-duration", "enable-pprof",
		"cert-file", "key-file", "trusted-ca-file", "client-cert-auth", "client-crl-file",
		"client-cert-allowed-hostname", "cipher-suites", "tls-min-version", "tls-max-version",
		"auto-tls", "self-signed-cert-validity", "max-concurrent-streams",
		"grpc-keepalive-min-time", "grpc-keepalive-interval", "grpc-keepalive-timeout",
		"listen-peer-urls", "initial-cluster", "initial-cluster-state", "initial-cluster-token",
		"discovery-srv", "discovery-srv-name",
		"heartbeat-interval", "election-timeout", "snapshot-count", "max-snapshots", "max-wals",
		"corrupt-check-time", "peer-cert-file", "peer-key-file", "peer-trusted-ca-file",
		"peer-client-cert-auth", "peer-auto-tls", "peer-crl-file", "peer-cert-allowed-cn", "peer-client-cert-file", "peer-client-key-file", "snapshot-catchup-entries", "experimental-snapshot-catchup-entries",
	}
}

// etcdEnvName is the etcd variable of a flag ("" if the flag is kite's own).
func etcdEnvName(flagName string) string {
	if !slices.Contains(etcdFlags(), flagName) {
		return ""
	}
	return etcdEnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// unknownEtcdEnv returns the ETCD_ variables of environ that kite does not
// read, in order: an etcd setting kite ignores must be said once at start,
// not silently dropped. ETCDCTL_ variables (etcdctl's, not the server's)
// are not etcd server settings.
func unknownEtcdEnv(environ []string) []string {
	known := map[string]bool{}
	for _, f := range etcdFlags() {
		known[etcdEnvName(f)] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, etcdEnvPrefix) && !known[name] {
			out = append(out, name)
		}
	}
	return out
}
