package k8s

// Each test below is the test of the same name in k8s.io/apiserver v0.37.2
// pkg/storage/etcd3/store_test.go (Copyright The Kubernetes Authors, Apache
// License 2.0), calling the same storagetesting.RunTest* function with the same
// store setup and feature gates, but against kite instead of an embedded etcd.
//
// Every exported storagetesting.RunTest* that upstream's etcd3 tests call is
// run here or in watcher_test.go. Upstream's implementation-specific tests
// (the section "Implementation-specific tests are following" of its files) are
// not: they exercise apiserver internals through the unexported etcd3.store and
// watchChan or through fake clients that replace the server, so they cannot
// tell kite from etcd and cannot compile outside package etcd3 —
// TestWatchChanSync*, TestWatchErrorIncorrectConfiguration,
// TestTooLargeResourceVersionErrorForWatchList, TestLeaseMaxObjectCount,
// TestPrepareKey, TestInvalidKeys, TestPrefix, Test_growSlice,
// TestGetListStreamFallsBackToPaginated and TestWatchChanSyncStreamFallsBackToPaginated
// (an Unimplemented fake instead of the server), TestListMetrics and
// TestPrefixGetKeys (apiserver metrics and key helpers only). The three of
// them that do talk to the server through the public API are kept:
// TestGetListStreamMultiChunk, TestGetCurrentResourceVersion, TestPrefixStats.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"k8s.io/apimachinery/pkg/api/apitesting"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

func TestCreate(t *testing.T) {
	ctx, store, client := testSetup(t)
	storagetesting.RunTestCreate(ctx, t, store, checkStorageInvariants(client.Client, store.codec))
}

func TestCreateWithTTL(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestCreateWithTTL(ctx, t, store)
}

func TestCreateWithKeyExist(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestCreateWithKeyExist(ctx, t, store)
}

func TestGet(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGet(ctx, t, store)
}

func TestUnconditionalDelete(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestUnconditionalDelete(ctx, t, store)
}

func TestConditionalDelete(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestConditionalDelete(ctx, t, store)
}

func TestDeleteWithSuggestion(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestion(ctx, t, store)
}

func TestDeleteWithSuggestionAndConflict(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestionAndConflict(ctx, t, store)
}

func TestDeleteWithSuggestionOfDeletedObject(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestionOfDeletedObject(ctx, t, store)
}

func TestValidateDeletionWithSuggestion(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestValidateDeletionWithSuggestion(ctx, t, store)
}

func TestValidateDeletionWithOnlySuggestionValid(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestValidateDeletionWithOnlySuggestionValid(ctx, t, store)
}

func TestDeleteWithConflict(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestDeleteWithConflict(ctx, t, store)
}

type testTransformer struct {
	value.Transformer
	fail atomic.Bool
}

func (tt *testTransformer) setFailing(c bool) { tt.fail.Store(c) }

func (tt *testTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) (out []byte, stale bool, err error) {
	if tt.fail.Load() {
		return nil, false, errors.New("synthetic error")
	}
	return tt.Transformer.TransformFromStorage(ctx, data, dataCtx)
}

type testCodec struct {
	runtime.Codec
	fail atomic.Bool
}

func (tc *testCodec) setFailing(c bool) { tc.fail.Store(c) }

func (tc *testCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if tc.fail.Load() {
		return nil, nil, errors.New("synthetic error")
	}
	return tc.Codec.Decode(data, defaults, into)
}

func TestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	codec := &testCodec{Codec: apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)}
	ctx, s, _ := testSetup(t, withCodec(codec))
	storagetesting.RunTestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(ctx, t, s, codec.setFailing)
}

func TestDeleteWithConflictAndExpectedTransformError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	transformer := &testTransformer{Transformer: storagetesting.NewPrefixTransformer([]byte(defaultTestPrefix), false)}
	ctx, s, _ := testSetup(t, withTransformer(transformer))
	storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, s, transformer.setFailing)
}

func TestDeleteWithConflictAndExpectedDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	codec := &testCodec{Codec: apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)}
	ctx, s, _ := testSetup(t, withCodec(codec))
	storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, s, codec.setFailing)
}

func TestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeFailure(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeError(ctx, t, store)
}

func TestPreconditionalDeleteWithSuggestion(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestPreconditionalDeleteWithSuggestion(ctx, t, store)
}

func TestPreconditionalDeleteWithSuggestionPass(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass(ctx, t, store)
}

func TestListPaging(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestListPaging(ctx, t, store)
}

func TestGetListNonRecursive(t *testing.T) {
	ctx, store, client := testSetup(t)
	storagetesting.RunTestGetListNonRecursive(ctx, t, increaseRVFunc(client.Client), store)
}

func TestGetListRecursivePrefix(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGetListRecursivePrefix(ctx, t, store)
}

func TestKeySchema(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestKeySchema(ctx, t, store)
}

// corruptObjectError returns the error etcd3 produces for an untransformable
// object (upstream builds &corruptObjectError{err: "bits flipped",
// errType: untransformable} directly; that type is unexported, so we obtain
// the identical value from etcd3's own transformer wrapper).
func corruptObjectError(t *testing.T) error {
	_, _, err := etcd3.WithCorruptObjErrorHandlingTransformer(bitsFlipped{}).
		TransformFromStorage(context.Background(), nil, value.DefaultContext(nil))
	if err == nil {
		t.Fatal("expected a corrupt object error")
	}
	return err
}

type bitsFlipped struct{ value.Transformer }

func (bitsFlipped) TransformFromStorage(context.Context, []byte, value.Context) ([]byte, bool, error) {
	return nil, false, fmt.Errorf("bits flipped")
}

func TestGetListWithErrorAggregation(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	ctx, s, _ := testSetup(t)
	store := etcd3.NewStoreWithUnsafeCorruptObjectDeletion(s, schema.GroupResource{Resource: "pods"})
	storagetesting.RunTestGetListWithErrorAggregation(ctx, t, &storeWithTransformerOverride{Interface: store, store: s}, corruptObjectError(t))
}

func TestGetListWithoutErrorAggregation(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, false)
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGetListWithoutErrorAggregation(ctx, t, &storeWithTransformerOverride{Interface: s, store: s}, corruptObjectError(t))
}

func TestGuaranteedUpdate(t *testing.T) {
	ctx, store, client := testSetup(t)
	storagetesting.RunTestGuaranteedUpdate(ctx, t, &storeWithPrefixTransformer{store}, checkStorageInvariants(client.Client, store.codec))
}

func TestGuaranteedUpdateWithTTL(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateWithTTL(ctx, t, store)
}

func TestGuaranteedUpdateChecksStoredData(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateChecksStoredData(ctx, t, &storeWithPrefixTransformer{store})
}

func TestGuaranteedUpdateWithConflict(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateWithConflict(ctx, t, store)
}

func TestGuaranteedUpdateWithSuggestionAndConflict(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict(ctx, t, store)
}

func TestTransformationFailure(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestTransformationFailure(ctx, t, &storeWithPrefixTransformer{store})
}

func TestList(t *testing.T) {
	for _, rangeStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("rangeStream=%v", rangeStream), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, rangeStream)
			resetFeatureSupportCheckerDuringTest(t)
			ctx, store, client := testSetup(t)
			kvRecorder := client.KV.(*storagetesting.KVRecorder)
			storagetesting.RunTestList(ctx, t, store, compactStorage(store, client.Client), false, client.Kubernetes.(*storagetesting.KubernetesRecorder))
			streamReads := kvRecorder.GetStreamReadsAndReset()
			if rangeStream && streamReads == 0 {
				t.Error("expected lists to be served by RangeStream")
			}
			if !rangeStream && streamReads > 0 {
				t.Errorf("expected no RangeStream requests with the feature disabled, got %d", streamReads)
			}
		})
	}
}

// TestGetListStreamMultiChunk is upstream's check of lists spanning several
// RangeStream chunks (etcd chunks streams at 10 keys); it only uses the
// store's public API and exercises the server's RangeStream.
func TestGetListStreamMultiChunk(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, true)
	resetFeatureSupportCheckerDuringTest(t)
	ctx, store, client := testSetup(t)
	kvRecorder := client.KV.(*storagetesting.KVRecorder)

	const podCount = 25
	for i := range podCount {
		pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("pod-%02d", i)}}
		if err := store.Create(ctx, fmt.Sprintf("/pods/ns/pod-%02d", i), pod, &example.Pod{}, 0); err != nil {
			t.Fatal(err)
		}
	}

	streamedList := func(t *testing.T, rv string, rvMatch metav1.ResourceVersionMatch) *example.PodList {
		t.Helper()
		out := &example.PodList{}
		opts := storage.ListOptions{ResourceVersion: rv, ResourceVersionMatch: rvMatch, Predicate: storage.Everything, Recursive: true}
		if err := store.GetList(ctx, "/pods/", opts, out); err != nil {
			t.Fatalf("GetList failed: %v", err)
		}
		if streams := kvRecorder.GetStreamReadsAndReset(); streams == 0 {
			t.Error("expected the list to be served by RangeStream")
		}
		if out.Continue != "" || out.RemainingItemCount != nil {
			t.Errorf("streamed list must not paginate, got continue %q, remainingItemCount %v", out.Continue, out.RemainingItemCount)
		}
		return out
	}

	snapshot := streamedList(t, "", "")
	if len(snapshot.Items) != podCount {
		t.Errorf("consistent list returned %d items, want %d", len(snapshot.Items), podCount)
	}

	extraPod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-extra"}}
	if err := store.Create(ctx, "/pods/ns/pod-extra", extraPod, &example.Pod{}, 0); err != nil {
		t.Fatal(err)
	}

	exact := streamedList(t, snapshot.ResourceVersion, metav1.ResourceVersionMatchExact)
	if len(exact.Items) != podCount {
		t.Errorf("exact list returned %d items, want %d", len(exact.Items), podCount)
	}
	if exact.ResourceVersion != snapshot.ResourceVersion {
		t.Errorf("exact list returned resourceVersion %s, want %s", exact.ResourceVersion, snapshot.ResourceVersion)
	}

	notOlder := streamedList(t, snapshot.ResourceVersion, "")
	if len(notOlder.Items) != podCount+1 {
		t.Errorf("notOlderThan list returned %d items, want %d", len(notOlder.Items), podCount+1)
	}
}

func TestConsistentList(t *testing.T) {
	for _, rangeStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("rangeStream=%v", rangeStream), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, rangeStream)
			resetFeatureSupportCheckerDuringTest(t)
			ctx, store, client := testSetup(t)
			storagetesting.RunTestConsistentList(ctx, t, store, increaseRVFunc(client.Client), false, true, false)
		})
	}
}

func TestCompactRevision(t *testing.T) {
	// The store must observe external changes to the compaction revision,
	// which needs the dedicated watch on the compact key that
	// ListFromCacheSnapshot enables.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	ctx, store, client := testSetup(t)
	storagetesting.RunTestCompactRevision(ctx, t, store, increaseRVFunc(client.Client), compactStorage(store, client.Client))
}

func TestListContinuation(t *testing.T) {
	ctx, store, client := testSetup(t)
	validation := checkStorageCallsInvariants(store.prefixTransformer(), client.KV.(*storagetesting.KVRecorder))
	storagetesting.RunTestListContinuation(ctx, t, store, validation)
}

func TestListPaginationRareObject(t *testing.T) {
	// ListFromCacheSnapshot adds a Get of the compact key, which the call
	// validation would count.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, false)
	ctx, store, client := testSetup(t)
	validation := checkStorageCallsInvariants(store.prefixTransformer(), client.KV.(*storagetesting.KVRecorder))
	storagetesting.RunTestListPaginationRareObject(ctx, t, store, validation)
}

func TestListContinuationWithFilter(t *testing.T) {
	ctx, store, client := testSetup(t)
	validation := checkStorageCallsInvariants(store.prefixTransformer(), client.KV.(*storagetesting.KVRecorder))
	storagetesting.RunTestListContinuationWithFilter(ctx, t, store, validation)
}

func TestNamespaceScopedList(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestNamespaceScopedList(ctx, t, store)
}

func TestListInconsistentContinuation(t *testing.T) {
	ctx, store, client := testSetup(t)
	storagetesting.RunTestListInconsistentContinuation(ctx, t, store, compactStorage(store, client.Client))
}

func TestListResourceVersionMatch(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestListResourceVersionMatch(ctx, t, &storeWithPrefixTransformer{store})
}

func TestStats(t *testing.T) {
	for _, sizeBasedListCostEstimate := range []bool{true, false} {
		t.Run(fmt.Sprintf("SizeBasedListCostEstimate=%v", sizeBasedListCostEstimate), func(t *testing.T) {
			ctx, store, _ := testSetup(t)
			if sizeBasedListCostEstimate {
				if err := store.EnableResourceSizeEstimation(store.getKeys); err != nil {
					t.Fatal(err)
				}
			}
			storagetesting.RunTestStats(ctx, t, store, store.codec, store.transformer, sizeBasedListCostEstimate)
		})
	}
}

// TestGetCurrentResourceVersion is upstream's check that the store's current
// resource version is the server's revision, also after unrelated writes.
func TestGetCurrentResourceVersion(t *testing.T) {
	ctx, store, client := testSetup(t)
	versioner := storage.APIObjectVersioner{}

	pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-1"}}
	created := &example.Pod{}
	require.NoError(t, store.Create(ctx, "/pods/ns/pod-1", pod, created, 0))
	currentStorageRV, err := store.GetCurrentResourceVersion(ctx)
	require.NoError(t, err)
	podRV, err := versioner.ParseResourceVersion(created.ResourceVersion)
	require.NoError(t, err)
	require.Equal(t, currentStorageRV, podRV, "expected the global etcd RV to be equal to pod's RV")

	resp, err := client.KV.Put(ctx, "compact_rev_key", created.ResourceVersion)
	require.NoError(t, err)
	currentStorageRV, err = store.GetCurrentResourceVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, currentStorageRV, uint64(resp.Header.Revision), "expected the global etcd RV to be equal to the unrelated write's RV")

	current := &example.Pod{}
	require.NoError(t, store.Get(ctx, "/pods/ns/pod-1", storage.GetOptions{}, current))
	currentPodRV, err := versioner.ParseResourceVersion(current.ResourceVersion)
	require.NoError(t, err)
	require.Equal(t, currentPodRV, podRV, "didn't expect to see the pod's RV changed")
}

// TestPrefixStats is upstream's check that Stats counts only the resource's
// keys (server-side count over a prefix that must not match "/podskey").
func TestPrefixStats(t *testing.T) {
	tcs := []struct {
		name        string
		estimate    bool
		expectStats storage.Stats
	}{
		{name: "Estimate=false", expectStats: storage.Stats{ObjectCount: 1}},
		{name: "Estimate=true", estimate: true, expectStats: storage.Stats{ObjectCount: 1, EstimatedAverageObjectSizeBytes: 3}},
	}
	for _, tc := range tcs {
		t.Run(tc.name, func(t *testing.T) {
			ctx, store, c := testSetup(t, withPrefix("/registry"), withResourcePrefix("/pods/"))
			if tc.estimate {
				if err := store.EnableResourceSizeEstimation(store.getKeys); err != nil {
					t.Fatal(err)
				}
			}
			for key, val := range map[string]string{"key": "a", "/registry/key": "ab", "/registry/pods/key": "abc", "/registry/podskey": "abcd"} {
				if _, err := c.KV.Put(ctx, key, val); err != nil {
					t.Fatal(err)
				}
			}
			// Decoding fails on purpose; the list only feeds the size estimator.
			_ = store.GetList(ctx, "/pods/", storage.ListOptions{Predicate: storage.Everything, Recursive: true}, &example.PodList{})
			gotStats, err := store.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.expectStats, gotStats); diff != "" {
				t.Errorf("Stats diff:\n%s", diff)
			}
		})
	}
}
