//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "example.com/cache-operator/api/v1"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/internal/testenv"
)

// The upgrade rehearsal: the previous release (hack/previous-release), built from this
// repository's history, runs Caches; then the CRDs and RBAC are upgraded, and then the operator.
// Every Cache must reconcile under the new operator without one cache pod restarted and without
// one StatefulSet written, a Cache left Terminating by a catalogue that is down must finish once
// the catalogue is back, and the upgraded Caches must take changes.
func TestUpgradeFromThePreviousReleaseRestartsNoPod(t *testing.T) {
	ctx := context.Background()
	commit, err := testenv.PreviousRelease()
	if err != nil {
		t.Fatal(err)
	}
	previous, source, err := testenv.BuildRelease(ctx, commit, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens, the tests after this one get this checkout's CRDs and RBAC back.
	t.Cleanup(func() {
		if err := cluster.InstallOperatorAccess(ctx, testenv.Root()); err != nil {
			t.Errorf("reinstalling the current CRDs and RBAC: %v", err)
		}
	})
	if err := cluster.InstallOperatorAccess(ctx, source); err != nil {
		t.Fatalf("installing the CRDs and RBAC of %s: %v", commit, err)
	}

	etcd := testenv.StartEtcd(t)
	old := startOperatorBinary(t, previous, "previous", etcd.Endpoint)
	ns := newNamespace(t)
	live := []string{"orders-cache", "sessions-cache", "pages-cache"}
	for _, name := range append(live, "leaving-cache") {
		newCache(t, ns, name)
	}
	waitSettled(t, ns, 2*time.Minute)
	etcd.Stop(t)
	leaving := &cachev1.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leaving-cache"}}
	if err := admin.Delete(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	before := upgradeSnapshot(t, ns, live)

	// CRDs and RBAC first, then the operator.
	if err := cluster.InstallOperatorAccess(ctx, testenv.Root()); err != nil {
		t.Fatal(err)
	}
	old.Stop(t, syscall.SIGTERM)
	current := startOperatorBinary(t, operatorBinary, "current", etcd.Endpoint)
	t.Cleanup(func() { deleteAllCaches(t, ns) }) // while the current operator runs
	waitLeader(t, current)
	// With the catalogue down every pass fails at registration, after the children are
	// ensured; once it is back, the live Caches' passes succeed and the Terminating one finishes.
	etcd.Start(t)
	testenv.WaitFor(t, time.Minute, "the current operator to reconcile every live Cache", func() (bool, string) {
		n := testenv.Sum(current.Metrics(t), "controller_runtime_reconcile_total",
			map[string]string{"controller": controller.ControllerName, "result": "success"})
		return n >= float64(len(live)), fmt.Sprintf("%v successful reconciles", n)
	})
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

	patchCache(t, client.ObjectKey{Namespace: ns, Name: live[0]}, `{"spec":{"replicas":4}}`)
	waitSettled(t, ns, 2*time.Minute)
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
