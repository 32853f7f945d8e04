package mvcc

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/auth"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"
)

// Authentication. kite runs etcd's own auth store (go.etcd.io/etcd/server/v3/
// auth: users, roles, permission checks, simple and JWT tokens, root rules)
// over an in-memory model of its state (authModel). Changes to the state
// are write requests: they go through the write path like a put, are
// applied in order on every member of a replicated cluster, and the
// changed state is stored in the same transaction (PutAuthState). Checks
// and token handling read the model.

// Auth defaults, etcd's.
const (
	DefaultAuthToken    = "simple"
	DefaultAuthTokenTTL = 300 * time.Second
)

// closedIndex is the index wait of etcd's simple tokens: a token is valid
// on a member once it has applied the entry that issued it; kite issues
// tokens on the member that authenticated the client, which has.
var closedIndex = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// authority holds the live authentication state: etcd's auth store over
// the committed model. Changes are staged like lease changes: a batch
// applies them to a copy (stagedAuth), and the live store follows only once
// the batch's transaction committed, so no permission check ever sees a
// user, a role or an AuthDisable that is then rolled back.
type authority struct {
	live  auth.AuthStore
	model *authModel // the committed state live reads
	cost  int
	log   *slog.Logger
}

func openAuth(ctx context.Context, b Backend, cfg Config, log *slog.Logger) (*authority, error) {
	model, err := readAuthModel(ctx, b)
	if err != nil {
		return nil, err
	}
	lg := zap.NewNop()
	tp, err := auth.NewTokenProvider(lg, cfg.AuthToken, func(uint64) <-chan struct{} { return closedIndex }, cfg.AuthTokenTTL)
	if err != nil {
		return nil, fmt.Errorf("--auth-token %q: %w", cfg.AuthToken, err)
	}
	return &authority{live: auth.NewAuthStore(lg, model, tp, cfg.BcryptCost), model: model, cost: cfg.BcryptCost, log: log}, nil
}

func readAuthModel(ctx context.Context, b Backend) (*authModel, error) {
	tx, err := b.BeginRead(ctx)
	if err != nil {
		return nil, fmt.Errorf("read auth state: %w", err)
	}
	defer tx.Rollback()
	data, err := tx.AuthState(ctx)
	if err != nil {
		return nil, fmt.Errorf("read auth state: %w", err)
	}
	return decodeAuthModel(data)
}

// reload makes the live store follow the stored state again: after
// another server changed it (postgres) or a database was received from
// the leader (raftsql).
func (a *authority) reload(ctx context.Context, b Backend) error {
	model, err := readAuthModel(ctx, b)
	if err != nil {
		return err
	}
	a.model = model
	a.live.Recover(model)
	return nil
}

// stage begins a batch's auth changes.
func (a *authority) stage() *stagedAuth { return &stagedAuth{base: a} }

// commit makes a committed batch's auth changes live. They are applied
// again, in order, to the live store: applying is deterministic, so it
// reaches the state the batch stored, and etcd's store does what it does
// on each change (an AuthDisable drops every token).
func (a *authority) commit(st *stagedAuth) {
	for _, r := range st.applied {
		if _, err := applyAuthTo(a.live, r); err != nil {
			a.log.Error("auth change committed but not applied to the live auth store", "err", err)
		}
	}
	if len(st.applied) > 0 {
		a.model.takeDirty() // stored by the batch already
	}
}

// close stops the live store's token keeper.
func (a *authority) close() error { return a.live.Close() }

// stagedAuth is a batch's auth changes, applied to a copy of the committed
// state made at the batch's first auth change.
type stagedAuth struct {
	base    *authority
	as      auth.AuthStore // nil until the batch changes auth
	model   *authModel
	applied []*pb.InternalRaftRequest
}

// apply applies one auth change to the batch's copy.
func (st *stagedAuth) apply(r *pb.InternalRaftRequest) (proto.Message, error) {
	if st.as == nil {
		data, err := st.base.model.encode()
		if err != nil {
			return nil, err
		}
		if st.model, err = decodeAuthModel(data); err != nil {
			return nil, err
		}
		// A token provider that issues nothing: tokens belong to the
		// live store alone.
		tp, err := auth.NewTokenProvider(zap.NewNop(), "", nil, 0)
		if err != nil {
			return nil, fmt.Errorf("stage auth change: %w", err)
		}
		st.as = auth.NewAuthStore(zap.NewNop(), st.model, tp, st.base.cost)
	}
	resp, err := applyAuthTo(st.as, r)
	if err == nil {
		st.applied = append(st.applied, r)
	}
	return resp, err
}

// store writes the batch's auth state into tx if the batch changed it.
func (st *stagedAuth) store(ctx context.Context, tx WriteTx) error {
	if st.model == nil || !st.model.takeDirty() {
		return nil
	}
	state, err := st.model.encode()
	if err != nil {
		return err
	}
	if err := tx.PutAuthState(ctx, state); err != nil {
		return fmt.Errorf("store auth state: %w", err)
	}
	return nil
}

func (st *stagedAuth) close() {
	if st.as != nil {
		_ = st.as.Close()
	}
}

// Auth returns etcd's auth store: permission checks, user and role reads,
// token issue and validation. Changes go through AuthChange.
func (s *Store) Auth() auth.AuthStore { return s.auth.live }

// AuthChange applies a change of the authentication state (enable,
// disable, users, roles) through the write path, and returns etcd's
// response for it (without header). A password in a user request is
// replaced by its bcrypt hash before the request leaves this server, as
// etcd does, so that applying it is deterministic.
func (s *Store) AuthChange(ctx context.Context, r *pb.InternalRaftRequest) (proto.Message, error) {
	if !isAuthChange(r) {
		return nil, fmt.Errorf("mvcc: not an auth change")
	}
	hash := func(password string) (string, error) {
		h, err := bcrypt.GenerateFromPassword([]byte(password), s.auth.live.BcryptCost())
		if err != nil {
			return "", fmt.Errorf("hash password: %w", err)
		}
		return base64.StdEncoding.EncodeToString(h), nil
	}
	switch {
	case r.AuthUserAdd != nil && (r.AuthUserAdd.Options == nil || !r.AuthUserAdd.Options.NoPassword):
		u := proto.Clone(r.AuthUserAdd).(*pb.AuthUserAddRequest)
		h, err := hash(u.Password)
		if err != nil {
			return nil, err
		}
		u.Password, u.HashedPassword = "", h
		r = &pb.InternalRaftRequest{AuthUserAdd: u}
	case r.AuthUserChangePassword != nil && r.AuthUserChangePassword.Password != "":
		u := proto.Clone(r.AuthUserChangePassword).(*pb.AuthUserChangePasswordRequest)
		h, err := hash(u.Password)
		if err != nil {
			return nil, err
		}
		u.Password, u.HashedPassword = "", h
		r = &pb.InternalRaftRequest{AuthUserChangePassword: u}
	}
	resp, err := s.admit(ctx, r)
	if err != nil {
		return nil, err
	}
	return resp.(proto.Message), nil
}

func isAuthChange(r *pb.InternalRaftRequest) bool {
	return r.AuthEnable != nil || r.AuthDisable != nil || r.AuthUserAdd != nil || r.AuthUserDelete != nil ||
		r.AuthUserChangePassword != nil || r.AuthUserGrantRole != nil || r.AuthUserRevokeRole != nil ||
		r.AuthRoleAdd != nil || r.AuthRoleDelete != nil || r.AuthRoleGrantPermission != nil ||
		r.AuthRoleRevokePermission != nil
}

// applyAuthTo applies one auth change to as (on the writer's goroutine, in
// log order).
func applyAuthTo(as auth.AuthStore, r *pb.InternalRaftRequest) (proto.Message, error) {
	switch {
	case r.AuthEnable != nil:
		if err := as.AuthEnable(); err != nil {
			return nil, err
		}
		return &pb.AuthEnableResponse{}, nil
	case r.AuthDisable != nil:
		as.AuthDisable()
		return &pb.AuthDisableResponse{}, nil
	case r.AuthUserAdd != nil:
		return as.UserAdd(r.AuthUserAdd)
	case r.AuthUserDelete != nil:
		return as.UserDelete(r.AuthUserDelete)
	case r.AuthUserChangePassword != nil:
		return as.UserChangePassword(r.AuthUserChangePassword)
	case r.AuthUserGrantRole != nil:
		return as.UserGrantRole(r.AuthUserGrantRole)
	case r.AuthUserRevokeRole != nil:
		return as.UserRevokeRole(r.AuthUserRevokeRole)
	case r.AuthRoleAdd != nil:
		return as.RoleAdd(r.AuthRoleAdd)
	case r.AuthRoleDelete != nil:
		return as.RoleDelete(r.AuthRoleDelete)
	case r.AuthRoleGrantPermission != nil:
		return as.RoleGrantPermission(r.AuthRoleGrantPermission)
	case r.AuthRoleRevokePermission != nil:
		return as.RoleRevokePermission(r.AuthRoleRevokePermission)
	}
	return nil, fmt.Errorf("mvcc: not an auth change")
}
