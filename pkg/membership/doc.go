// Package membership is what the gRPC layer (pkg/server) and a replicated
// driver (pkg/drivers/raftsql) agree on about the members of a cluster:
// how a member's and a cluster's IDs are derived (id.go) and the errors a
// refused membership change or leader transfer returns (errors.go).
//
// It exists so that neither imports the other: a driver returns these
// sentinels, and pkg/server/errors.go is the one place that maps them to
// etcd's gRPC errors. It imports nothing of kite's.
package membership
