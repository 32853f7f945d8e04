package mvcc

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/server/v3/auth"
	"google.golang.org/protobuf/proto"
)

// authModel is the authentication state in memory, behind the interface
// etcd's auth store reads and writes (auth.AuthBackend): users, roles,
// whether auth is enabled and the auth revision. etcd keeps these in
// bbolt buckets; kite keeps them here and stores the whole state, encoded,
// in the write transaction that changed it (Backend's PutAuthState), so a
// change is durable, replicated and ordered with the writes around it.
type authModel struct {
	mu       sync.RWMutex
	enabled  bool
	revision uint64
	users    map[string]*authpb.User
	roles    map[string]*authpb.Role
	// dirty: changed since the last encode.
	dirty bool
}

var _ auth.AuthBackend = (*authModel)(nil)

func newAuthModel() *authModel {
	return &authModel{users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}}
}

// authState is the stored form: users and roles as etcd's protobuf
// messages, in name order so equal states encode alike.
type authState struct {
	Enabled  bool     `json:"enabled"`
	Revision uint64   `json:"revision"`
	Users    [][]byte `json:"users,omitempty"`
	Roles    [][]byte `json:"roles,omitempty"`
}

func (m *authModel) encode() ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := authState{Enabled: m.enabled, Revision: m.revision}
	for _, name := range slices.Sorted(maps.Keys(m.users)) {
		b, err := proto.Marshal(m.users[name])
		if err != nil {
			return nil, fmt.Errorf("encode user %q: %w", name, err)
		}
		st.Users = append(st.Users, b)
	}
	for _, name := range slices.Sorted(maps.Keys(m.roles)) {
		b, err := proto.Marshal(m.roles[name])
		if err != nil {
			return nil, fmt.Errorf("encode role %q: %w", name, err)
		}
		st.Roles = append(st.Roles, b)
	}
	return json.Marshal(st)
}

// decodeAuthModel reads a stored state; nil is a store that never had
// one (auth disabled, no users or roles).
func decodeAuthModel(data []byte) (*authModel, error) {
	m := newAuthModel()
	if len(data) == 0 {
		return m, nil
	}
	var st authState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("decode auth state: %w", err)
	}
	m.enabled, m.revision = st.Enabled, st.Revision
	for _, b := range st.Users {
		u := &authpb.User{}
		if err := proto.Unmarshal(b, u); err != nil {
			return nil, fmt.Errorf("decode auth user: %w", err)
		}
		m.users[string(u.Name)] = u
	}
	for _, b := range st.Roles {
		r := &authpb.Role{}
		if err := proto.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("decode auth role: %w", err)
		}
		m.roles[string(r.Name)] = r
	}
	return m, nil
}

// takeDirty reports whether the state changed since the last call.
func (m *authModel) takeDirty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dirty
	m.dirty = false
	return d
}

// The auth.AuthBackend side. Buckets and commits are the Store's business.

func (m *authModel) CreateAuthBuckets()        {}
func (m *authModel) ForceCommit()              {}
func (m *authModel) ReadTx() auth.AuthReadTx   { return (*authModelTx)(m) }
func (m *authModel) BatchTx() auth.AuthBatchTx { return (*authModelTx)(m) }
func (m *authModel) GetUser(name string) *authpb.User {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return (*authModelTx)(m).UnsafeGetUser(name)
}
func (m *authModel) GetAllUsers() []*authpb.User {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return (*authModelTx)(m).UnsafeGetAllUsers()
}
func (m *authModel) GetRole(name string) *authpb.Role {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return (*authModelTx)(m).UnsafeGetRole(name)
}
func (m *authModel) GetAllRoles() []*authpb.Role {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return (*authModelTx)(m).UnsafeGetAllRoles()
}

// authModelTx is the model as etcd's auth store's transactions see it:
// its lock, and unlocked access for the caller holding it. Values are
// cloned in and out, as bbolt hands out copies.
type authModelTx authModel

func (t *authModelTx) Lock()    { t.mu.Lock() }
func (t *authModelTx) Unlock()  { t.mu.Unlock() }
func (t *authModelTx) RLock()   { t.mu.RLock() }
func (t *authModelTx) RUnlock() { t.mu.RUnlock() }

func (t *authModelTx) UnsafeReadAuthEnabled() bool    { return t.enabled }
func (t *authModelTx) UnsafeReadAuthRevision() uint64 { return t.revision }

func (t *authModelTx) UnsafeGetUser(name string) *authpb.User {
	u, ok := t.users[name]
	if !ok {
		return nil
	}
	return proto.Clone(u).(*authpb.User)
}

func (t *authModelTx) UnsafeGetRole(name string) *authpb.Role {
	r, ok := t.roles[name]
	if !ok {
		return nil
	}
	return proto.Clone(r).(*authpb.Role)
}

func (t *authModelTx) UnsafeGetAllUsers() []*authpb.User {
	var out []*authpb.User
	for _, name := range slices.Sorted(maps.Keys(t.users)) {
		out = append(out, proto.Clone(t.users[name]).(*authpb.User))
	}
	return out
}

func (t *authModelTx) UnsafeGetAllRoles() []*authpb.Role {
	var out []*authpb.Role
	for _, name := range slices.Sorted(maps.Keys(t.roles)) {
		out = append(out, proto.Clone(t.roles[name]).(*authpb.Role))
	}
	return out
}

func (t *authModelTx) UnsafeSaveAuthEnabled(enabled bool) { t.enabled, t.dirty = enabled, true }
func (t *authModelTx) UnsafeSaveAuthRevision(rev uint64)  { t.revision, t.dirty = rev, true }
func (t *authModelTx) UnsafePutUser(u *authpb.User) {
	t.users[string(u.Name)], t.dirty = proto.Clone(u).(*authpb.User), true
}
func (t *authModelTx) UnsafeDeleteUser(name string) { delete(t.users, name); t.dirty = true }
func (t *authModelTx) UnsafePutRole(r *authpb.Role) {
	t.roles[string(r.Name)], t.dirty = proto.Clone(r).(*authpb.Role), true
}
func (t *authModelTx) UnsafeDeleteRole(name string) { delete(t.roles, name); t.dirty = true }
