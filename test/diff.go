package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
)

// pair is a fresh reference etcd and a fresh kite, both at revision 1.
type pair struct {
	t    testing.TB
	etcd *etcdServer
	kite *kiteProcess
}

func newPair(t testing.TB, flags ...string) *pair {
	t.Helper()
	return &pair{t: t, etcd: startEtcd(t, flags...), kite: startKite(t, flags...)}
}

// both returns the two servers, etcd first.
func (p *pair) both() []*server { return []*server{p.etcd.server, p.kite.server} }

// selfMemberID stands, in a normalised AlarmResponse, for the ID of the
// member that answered.
const selfMemberID = ^uint64(0)

// normalize returns a copy of m with the fields that legitimately differ
// between two servers cleared: cluster and member IDs and raft terms in
// every response header, storage-specific Status fields, and the order of
// lists etcd itself returns in map order.
func normalize(m proto.Message) proto.Message {
	if m == nil {
		return nil
	}
	c := proto.Clone(m)
	// An alarm a member raised itself (NOSPACE) names that member, as its
	// headers do; the two servers' IDs differ, so each is compared against
	// its own header before the headers are cleared. Any other ID (0, one
	// a client chose) stays as it is.
	switch r := c.(type) {
	case *pb.AlarmResponse:
		for _, a := range r.Alarms {
			if a.MemberID != 0 && a.MemberID == r.GetHeader().GetMemberId() {
				a.MemberID = selfMemberID
			}
		}
	case *pb.StatusResponse:
		// Both servers list alarms as AlarmMember.String(), whose spacing
		// protobuf-go varies from binary to binary on purpose.
		self := fmt.Sprintf("memberID:%d", r.GetHeader().GetMemberId())
		for i, e := range r.Errors {
			f := strings.Fields(e)
			for j := range f {
				if f[j] == self {
					f[j] = fmt.Sprintf("memberID:%d", selfMemberID)
				}
			}
			r.Errors[i] = strings.Join(f, " ")
		}
	}
	zeroHeaders(c.ProtoReflect())
	switch r := c.(type) {
	case *pb.StatusResponse:
		r.DbSize, r.DbSizeInUse, r.DbSizeQuota = 0, 0, 0
		r.RaftIndex, r.RaftAppliedIndex, r.RaftTerm, r.Leader = 0, 0, 0, 0
		r.Version, r.StorageVersion = "", ""
	case *pb.AuthenticateResponse:
		// Tokens are random; that one was issued is what compares.
		if r.Token != "" {
			r.Token = "issued"
		}
	case *pb.HashKVResponse:
		// The hash is over each server's own storage layout.
		r.Hash = 0
	case *pb.HashResponse:
		r.Hash = 0
	case *pb.LeaseLeasesResponse:
		slices.SortFunc(r.Leases, func(a, b *pb.LeaseStatus) int { return cmpInt(a.ID, b.ID) })
	case *pb.LeaseTimeToLiveResponse:
		// The remaining TTL counts down while the test runs.
		if r.TTL > 0 && r.TTL <= r.GrantedTTL && r.TTL >= r.GrantedTTL-5 {
			r.TTL = r.GrantedTTL
		}
		slices.SortFunc(r.Keys, func(a, b []byte) int { return strings.Compare(string(a), string(b)) })
	}
	return c
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func zeroHeaders(m protoreflect.Message) {
	if m.Descriptor().FullName() == "etcdserverpb.ResponseHeader" {
		for _, n := range []protoreflect.Name{"cluster_id", "member_id", "raft_term"} {
			m.Clear(m.Descriptor().Fields().ByName(n))
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		switch {
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				zeroHeaders(v.List().Get(i).Message())
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Message() != nil {
					zeroHeaders(mv.Message())
				}
				return true
			})
		default:
			zeroHeaders(v.Message())
		}
		return true
	})
}

// errText is how errors compare: gRPC code and message.
func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := status.Convert(err)
	return fmt.Sprintf("code=%s msg=%q", s.Code(), s.Message())
}

// diffResults compares two answers to the same request; "" means equal.
func diffResults(etcdResp, kiteResp proto.Message, etcdErr, kiteErr error) string {
	if etcdErr != nil || kiteErr != nil {
		if e, k := errText(etcdErr), errText(kiteErr); e != k {
			return fmt.Sprintf("error: etcd %s, kite %s", e, k)
		}
		return ""
	}
	return cmp.Diff(normalize(etcdResp), normalize(kiteResp), protocmp.Transform())
}

// show prints a message compactly for failure reports (long values cut).
func show(m any) string {
	switch v := m.(type) {
	case nil:
		return "<nil>"
	case proto.Message:
		s := prototext.MarshalOptions{}.Format(v)
		if len(s) > 1500 {
			s = s[:1500] + "...(cut)"
		}
		return "{" + s + "}"
	case error:
		return errText(v)
	}
	return fmt.Sprintf("%#v", m)
}

// A step is one request of a differential sequence. Its req is a request
// protobuf (see do), rangeStream, sleep, or an op func for anything else.
type step struct {
	name string
	req  any
}

// op is a custom step run against one server.
type op func(ctx context.Context, s *server) (proto.Message, error)

// rangeStream asks KV.RangeStream; the chunks are checked and merged into
// one RangeResponse.
type rangeStream struct{ *pb.RangeRequest }

// sleep waits, on both servers, before the next step.
type sleep time.Duration

// do sends req to s.
func do(ctx context.Context, s *server, req any) (proto.Message, error) {
	switch r := req.(type) {
	case *pb.RangeRequest:
		return s.KV.Range(ctx, r)
	case *pb.PutRequest:
		return s.KV.Put(ctx, r)
	case *pb.DeleteRangeRequest:
		return s.KV.DeleteRange(ctx, r)
	case *pb.TxnRequest:
		return s.KV.Txn(ctx, r)
	case *pb.CompactionRequest:
		return s.KV.Compact(ctx, r)
	case *pb.LeaseGrantRequest:
		return s.Lease.LeaseGrant(ctx, r)
	case *pb.LeaseRevokeRequest:
		return s.Lease.LeaseRevoke(ctx, r)
	case *pb.LeaseTimeToLiveRequest:
		return s.Lease.LeaseTimeToLive(ctx, r)
	case *pb.LeaseLeasesRequest:
		return s.Lease.LeaseLeases(ctx, r)
	case *pb.StatusRequest:
		return s.Maint.Status(ctx, r)
	case *pb.AlarmRequest:
		return s.Maint.Alarm(ctx, r)
	case *pb.HashKVRequest:
		return s.Maint.HashKV(ctx, r)
	case *pb.HashRequest:
		return s.Maint.Hash(ctx, r)
	case *pb.DefragmentRequest:
		return s.Maint.Defragment(ctx, r)
	case rangeStream:
		return rangeStreamMerged(ctx, s, r.RangeRequest)
	case op:
		return r(ctx, s)
	case sleep:
		time.Sleep(time.Duration(r))
		return nil, nil
	}
	return nil, fmt.Errorf("test bug: unknown step %T", req)
}

// errStreamShape reports a RangeStream whose chunks break etcd's framing.
var errStreamShape = errors.New("bad RangeStream framing")

// rangeStreamMerged reads a whole RangeStream. Every chunk but the last
// carries only Kvs; the last one carries the header, count and more. The
// merged response must equal what Range answers.
func rangeStreamMerged(ctx context.Context, s *server, r *pb.RangeRequest) (proto.Message, error) {
	st, err := s.KV.RangeStream(ctx, r)
	if err != nil {
		return nil, err
	}
	var chunks []*pb.RangeResponse
	for {
		c, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, c.RangeResponse)
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("%w: no chunk", errStreamShape)
	}
	out := &pb.RangeResponse{}
	for i, c := range chunks {
		if c == nil {
			return nil, fmt.Errorf("%w: chunk %d has no range_response", errStreamShape, i)
		}
		last := i == len(chunks)-1
		if !last && (c.Header != nil || c.Count != 0 || c.More || len(c.Kvs) == 0) {
			return nil, fmt.Errorf("%w: non-final chunk %d: %s", errStreamShape, i, show(c))
		}
		out.Kvs = append(out.Kvs, c.Kvs...)
		if last {
			if c.Header == nil {
				return nil, fmt.Errorf("%w: final chunk without header", errStreamShape)
			}
			out.Header, out.Count, out.More = c.Header, c.Count, c.More
		}
	}
	return out, nil
}

// run sends every step to etcd then to kite and compares the answers. It
// stops at the first difference: later steps would only repeat it.
func (p *pair) run(steps []step) bool {
	p.t.Helper()
	for i, st := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		er, ee := do(ctx, p.etcd.server, st.req)
		kr, ke := do(ctx, p.kite.server, st.req)
		cancel()
		if errors.Is(ee, errStreamShape) {
			p.t.Fatalf("step %d %q: etcd itself: %v", i, st.name, ee)
		}
		if d := diffResults(er, kr, ee, ke); d != "" {
			p.t.Errorf("step %d %q differs\nrequest: %s\netcd: %s %s\nkite: %s %s\ndiff (-etcd +kite):\n%s",
				i, st.name, show(st.req), show(er), errText(ee), show(kr), errText(ke), d)
			return false
		}
	}
	return true
}

// same runs one request on both servers and compares the answers.
func (p *pair) same(name string, req any) bool {
	p.t.Helper()
	return p.run([]step{{name, req}})
}
