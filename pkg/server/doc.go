// Package server is kite's etcd v3 front end: the gRPC services of etcd's
// API (KV with RangeStream, Watch, Lease, Maintenance, Cluster, a minimal
// Auth, and grpc.health.v1) plus etcd's HTTP endpoints (/health, /livez,
// /readyz, /metrics), over a pkg/mvcc Store. The storage comes from
// Config.OpenBackend; this package imports no driver (pkg/datastore turns a
// --datastore-endpoint into an opener).
//
// The package translates and nothing more: it validates requests exactly as
// etcd's v3rpc does (same checks, same order, same rpctypes errors), calls
// the store, fills the cluster fields of every response header, and maps the
// store's sentinel errors to etcd's gRPC errors in one place (errors.go).
// Revisions, compares, leases, watch ordering and compaction rules live in
// pkg/mvcc.
//
// # Listeners
//
// Each client URL is one listener on which gRPC (HTTP/2) and the HTTP/1
// endpoints share the port, as on an etcd client port:
//
//	http://127.0.0.1:2379   TCP (the default)
//	https://0.0.0.0:2379    TCP with TLS (Config.TLS; tls.go, https.go)
//	unix:///run/kite.sock   unix socket, absolute path
//	unix://kite.sock        unix socket relative to the working directory
//	unixs:///run/kite.sock  unix socket with TLS
//
// TLS is etcd 3.7.3's client TLS, through etcd's transport package: the
// same certificate checks, per-handshake reload of the certificate and key,
// CRL check, and one net/http server for gRPC and HTTP on a TLS port.
//
// # Embedding
//
// Another Go program (a k3s-style single binary) can run kite in-process
// and point its etcd client at a unix socket:
//
//	ds := datastore.Config{DataDir: "/var/lib/myapp/kite"} // SQLite; or Endpoint: "postgres://..."
//	cfg := server.Config{
//		DataDir:          ds.DataDir,
//		OpenBackend:      func(ctx context.Context) (mvcc.Backend, error) { return datastore.Open(ctx, ds) },
//		ListenClientURLs: []string{"unix:///run/myapp/kite.sock"},
//		Logger:           slog.Default(),
//	}
//	go func() { errc <- server.Run(ctx, cfg) }() // serves until ctx is done
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix:///run/myapp/kite.sock"}})
//
// For more control use New (opens the database and binds the listeners; a
// port in use, a live unix socket or a data dir locked by another kite fails
// here), Start (serves), Err (serving failures), Addrs (bound addresses, for
// port 0), Store (the mvcc.Store, for in-process access without gRPC) and
// Close (ends every goroutine and closes the database). Config's zero values
// take etcd's defaults; only DataDir and OpenBackend are required.
package server
