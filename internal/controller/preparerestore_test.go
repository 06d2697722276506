package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/topology"
	"example.com/cache-operator/internal/valkey"
)

// While a restore holds Ready False, a pass whose pods are all up (Ready True before the gate)
// writes nothing new: Ready keeps the time it went False.
func TestARestoreHoldsReadyFalseWithoutANewTransitionEachPass(t *testing.T) {
	cache := &cachev2.Cache{}
	long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	checking := restoreCondition(cache, cachev2.ReasonRestoring, "checking")
	stored := []metav1.Condition{
		{Type: cachev2.ConditionReady, Status: metav1.ConditionFalse, Reason: cachev2.ReasonRestoring, Message: "checking", LastTransitionTime: long},
		{Type: cachev2.ConditionRestored, Status: metav1.ConditionFalse, Reason: cachev2.ReasonRestoring, Message: "checking", LastTransitionTime: long},
	}
	status := cachev2.CacheStatus{Conditions: []metav1.Condition{stored[0], stored[1]}}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: cachev2.ConditionReady, Status: metav1.ConditionTrue, Reason: cachev2.ReasonAllReplicasReady})
	withRestore(&status, stored, checking)
	ready := meta.FindStatusCondition(status.Conditions, cachev2.ConditionReady)
	if ready.Status != metav1.ConditionFalse || ready.Reason != cachev2.ReasonRestoring || !ready.LastTransitionTime.Equal(&long) {
		t.Errorf("Ready is %+v, want False %s since %v", ready, cachev2.ReasonRestoring, long)
	}

	verified := restoreCondition(cache, cachev2.ReasonRestoreVerified, "done")
	withRestore(&status, stored, verified)
	if !meta.IsStatusConditionTrue(status.Conditions, cachev2.ConditionRestored) {
		t.Errorf("Restored is %+v, want True", meta.FindStatusCondition(status.Conditions, cachev2.ConditionRestored))
	}
}

// A Cache deleted and made again at once, restoring from another backup, finds the earlier
// Cache's restore record, which the garbage collector has not removed yet: it is not taken as
// this Cache's. It is removed, the Cache waits, and its own record names its own backup.
func TestARestoreRecordOfAnEarlierCacheOfTheSameNameIsNotTaken(t *testing.T) {
	ctx := context.Background()
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "the-new-one"},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: "8.1.1",
			RestoreFrom: &cachev2.RestoreSource{Backup: "tuesday"}}}
	earlier := cache.DeepCopy()
	earlier.UID, earlier.Spec.RestoreFrom.Backup = "the-earlier-one", "monday"
	stale := resources.RestoreConfigMap(earlier, backup.RestorePlan{Path: "shop/orders/monday"})
	stale.Data[restoreRecordKey] = `{"backup":"monday","keys":[3]}`
	if err := controllerutil.SetControllerReference(earlier, stale, NewScheme()); err != nil {
		t.Fatal(err)
	}
	tuesday := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tuesday"},
		Spec: cachev1alpha1.CacheBackupSpec{CacheName: "orders", Storage: cachev1alpha1.BucketLocation{Endpoint: "s3:9000", Bucket: "caches", CredentialsSecret: "creds"}},
		Status: cachev1alpha1.CacheBackupStatus{Phase: cachev1alpha1.BackupCompleted, CacheMode: string(cachev2.ModeStandalone), ValkeyVersion: "8.1.1",
			Shards: []cachev1alpha1.BackupShard{{Name: "shard-0", Source: "orders-0", Object: "shop/orders/tuesday/shard-0.rdb", Keys: 5}}}}
	c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(cache, stale, tuesday).Build()
	r := &CacheReconciler{Client: c, APIReader: c, Images: resources.Images{Agent: "example.com/cache-operator:test"}}

	rs, err := r.prepareRestore(ctx, cache)
	if err != nil {
		t.Fatal(err)
	}
	if rs.waiting == nil || !strings.Contains(rs.waiting.Message, "earlier Cache") || rs.initContainer != nil {
		t.Fatalf("with the earlier Cache's record: %+v, want waiting for it to be removed", rs)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stale), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the earlier Cache's record is still there: %v", err)
	}
	if rs, err = r.prepareRestore(ctx, cache); err != nil || rs.initContainer == nil || rs.record.Backup != "tuesday" || !slices.Equal(rs.record.Keys, []int64{5}) {
		t.Fatalf("the next pass: %+v, %v; want the restore of tuesday", rs, err)
	}
}

// A backup whose data took more memory than the Cache's nodes may hold is refused, with the
// memory to ask for: the nodes would evict keys as they load it. One that fits, or made before
// the memory was recorded, is not.
func TestARestoreIntoLessMemoryThanTheDataTookIsRefused(t *testing.T) {
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 2, Version: "8.1.1", Memory: resource.MustParse("64Mi")}}
	backup := func(memory ...int64) *cachev1alpha1.CacheBackup {
		b := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tuesday"},
			Status: cachev1alpha1.CacheBackupStatus{Phase: cachev1alpha1.BackupCompleted, CacheMode: string(cachev2.ModeStandalone), ValkeyVersion: "8.1.1"}}
		for i, m := range memory {
			b.Status.Shards = append(b.Status.Shards, cachev1alpha1.BackupShard{Name: fmt.Sprint("shard-", i), Object: "o", Memory: m})
		}
		return b
	}
	if why := unfit(cache, backup(10<<20, 60<<20)); !strings.Contains(why, "shard-1") || !strings.Contains(why, "at least 88Mi") {
		t.Errorf("a shard of 60 MiB into nodes of 64Mi (maxmemory 42 MiB): %q, want it refused, asking for 88Mi", why)
	}
	if why := unfit(cache, backup(40<<20, 42<<20)); why != "" {
		t.Errorf("shards that fit: %q", why)
	}
	if why := unfit(cache, backup(0, 0)); why != "" {
		t.Errorf("a backup from before the memory was recorded: %q", why)
	}
}

// A restored shard is checked on the server that holds it now: in a Cluster the primary of its
// slots, which is the replica that took over when the node that took the shard restarted empty
// after the replica synced; in Standalone the node that took it; in a Replicated Cache its
// primary, wherever it is now.
func TestARestoredShardIsCheckedWhereItIsServedNow(t *testing.T) {
	record := restoreRecord{Backup: "tuesday", Keys: []int64{5, 7}, Slots: []string{"0-8191", "8192-16383"}}
	member := func(pod string, slots ...valkey.SlotRange) clusterMember {
		return clusterMember{Member: topology.Member{Pod: pod, Nodes: []valkey.ClusterNode{{ID: "id-" + pod, Myself: true, Primary: len(slots) > 0, Slots: slots}}}}
	}
	// orders-0 restarted empty; its replica orders-2 took over shard-0's slots.
	members := []clusterMember{member("orders-0"), member("orders-1", valkey.SlotRange{Start: 8192, End: 16383}),
		member("orders-2", valkey.SlotRange{Start: 0, End: 8191}), member("orders-3")}
	cluster := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 2}}
	for i, want := range []string{"orders-2", "orders-1"} {
		if got, err := shardHolder(cluster, record, members, "", i); err != nil || got != want {
			t.Errorf("shard-%d of a Cluster is held by %q (%v), want %s", i, got, err, want)
		}
	}
	standalone := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 2}}
	if got, err := shardHolder(standalone, restoreRecord{Keys: []int64{5, 7}}, nil, "", 1); err != nil || got != "orders-1" {
		t.Errorf("shard-1 of a Standalone Cache is held by %q (%v), want orders-1", got, err)
	}
	replicated := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeReplicated, Shards: 1}}
	if got, err := shardHolder(replicated, restoreRecord{Keys: []int64{5}}, nil, "orders-2", 0); err != nil || got != "orders-2" {
		t.Errorf("the shard of a Replicated Cache whose primary is orders-2 is held by %q (%v), want orders-2", got, err)
	}
}

// A backup restores into a Cache of its own mode, and a backup of one shard from a Standalone
// or a Replicated Cache into either: the RDB of a server that holds every key in database 0 loads
// into both. A Cluster's, whose keys belong to slots, and a Standalone Cache's of several nodes,
// whose keys are spread over them, do not cross.
func TestABackupOfOneShardCrossesBetweenStandaloneAndReplicated(t *testing.T) {
	for _, tc := range []struct {
		from, to cachev2.Mode
		shards   int32
		fits     bool
	}{
		{cachev2.ModeReplicated, cachev2.ModeReplicated, 1, true},
		{cachev2.ModeReplicated, cachev2.ModeStandalone, 1, true},
		{cachev2.ModeStandalone, cachev2.ModeReplicated, 1, true},
		{cachev2.ModeStandalone, cachev2.ModeReplicated, 3, false},
		{cachev2.ModeCluster, cachev2.ModeReplicated, 1, false},
		{cachev2.ModeReplicated, cachev2.ModeCluster, 1, false},
		{cachev2.ModeCluster, cachev2.ModeStandalone, 1, false},
		{"", cachev2.ModeReplicated, 1, false},
	} {
		cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
			Spec: cachev2.CacheSpec{Mode: tc.to, Shards: 1, Version: "9.1.2", Memory: resource.MustParse("256Mi")}}
		b := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "tuesday"},
			Status: cachev1alpha1.CacheBackupStatus{Phase: cachev1alpha1.BackupCompleted, CacheMode: string(tc.from), ValkeyVersion: "9.1.2"}}
		for i := range tc.shards {
			b.Status.Shards = append(b.Status.Shards, cachev1alpha1.BackupShard{Name: fmt.Sprint("shard-", i), Object: "o", Keys: 3})
		}
		why := unfit(cache, b)
		if tc.fits != (why == "") || !tc.fits && !strings.Contains(why, "a Standalone or Replicated Cache, which take each other's") {
			t.Errorf("a %s backup of %d shards into a %s Cache: %q; want fits=%t, and the modes that do fit if not", tc.from, tc.shards, tc.to, why, tc.fits)
		}
	}
}

// A restored shard is whole when its server holds the backup's keys, or loaded them all and
// evicted none since (keys with a TTL expire); a server that evicted keys never is, whatever it
// loaded, nor one that holds fewer and loaded fewer (a node that restarted empty).
func TestARestoredShardIsWholeOnlyWithNoKeyEvictedOrMissing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   valkey.Dataset
		loaded int64
		whole  bool
	}{
		{"every key held", valkey.Dataset{Keys: 100}, 100, true},
		{"every key loaded, some expired since", valkey.Dataset{Keys: 90}, 100, true},
		{"every key held by a replica that took over", valkey.Dataset{Keys: 100}, 100, true},
		{"every key loaded, some evicted", valkey.Dataset{Keys: 90, Evicted: 10}, 100, false},
		{"restarted empty", valkey.Dataset{}, 0, false},
		{"fewer held than the backup, fewer loaded", valkey.Dataset{Keys: 60}, 60, false},
	} {
		if why := notWhole(tc.held, tc.loaded, 100); (why == "") != tc.whole {
			t.Errorf("%s: %q, want whole %v", tc.name, why, tc.whole)
		}
	}
}
