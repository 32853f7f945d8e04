package server

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/kite-db/kite/pkg/mvcc"
)

// authorizer applies etcd's permission rules to every request while auth
// is enabled, with etcd's errors: a token's user (or, with
// --client-cert-auth, a certificate's CN) must hold a role permitting the
// keys a request reads or writes; root may do everything; compaction,
// defragmentation, hashes, snapshots, leader moves, alarm changes and
// membership changes are root's alone. With auth disabled it costs one
// read-locked flag per request.
type authorizer struct {
	store *mvcc.Store
	// clientCertAuth: a request without a token is the user named by its
	// verified client certificate's common name (etcd's --client-cert-auth).
	clientCertAuth bool
}

// info is the caller: from its token, else (with --client-cert-auth)
// its certificate's common name, else nil.
func (a *authorizer) info(ctx context.Context) (*auth.AuthInfo, error) {
	as := a.store.Auth()
	ai, err := as.AuthInfoFromCtx(ctx)
	if ai != nil || err != nil || !a.clientCertAuth {
		return ai, err
	}
	// etcd's AuthInfoFromTLS expects TLS peer information; a request over
	// a plain listener (unix socket, http://) has none.
	if p, ok := peer.FromContext(ctx); !ok || p == nil {
		return nil, nil
	} else if _, isTLS := p.AuthInfo.(credentials.TLSInfo); !isTLS {
		return nil, nil
	}
	return as.AuthInfoFromTLS(ctx), nil
}

// caller is info for the permission checks, which etcd always hands an
// AuthInfo: one without a user name when the request carried no token (the
// checks then answer "user name is empty").
func (a *authorizer) caller(ctx context.Context) (*auth.AuthInfo, error) {
	ai, err := a.info(ctx)
	if ai == nil && err == nil {
		ai = &auth.AuthInfo{}
	}
	return ai, err
}

// enabled: auth is on (a nil authorizer, as servers built by tests
// without one have, never is).
func (a *authorizer) enabled() bool { return a != nil && a.store.Auth().IsAuthEnabled() }

// admin: the caller is root (or auth is disabled).
func (a *authorizer) admin(ctx context.Context) error {
	if !a.enabled() {
		return nil
	}
	ai, err := a.info(ctx)
	if err != nil {
		return toGRPCError(err)
	}
	return toGRPCError(a.store.Auth().IsAdminPermitted(ai))
}

// user: the caller is some user (etcd's requireAuthInfo).
func (a *authorizer) user(ctx context.Context) (*auth.AuthInfo, error) {
	ai, err := a.info(ctx)
	if err != nil {
		return nil, err
	}
	if ai == nil {
		return nil, auth.ErrUserEmpty
	}
	return ai, nil
}

// check answers whether the caller may send req, by etcd's rules for each
// request kind; requests not named here need no permission.
func (a *authorizer) check(ctx context.Context, req any) error {
	as := a.store.Auth()
	switch r := req.(type) {
	case *pb.RangeRequest:
		ai, err := a.caller(ctx)
		if err != nil {
			return err
		}
		return as.IsRangePermitted(ai, r.Key, r.RangeEnd)
	case *pb.PutRequest:
		ai, err := a.caller(ctx)
		if err != nil {
			return err
		}
		return a.checkPut(ctx, ai, r)
	case *pb.DeleteRangeRequest:
		ai, err := a.caller(ctx)
		if err != nil {
			return err
		}
		return a.checkDelete(ai, r)
	case *pb.TxnRequest:
		ai, err := a.caller(ctx)
		if err != nil {
			return err
		}
		return a.checkTxn(ctx, ai, r)
	case *pb.LeaseGrantRequest:
		_, err := a.user(ctx)
		return err
	case *pb.LeaseRevokeRequest:
		ai, err := a.user(ctx)
		if err != nil {
			return err
		}
		return a.checkLeaseKeys(ctx, ai, r.ID, as.IsPutPermitted)
	case *pb.LeaseTimeToLiveRequest:
		ai, err := a.user(ctx)
		if err != nil || !r.Keys {
			return err
		}
		return a.checkLeaseKeys(ctx, ai, r.ID, func(ai *auth.AuthInfo, key []byte) error {
			return as.IsRangePermitted(ai, key, nil)
		})
	case *pb.LeaseLeasesRequest:
		ai, err := a.user(ctx)
		if err != nil || as.IsAdminPermitted(ai) == nil {
			return err
		}
		leases, err := a.store.LeaseLeases(ctx, r)
		if err != nil {
			return err
		}
		for _, l := range leases.Leases {
			if err := a.checkLeaseKeys(ctx, ai, l.ID, func(ai *auth.AuthInfo, key []byte) error {
				return as.IsRangePermitted(ai, key, nil)
			}); err != nil {
				return err
			}
		}
		return nil
	case *pb.StatusRequest:
		_, err := a.user(ctx)
		return err
	case *pb.AlarmRequest:
		if r.Action == pb.AlarmRequest_GET {
			_, err := a.user(ctx)
			return err
		}
		return a.root(ctx)
	case *pb.CompactionRequest, *pb.DefragmentRequest, *pb.HashRequest, *pb.HashKVRequest,
		*pb.MoveLeaderRequest, *pb.DowngradeRequest, *pb.SnapshotRequest,
		*pb.MemberAddRequest, *pb.MemberRemoveRequest, *pb.MemberUpdateRequest, *pb.MemberPromoteRequest:
		return a.root(ctx)
	}
	return nil
}

func (a *authorizer) root(ctx context.Context) error {
	ai, err := a.caller(ctx)
	if err != nil {
		return err
	}
	return a.store.Auth().IsAdminPermitted(ai)
}

// checkPut is etcd's: the key writable; a lease already attached to a key
// the caller cannot write must not be attached to more (the caller could
// not revoke it); prev_kv reads the key.
func (a *authorizer) checkPut(ctx context.Context, ai *auth.AuthInfo, r *pb.PutRequest) error {
	as := a.store.Auth()
	if err := as.IsPutPermitted(ai, r.Key); err != nil {
		return err
	}
	if r.Lease != 0 {
		if err := a.checkLeaseKeys(ctx, ai, r.Lease, as.IsPutPermitted); err != nil {
			return err
		}
	}
	if r.PrevKv {
		return as.IsRangePermitted(ai, r.Key, nil)
	}
	return nil
}

func (a *authorizer) checkDelete(ai *auth.AuthInfo, r *pb.DeleteRangeRequest) error {
	as := a.store.Auth()
	if err := as.IsDeleteRangePermitted(ai, r.Key, r.RangeEnd); err != nil {
		return err
	}
	if r.PrevKv {
		return as.IsRangePermitted(ai, r.Key, r.RangeEnd)
	}
	return nil
}

// checkTxn checks every compare (a read) and every operation of both
// branches, nested txns included, whichever branch will run.
func (a *authorizer) checkTxn(ctx context.Context, ai *auth.AuthInfo, r *pb.TxnRequest) error {
	as := a.store.Auth()
	for _, c := range r.Compare {
		if err := as.IsRangePermitted(ai, c.Key, c.RangeEnd); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch o := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if o.RequestRange != nil {
					err = as.IsRangePermitted(ai, o.RequestRange.Key, o.RequestRange.RangeEnd)
				}
			case *pb.RequestOp_RequestPut:
				if o.RequestPut != nil {
					err = a.checkPut(ctx, ai, o.RequestPut)
				}
			case *pb.RequestOp_RequestDeleteRange:
				if o.RequestDeleteRange != nil {
					d := o.RequestDeleteRange
					if d.PrevKv {
						err = as.IsRangePermitted(ai, d.Key, d.RangeEnd)
					}
					if err == nil {
						err = as.IsDeleteRangePermitted(ai, d.Key, d.RangeEnd)
					}
				}
			case *pb.RequestOp_RequestTxn:
				if o.RequestTxn != nil {
					err = a.checkTxn(ctx, ai, o.RequestTxn)
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLeaseKeys checks every key attached to lease id with check, unless
// the caller is root. An unknown lease has no keys to check.
func (a *authorizer) checkLeaseKeys(ctx context.Context, ai *auth.AuthInfo, id int64, check func(*auth.AuthInfo, []byte) error) error {
	if a.store.Auth().IsAdminPermitted(ai) == nil {
		return nil
	}
	resp, err := a.store.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
	if err != nil {
		return nil // not found: nothing attached (the request itself answers)
	}
	for _, k := range resp.Keys {
		if err := check(ai, k); err != nil {
			return err
		}
	}
	return nil
}

// authUnary checks every unary request of the KV, Lease, Maintenance and
// Cluster services while auth is enabled (the Auth service checks its own).
func authUnary(a *authorizer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if a.enabled() {
			if err := a.check(ctx, req); err != nil {
				return nil, toGRPCError(err)
			}
		}
		return handler(ctx, req)
	}
}

// authStream checks the streams' first requests: Snapshot (root), a
// RangeStream's range; watches and keep-alives are checked per request
// by their handlers.
func authStream(a *authorizer) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if a.enabled() && info.FullMethod == pb.Maintenance_Snapshot_FullMethodName {
			if err := a.root(ss.Context()); err != nil {
				return toGRPCError(err)
			}
		}
		return handler(srv, ss)
	}
}

// watchPermitted is etcd's check of a watch create request; the error is
// the cancel reason etcd gives.
func (a *authorizer) watchPermitted(ctx context.Context, r *pb.WatchCreateRequest) error {
	if !a.enabled() {
		return nil
	}
	ai, err := a.info(ctx)
	if err != nil {
		return err
	}
	if ai == nil {
		ai = &auth.AuthInfo{}
	}
	return a.store.Auth().IsRangePermitted(ai, r.Key, r.RangeEnd)
}

// renewPermitted is etcd's check of a lease keep-alive: a user, who may
// write every key attached to the lease.
func (a *authorizer) renewPermitted(ctx context.Context, id int64) error {
	ai, err := a.user(ctx)
	if err != nil {
		return err
	}
	return a.checkLeaseKeys(ctx, ai, id, a.store.Auth().IsPutPermitted)
}

// watchCancelReason is etcd's cancel reason for a watch the caller may
// not create.
func watchCancelReason(err error) string {
	switch {
	case errors.Is(err, auth.ErrInvalidAuthToken):
		return rpctypes.ErrGRPCInvalidAuthToken.Error()
	case errors.Is(err, auth.ErrAuthOldRevision):
		return rpctypes.ErrGRPCAuthOldRevision.Error()
	case errors.Is(err, auth.ErrUserEmpty):
		return rpctypes.ErrGRPCUserEmpty.Error()
	}
	return rpctypes.ErrGRPCPermissionDenied.Error()
}
