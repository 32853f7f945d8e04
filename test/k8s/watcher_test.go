package k8s

// TestWatch is TestWatch of k8s.io/apiserver v0.37.2
// pkg/storage/etcd3/watcher_test.go (Copyright The Kubernetes Authors, Apache
// License 2.0) with every subtest, against kite. Where upstream starts its etcd
// with WatchProgressNotifyInterval = 1s, kite gets
// --watch-progress-notify-interval 1s.

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/features"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

func TestWatch(t *testing.T) {
	t.Run("Watch", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatch(ctx, t, store)
	})
	t.Run("ClusterScopedWatch", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestClusterScopedWatch(ctx, t, store)
	})
	t.Run("NamespaceScopedWatch", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestNamespaceScopedWatch(ctx, t, store)
	})
	t.Run("DeleteTriggerWatch", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestDeleteTriggerWatch(ctx, t, store)
	})
	t.Run("WatchFromZero", func(t *testing.T) {
		ctx, store, client := testSetup(t)
		storagetesting.RunTestWatchFromZero(ctx, t, store, compactStorage(store, client.Client))
	})
	t.Run("WatchFromNonZero", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchFromNonZero(ctx, t, store)
	})
	t.Run("DelayedWatchDelivery", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestDelayedWatchDelivery(ctx, t, store)
	})
	t.Run("WatchError", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchError(ctx, t, &storeWithPrefixTransformer{store})
	})
	t.Run("WatchContextCancel", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchContextCancel(ctx, t, store)
	})
	t.Run("WatcherTimeout", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatcherTimeout(ctx, t, store)
	})
	t.Run("WatchDeleteEventObjectHaveLatestRV", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV(ctx, t, store)
	})
	t.Run("WatchInitializationSignal", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchInitializationSignal(ctx, t, store)
	})
	t.Run("ProgressNotify", func(t *testing.T) {
		ctx, store, client := testSetup(t, withProgressNotifyInterval(time.Second))
		storagetesting.RunOptionalTestProgressNotify(ctx, t, store, increaseRVFunc(client.Client))
	})
	t.Run("WatchWithUnsafeDelete", func(t *testing.T) {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchWithUnsafeDelete(ctx, t, &storeWithTransformerOverride{Interface: store, store: store}, corruptObjectError(t))
	})
	t.Run("WatchDispatchBookmarkEvents", func(t *testing.T) {
		ctx, store, _ := testSetup(t, withProgressNotifyInterval(time.Second))
		storagetesting.RunTestWatchDispatchBookmarkEvents(ctx, t, store, false)
	})
	t.Run("SendInitialEventsBackwardCompatibility", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunSendInitialEventsBackwardCompatibility(ctx, t, store)
	})
	for _, rangeStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("RangeStream=%v", rangeStream), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, rangeStream)
			t.Run("WatchSemantics", func(t *testing.T) {
				ctx, store, _ := testSetup(t)
				storagetesting.RunWatchSemantics(ctx, t, store)
			})
			t.Run("WatchSemanticsWithConcurrentDecode", func(t *testing.T) {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ConcurrentWatchObjectDecode, true)
				ctx, store, _ := testSetup(t)
				storagetesting.RunWatchSemantics(ctx, t, store)
			})
			t.Run("WatchSemanticInitialEventsExtended", func(t *testing.T) {
				ctx, store, _ := testSetup(t)
				storagetesting.RunWatchSemanticInitialEventsExtended(ctx, t, store)
			})
			t.Run("WatchListMatchSingle", func(t *testing.T) {
				ctx, store, _ := testSetup(t)
				storagetesting.RunWatchListMatchSingle(ctx, t, store)
			})
		})
	}
	t.Run("WatchErrorEventIsBlockingFurtherEvent", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunWatchErrorIsBlockingFurtherEvents(ctx, t, &storeWithPrefixTransformer{store})
	})
}
