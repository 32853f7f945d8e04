package k8s

// The store setup below follows k8s.io/apiserver v0.37.2
// pkg/storage/etcd3/store_test.go (testSetup, withDefaults, compactStorage,
// increaseRVFunc, checkStorageInvariants, checkStorageCallsInvariants),
// Copyright The Kubernetes Authors, Apache License 2.0. Upstream lives inside
// package etcd3 and reaches into the unexported *store; from outside we get the
// same behaviour through exported API only:
//   - the transformer the tests swap (UpdatePrefixTransformer,
//     UpdateTransformer) is a swappableTransformer handed to etcd3.New, so
//     replacing its delegate replaces the store's and its watcher's
//     transformer at once, as upstream's field assignments do;
//   - store.getKeys is reimplemented with the same keys-only prefix Get.

import (
	"context"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc/grpclog"

	"k8s.io/apimachinery/pkg/api/apitesting"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/utils/clock"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

const (
	defaultTestPrefix = "test!"
	// maxLimit is etcd3's page size cap (unexported constant in store.go).
	maxLimit = 10000
)

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))

	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
}

func newPod() runtime.Object     { return &example.Pod{} }
func newPodList() runtime.Object { return &example.PodList{} }

// etcdStore is the exported surface of the *store that etcd3.New returns.
type etcdStore interface {
	storage.Interface
	CompactRevision() int64
	Close()
	EnableResourceSizeEstimation(storage.KeysFunc) error
}

// testStore is a store under test plus what upstream reads from its fields.
type testStore struct {
	etcdStore
	client         *kubernetes.Client
	codec          runtime.Codec
	transformer    *swappableTransformer
	pathPrefix     string
	resourcePrefix string
}

// getKeys mirrors (*store).getKeys: a keys-only Get of the resource prefix.
func (s *testStore) getKeys(ctx context.Context) ([]string, error) {
	key, err := storage.PrepareKey(s.resourcePrefix, s.resourcePrefix, true)
	if err != nil {
		return nil, err
	}
	prefix := s.pathPrefix + strings.TrimPrefix(key, "/")
	resp, err := s.client.KV.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys, nil
}

// swappableTransformer forwards to a delegate that tests may replace.
type swappableTransformer struct {
	mu       sync.RWMutex
	delegate value.Transformer
}

func (s *swappableTransformer) get() value.Transformer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.delegate
}

func (s *swappableTransformer) set(t value.Transformer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delegate = t
}

func (s *swappableTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	return s.get().TransformFromStorage(ctx, data, dataCtx)
}

func (s *swappableTransformer) TransformToStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, error) {
	return s.get().TransformToStorage(ctx, data, dataCtx)
}

// storeWithPrefixTransformer implements storagetesting.InterfaceWithPrefixTransformer.
type storeWithPrefixTransformer struct {
	*testStore
}

func (s *storeWithPrefixTransformer) UpdatePrefixTransformer(modifier storagetesting.PrefixTransformerModifier) func() {
	original := s.transformer.get()
	transformer := *original.(*storagetesting.PrefixTransformer)
	s.transformer.set(modifier(&transformer))
	return func() { s.transformer.set(original) }
}

// storeWithTransformerOverride implements storagetesting.InterfaceWithTransformerOverride.
type storeWithTransformerOverride struct {
	storage.Interface
	store *testStore
}

func (s *storeWithTransformerOverride) UpdateTransformer(modifier storagetesting.TransformerModifier) func() {
	original := s.store.transformer.get()
	s.store.transformer.set(modifier(original))
	return func() { s.store.transformer.set(original) }
}

type setupOptions struct {
	server         serverOptions
	codec          runtime.Codec
	newFunc        func() runtime.Object
	newListFunc    func() runtime.Object
	prefix         string
	resourcePrefix string
	groupResource  schema.GroupResource
	transformer    value.Transformer
	leaseConfig    etcd3.LeaseManagerConfig
}

type setupOption func(*setupOptions)

func withProgressNotifyInterval(d time.Duration) setupOption {
	return func(o *setupOptions) { o.server.progressNotifyInterval = d }
}

func withPrefix(prefix string) setupOption {
	return func(o *setupOptions) { o.prefix = prefix }
}

func withResourcePrefix(prefix string) setupOption {
	return func(o *setupOptions) { o.resourcePrefix = prefix }
}

func withLeaseConfig(cfg etcd3.LeaseManagerConfig) setupOption {
	return func(o *setupOptions) { o.leaseConfig = cfg }
}

func withTransformer(transformer value.Transformer) setupOption {
	return func(o *setupOptions) { o.transformer = transformer }
}

func withCodec(codec runtime.Codec) setupOption {
	return func(o *setupOptions) { o.codec = codec }
}

func withDefaults(o *setupOptions) {
	o.codec = apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)
	o.newFunc = newPod
	o.newListFunc = newPodList
	o.prefix = ""
	o.resourcePrefix = "/pods/"
	o.groupResource = schema.GroupResource{Resource: "pods"}
	o.transformer = storagetesting.NewPrefixTransformer([]byte(defaultTestPrefix), false)
	o.leaseConfig = newTestLeaseManagerConfig()
}

func newTestLeaseManagerConfig() etcd3.LeaseManagerConfig {
	cfg := etcd3.NewDefaultLeaseManagerConfig()
	// As upstream: 30s is the default test timeout, so reuse leases for 1s only.
	cfg.ReuseDurationSeconds = 1
	return cfg
}

func testSetup(t testing.TB, opts ...setupOption) (context.Context, *testStore, *kubernetes.Client) {
	o := setupOptions{}
	for _, opt := range append([]setupOption{withDefaults}, opts...) {
		opt(&o)
	}
	client := runServer(t, o.server)
	versioner := storage.APIObjectVersioner{}
	compactor := etcd3.NewCompactor(client.Client, 0, clock.RealClock{}, nil)
	t.Cleanup(compactor.Stop)
	transformer := &swappableTransformer{delegate: o.transformer}
	s, err := etcd3.New(
		client,
		compactor,
		o.codec,
		o.newFunc,
		o.newListFunc,
		o.prefix,
		o.resourcePrefix,
		o.groupResource,
		transformer,
		o.leaseConfig,
		etcd3.NewDefaultDecoder(o.codec, versioner),
		versioner,
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	pathPrefix := path.Join("/", o.prefix)
	if !strings.HasSuffix(pathPrefix, "/") {
		pathPrefix += "/"
	}
	return context.Background(), &testStore{
		etcdStore:      s,
		client:         client,
		codec:          o.codec,
		transformer:    transformer,
		pathPrefix:     pathPrefix,
		resourcePrefix: o.resourcePrefix,
	}, client
}

func resetFeatureSupportCheckerDuringTest(t *testing.T) {
	t.Helper()
	orig := etcdfeature.DefaultFeatureSupportChecker
	etcdfeature.DefaultFeatureSupportChecker = etcdfeature.NewDefaultFeatureSupportChecker()
	t.Cleanup(func() { etcdfeature.DefaultFeatureSupportChecker = orig })
}

func checkStorageInvariants(etcdClient *clientv3.Client, codec runtime.Codec) storagetesting.KeyValidation {
	return func(ctx context.Context, t *testing.T, key string) {
		getResp, err := etcdClient.KV.Get(ctx, key)
		if err != nil {
			t.Fatalf("etcdClient.KV.Get failed: %v", err)
		}
		if len(getResp.Kvs) == 0 {
			t.Fatalf("expecting non empty result on key: %s", key)
		}
		decoded, err := runtime.Decode(codec, getResp.Kvs[0].Value[len(defaultTestPrefix):])
		if err != nil {
			t.Fatalf("expecting successful decode of object from %v\n%v", err, string(getResp.Kvs[0].Value))
		}
		obj := decoded.(*example.Pod)
		if obj.ResourceVersion != "" {
			t.Errorf("stored object should have empty resource version")
		}
		if obj.SelfLink != "" {
			t.Errorf("stored output should have empty selfLink")
		}
	}
}

func checkStorageCallsInvariants(transformer *storagetesting.PrefixTransformer, recorder *storagetesting.KVRecorder) storagetesting.CallsValidation {
	return func(t *testing.T, pageSize, estimatedProcessedObjects uint64) {
		if reads := transformer.GetReadsAndReset(); reads != estimatedProcessedObjects {
			t.Errorf("unexpected reads: %d, expected: %d", reads, estimatedProcessedObjects)
		}
		estimatedGetCalls := uint64(1)
		if pageSize != 0 {
			// kube-apiserver doubles the page size while pages come back short,
			// so a list costs n+1 calls where pageSize*(2^(n+1)-1) >= objects.
			currLimit := pageSize
			for sum := uint64(1); sum < estimatedProcessedObjects; {
				currLimit *= 2
				if currLimit > maxLimit {
					currLimit = maxLimit
				}
				sum += currLimit
				estimatedGetCalls++
			}
		}
		if reads := recorder.GetReadsAndReset() + recorder.GetStreamReadsAndReset(); reads != estimatedGetCalls {
			t.Fatalf("unexpected reads: %d, want: %d", reads, estimatedGetCalls)
		}
	}
}

func (s *testStore) prefixTransformer() *storagetesting.PrefixTransformer {
	return s.transformer.get().(*storagetesting.PrefixTransformer)
}

func compactStorage(s *testStore, client *clientv3.Client) storagetesting.Compaction {
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		versioner := storage.APIObjectVersioner{}
		rv, err := versioner.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		var currentVersion int64
		currentVersion, _, _, err = etcd3.Compact(ctx, client, currentVersion, int64(rv))
		if err != nil {
			_, _, _, err = etcd3.Compact(ctx, client, currentVersion, int64(rv))
		}
		if err != nil {
			t.Fatal(err)
		}
		// Wait for compaction to be observed (bounded here; upstream waits on ctx).
		if utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
			deadline := time.After(wait30s)
			for s.CompactRevision() != int64(rv) {
				select {
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				case <-deadline:
					t.Fatalf("store did not observe compaction at %d (at %d)", rv, s.CompactRevision())
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
}

const wait30s = 30 * time.Second

func increaseRVFunc(client *clientv3.Client) storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		resp, err := client.KV.Put(ctx, "increaseRV", "ok")
		if err != nil {
			t.Fatalf("Could not update increaseRV: %v", err)
		}
		return resp.Header.Revision
	}
}
