package mvcc

import (
	"context"
	"encoding/base64"
	"fmt"
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

func (s *Store) openAuth(ctx context.Context) error {
	model, err := s.readAuthModel(ctx)
	if err != nil {
		return err
	}
	lg := zap.NewNop()
	tp, err := auth.NewTokenProvider(lg, s.cfg.AuthToken, func(uint64) <-chan struct{} { return closedIndex }, s.cfg.AuthTokenTTL)
	if err != nil {
		return fmt.Errorf("--auth-token %q: %w", s.cfg.AuthToken, err)
	}
	s.authModel = model
	s.auth = auth.NewAuthStore(lg, model, tp, s.cfg.BcryptCost)
	return nil
}

func (s *Store) readAuthModel(ctx context.Context) (*authModel, error) {
	tx, err := s.b.BeginRead(ctx)
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

// reloadAuth makes the auth store follow the stored state again: after
// another server changed it (postgres), a database received from the
// leader (raftsql), or a write transaction that changed it rolled back.
func (s *Store) reloadAuth(ctx context.Context) error {
	model, err := s.readAuthModel(ctx)
	if err != nil {
		return err
	}
	s.authModel = model
	s.auth.Recover(model)
	return nil
}

// Auth returns etcd's auth store: permission checks, user and role reads,
// token issue and validation. Changes go through AuthChange.
func (s *Store) Auth() auth.AuthStore { return s.auth }

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
		h, err := bcrypt.GenerateFromPassword([]byte(password), s.auth.BcryptCost())
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

// applyAuth applies one auth change to the model (on the writer's
// goroutine, in log order). The caller stores the model in the batch's
// transaction.
func (s *Store) applyAuth(r *pb.InternalRaftRequest) (proto.Message, error) {
	switch {
	case r.AuthEnable != nil:
		if err := s.auth.AuthEnable(); err != nil {
			return nil, err
		}
		return &pb.AuthEnableResponse{}, nil
	case r.AuthDisable != nil:
		s.auth.AuthDisable()
		return &pb.AuthDisableResponse{}, nil
	case r.AuthUserAdd != nil:
		return s.auth.UserAdd(r.AuthUserAdd)
	case r.AuthUserDelete != nil:
		return s.auth.UserDelete(r.AuthUserDelete)
	case r.AuthUserChangePassword != nil:
		return s.auth.UserChangePassword(r.AuthUserChangePassword)
	case r.AuthUserGrantRole != nil:
		return s.auth.UserGrantRole(r.AuthUserGrantRole)
	case r.AuthUserRevokeRole != nil:
		return s.auth.UserRevokeRole(r.AuthUserRevokeRole)
	case r.AuthRoleAdd != nil:
		return s.auth.RoleAdd(r.AuthRoleAdd)
	case r.AuthRoleDelete != nil:
		return s.auth.RoleDelete(r.AuthRoleDelete)
	case r.AuthRoleGrantPermission != nil:
		return s.auth.RoleGrantPermission(r.AuthRoleGrantPermission)
	case r.AuthRoleRevokePermission != nil:
		return s.auth.RoleRevokePermission(r.AuthRoleRevokePermission)
	}
	return nil, fmt.Errorf("mvcc: not an auth change")
}

// storeAuth writes the model into tx if the batch changed it.
func (s *Store) storeAuth(ctx context.Context, tx WriteTx) error {
	if !s.authModel.takeDirty() {
		return nil
	}
	state, err := s.authModel.encode()
	if err != nil {
		return err
	}
	if err := tx.PutAuthState(ctx, state); err != nil {
		return fmt.Errorf("store auth state: %w", err)
	}
	return nil
}
