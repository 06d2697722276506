//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "example.com/cache-operator/api/v1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/test/harness/testenv"
)

// The upgrade rehearsal from API v1, as docs/upgrade.md tells a user to upgrade: the release
// "v1" of hack/previous-release, the last before API v2, built from this repository's history, runs
// Caches through v1; then the CRDs and RBAC are upgraded, then the operator, then the storage.
// Every Cache must reconcile under the new operator without one cache pod restarted and without
// one StatefulSet written, a Cache left Terminating by a catalogue that is down must finish once
// the catalogue is back, v1 clients must still read and write the Caches, v2 Cluster Caches can
// be made, and after the storage migration etcd holds every Cache as v2.
func TestUpgradeFromTheLastV1ReleaseRestartsNoPod(t *testing.T) {
	ctx := context.Background()
	commit, previous, source := buildPreviousRelease(t, "v1")
	// The CRD of the previous release cannot replace one that has stored v2 objects, so the
	// rehearsal starts from a cluster without Caches, as on the day of the first install.
	if err := cluster.Kubectl(ctx, "delete", "customresourcedefinition", "caches.cache.example.com", "--timeout=60s"); err != nil {
		t.Fatalf("removing the current CRD (are Caches of earlier tests left with finalizers?): %v", err)
	}
	if err := cluster.InstallOperatorAccess(ctx, source); err != nil {
		t.Fatalf("installing the CRDs and RBAC of %s: %v", commit, err)
	}

	etcd := testenv.StartEtcd(t)
	old := startOperatorBinary(t, previous, "previous", etcd.Endpoint)
	ns := newNamespace(t)
	live := []string{"orders-cache", "sessions-cache", "pages-cache"}
	// live[0], read back through v1 below, has three nodes; the others, there to be kept or
	// deleted across the upgrade, one each.
	for _, name := range append(live, "leaving-cache") {
		replicas := int32(1)
		if name == live[0] {
			replicas = 3
		}
		newV1Cache(t, ns, name, replicas)
	}
	waitSettledV1(t, ns)
	etcd.Stop(t)
	leaving := &cachev1.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leaving-cache"}}
	if err := admin.Delete(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	before := upgradeSnapshot(t, ns, live)
	versionAtUpgrade := resourceVersions(t, ns)

	// CRDs and RBAC first, then the operator.
	installCurrent(t)
	old.Stop(t, syscall.SIGTERM)
	current := startOperator(t, "current", etcd.Endpoint, clusterCheckInterval)
	t.Cleanup(func() { deleteAllCaches(t, ns) }) // while the current operator runs
	waitLeader(t, current)
	// With the catalogue down every pass fails at registration, after the children are
	// ensured; once it is back, the live Caches' passes succeed and the Terminating one finishes.
	etcd.Start(t)
	waitReconciled(t, current, len(live))
	testenv.WaitFor(t, time.Minute, "the Terminating Cache to finish once the catalogue is back", func() (bool, string) {
		_, err := getCache(t, client.ObjectKeyFromObject(leaving))
		return isNotFound(err), fmt.Sprint(err)
	})
	for _, name := range live {
		c, err := getCache(t, client.ObjectKey{Namespace: ns, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := settled(c); !ok {
			t.Errorf("after the upgrade %s", why)
		}
	}
	after := upgradeSnapshot(t, ns, live)
	for what, was := range before {
		if now := after[what]; now != was {
			t.Errorf("the upgrade changed %s:\nbefore %s\nafter  %s", what, was, now)
		}
	}
	if len(after) != len(before) {
		t.Errorf("the upgrade changed the set of pods and StatefulSets: %v → %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}

	// A v1 client reads the Cache it made as it was, and scales it.
	var v1 cachev1.Cache
	key := client.ObjectKey{Namespace: ns, Name: live[0]}
	if err := admin.Get(ctx, key, &v1); err != nil {
		t.Fatalf("reading through v1 after the upgrade: %v", err)
	}
	if _, extra := v1.Annotations[cachev1.AnnotationV2Fields]; v1.Spec.Replicas != 3 || extra {
		t.Errorf("through v1 the Cache reads as %+v with annotations %v; want it as it was made", v1.Spec, v1.Annotations)
	}
	v1.Spec.Replicas = 4
	if err := admin.Update(ctx, &v1); err != nil {
		t.Fatalf("scaling through v1 after the upgrade: %v", err)
	}
	waitSettled(t, ns, 2*time.Minute)
	if c, err := getCache(t, key); err != nil || c.Spec.Mode != cachev2.ModeStandalone || c.Spec.Shards != 4 {
		t.Errorf("after scaling to 4 through v1, v2 reads %+v, %v; want Standalone with 4 shards", c.Spec, err)
	}

	// The new API's Cluster mode works on the upgraded cluster.
	waitReadyAs(t, newClusterCache(t, ns, "cluster-cache", 1, 0), metav1.ConditionTrue, cachev2.ReasonClusterReady, 2*time.Minute)

	// Last, the storage: every Cache rewritten as v2, and v1 struck from the stored versions.
	// Before, a Cache that no one wrote since the upgrade is still stored as v1. (The operator
	// writes a Cache's status when this release's pod template differs from the one its pods
	// run, PodTemplateCurrent=False, so which ones are left depends on the two releases.)
	stored := storedVersions(t, ns)
	var storedAsV1 []string
	for name, version := range resourceVersions(t, ns) {
		key := "/registry/cache.example.com/caches/" + ns + "/" + name
		if stored[key] == cachev1.GroupVersion.String() {
			storedAsV1 = append(storedAsV1, name)
		}
		if versionAtUpgrade[name] == version && stored[key] != cachev1.GroupVersion.String() {
			t.Errorf("before the migration etcd holds %s, unwritten since the upgrade, as %s; want v1", name, stored[key])
		}
	}
	t.Logf("before the migration, stored as v1: %v", storedAsV1)
	migrate := exec.CommandContext(ctx, filepath.Join(testenv.Root(), "hack", "migrate-storage.sh"))
	migrate.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig(), "KUBECTL="+filepath.Join(testenv.BinDir(), "kubectl"))
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("hack/migrate-storage.sh: %v\n%s", err, out)
	}
	storedVersionsOfCRD, err := cluster.KubectlOutput(ctx, "get", "crd", "caches.cache.example.com", "-o", "jsonpath={.status.storedVersions}")
	if err != nil || storedVersionsOfCRD != `["v2"]` {
		t.Errorf("after the migration the CRD lists stored versions %s, %v; want only v2", storedVersionsOfCRD, err)
	}
	for key, apiVersion := range storedVersions(t, ns) {
		if apiVersion != cachev2.GroupVersion.String() {
			t.Errorf("after the migration etcd holds %s as %s", key, apiVersion)
		}
	}
}

// The upgrade rehearsal from the latest release, whose API is this one's: a Valkey Cluster that
// it formed keeps every pod (UIDs and run_ids) and every key through the upgrade of the CRDs,
// RBAC and operator; the new operator takes the cluster's pod restarts over (its StatefulSet now
// updates on delete), and the new release's operations work on it.
func TestUpgradeFromTheLatestReleaseKeepsClustersRunning(t *testing.T) {
	ctx := context.Background()
	commit, previous, source := buildPreviousRelease(t, "latest")
	if err := cluster.InstallOperatorAccess(ctx, source); err != nil {
		t.Fatalf("installing the CRDs and RBAC of %s: %v", commit, err)
	}
	old := startOperatorWithWebhook(t, previous, "previous", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newClusterCache(t, ns, "sessions", 3, 1)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	const keys = 5000
	writeKeys(t, key, keys)
	before := upgradeSnapshot(t, ns, []string{key.Name})

	installCurrent(t)
	old.Stop(t, syscall.SIGTERM)
	current := startOperator(t, "current", "", clusterCheckInterval)
	waitLeader(t, current)
	testenv.WaitFor(t, time.Minute, "the current operator to take the StatefulSet's restarts over", func() (bool, string) {
		var sts appsv1.StatefulSet
		if err := admin.Get(ctx, key, &sts); err != nil {
			return false, err.Error()
		}
		return sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType, string(sts.Spec.UpdateStrategy.Type)
	})
	// The Ready condition is the previous operator's until the current one has made a pass of
	// its own: its verdict, and the pods as they are after it, are what the snapshot compares.
	waitReconciled(t, current, 1)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
	after := upgradeSnapshot(t, ns, []string{key.Name})
	for what, was := range before {
		// The StatefulSet is written once, for its update strategy; its pod template is not.
		if now := after[what]; now != was && !strings.HasPrefix(what, "StatefulSet ") {
			t.Errorf("the upgrade changed %s:\nbefore %s\nafter  %s", what, was, now)
		}
	}
	assertKeysRead(t, key, keys)

	patchCache(t, key, `{"spec":{"shards":4}}`)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	assertShape(t, key, 4, 1)
	assertKeysRead(t, key, keys)
}

// waitReconciled waits until the operator has made at least n successful passes, over any
// Caches: its metrics do not tell them apart. A pass that asks to look again later (every
// Cluster Cache's does, Valkey sending no events) succeeded too.
func waitReconciled(t *testing.T, o *testenv.Operator, n int) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("operator %s to make %d successful reconciles", o.Name, n), func() (bool, string) {
		families := o.Metrics(t)
		done := 0.0
		for _, result := range []string{"success", "requeue_after"} {
			done += testenv.Sum(families, "controller_runtime_reconcile_total",
				map[string]string{"controller": controller.ControllerName, "result": result})
		}
		return done >= float64(n), fmt.Sprintf("%v successful reconciles", done)
	})
}

// buildPreviousRelease builds the operator of the release of that name in hack/previous-release
// from this repository's history (once a run: builtRelease), and returns its commit, its binary
// and its source tree. Whatever the rehearsal does, the tests after it get this checkout's CRDs
// and RBAC back.
func buildPreviousRelease(t *testing.T, name string) (commit, binary, source string) {
	t.Helper()
	r, err := builtRelease(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { installCurrent(t) })
	return r.commit, r.binary, r.source
}

// release is a previous release built from this repository's history.
type release struct{ commit, binary, source string }

// builtReleases holds, by name, the build of each previous release that a test of the run asked
// for: the rehearsals that start from the same release share it.
var builtReleases sync.Map // name → func() (release, error)

// builtRelease builds the previous release of that name the first time it is asked for.
func builtRelease(name string) (release, error) {
	build, _ := builtReleases.LoadOrStore(name, sync.OnceValues(func() (release, error) {
		commit, err := testenv.PreviousRelease(name)
		if err != nil {
			return release{}, err
		}
		binary, source, err := testenv.BuildRelease(context.Background(), commit, filepath.Join(workdir, "release-"+name))
		return release{commit, binary, source}, err
	}))
	return build.(func() (release, error))()
}

// installCurrent installs this checkout's CRDs and RBAC, with the conversion webhook at the
// e2e operators' balancer.
func installCurrent(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.InstallOperatorAccess(ctx, testenv.Root()); err != nil {
		t.Fatalf("installing the current CRDs and RBAC: %v", err)
	}
	if err := cluster.ServeWebhooksAt(ctx, testenv.Root(), webhooks.Port()); err != nil {
		t.Fatal(err)
	}
}

// newV1Cache creates a Cache of the given nodes through v1, as a client of the previous release.
func newV1Cache(t *testing.T, namespace, name string, replicas int32) {
	t.Helper()
	c := &cachev1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       cachev1.CacheSpec{Replicas: replicas, Version: valkeyVersion, Memory: resource.MustParse("64Mi")},
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// waitSettledV1 is waitSettled through v1, for a cluster that serves only v1.
func waitSettledV1(t *testing.T, namespace string) {
	t.Helper()
	testenv.WaitFor(t, 2*time.Minute, "every Cache in "+namespace+" to be Ready", func() (bool, string) {
		var list cachev1.CacheList
		if err := admin.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		for _, c := range list.Items {
			ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
			if ready == nil || ready.Status != metav1.ConditionTrue || c.Status.ObservedGeneration != c.Generation {
				return false, fmt.Sprintf("%s: %+v", c.Name, c.Status)
			}
		}
		return true, ""
	})
}

// storedVersions is the API version each Cache of the namespace is stored as, by etcd key: what
// the local cluster's own etcd holds, not what the API server serves.
func storedVersions(t *testing.T, namespace string) map[string]string {
	t.Helper()
	prefix := "/registry/cache.example.com/caches/" + namespace + "/"
	endpoint, err := cluster.EtcdEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	versions := map[string]string{}
	for key, value := range testenv.KeyValues(t, c, prefix) {
		var stored metav1.TypeMeta
		if err := json.Unmarshal([]byte(value), &stored); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		versions[key] = stored.APIVersion
	}
	if len(versions) == 0 {
		t.Fatalf("etcd holds nothing under %s", prefix)
	}
	return versions
}

// resourceVersions are the resource versions of the namespace's Caches, by name: a Cache's
// changes with every write to it. They are read through v1, which the releases before and after
// the upgrade both serve.
func resourceVersions(t *testing.T, namespace string) map[string]string {
	t.Helper()
	var list cachev1.CacheList
	if err := admin.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, c := range list.Items {
		versions[c.Name] = c.ResourceVersion
	}
	return versions
}

// upgradeSnapshot records what an upgrade must leave alone: each pod of the Caches (its UID and
// its server's run_id, both new when it restarts) and each StatefulSet's writes to its spec and
// metadata (the managed fields of the main resource, whose times move on any write).
func upgradeSnapshot(t *testing.T, namespace string, caches []string) map[string]string {
	t.Helper()
	snapshot := map[string]string{}
	for _, name := range caches {
		key := client.ObjectKey{Namespace: namespace, Name: name}
		for _, pod := range cachePods(t, key) {
			snapshot["pod "+pod.Name] = fmt.Sprintf("uid %s, run_id %s", pod.UID, testenv.ValkeyInfo(t, node(t, &pod), "server", "run_id"))
		}
		var sts appsv1.StatefulSet
		if err := admin.Get(context.Background(), key, &sts); err != nil {
			t.Fatal(err)
		}
		var writes []metav1.ManagedFieldsEntry
		for _, e := range sts.ManagedFields {
			if e.Subresource == "" {
				writes = append(writes, e)
			}
		}
		b, err := json.Marshal(writes)
		if err != nil {
			t.Fatal(err)
		}
		snapshot["StatefulSet "+name] = fmt.Sprintf("generation %d, writes %s", sts.Generation, b)
	}
	return snapshot
}
