//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
)

// Every other scenario runs the newest release; on each older one of the toolchain (8.0, 8.1), a
// Cluster with a replica per shard goes through the day's operations in turn, with every key kept:
// it forms, heals a primary whose server is killed, hands a deleted primary's pod over, and is
// backed up (in the release's own format) and restored from it: the oldest release's backup into
// the newest release, which is how a Standalone Cache, whose nodes come back empty from an upgrade
// in place, goes up a release with its keys; the others' into their own, which must read their own
// format. It also scales out to four shards and back in to three, key by key: 8.x has no atomic
// slot migration.
func TestEachOlderReleaseFormsHealsAndIsRestored(t *testing.T) {
	t.Parallel() // and each release beside the others, with a scope of its own
	for i, release := range valkeys[:len(valkeys)-1] {
		t.Run(release.Version, func(t *testing.T) {
			runBesideFirst(t, 1)
			startOperator(t, "a", "", clusterCheckInterval)
			ns := newNamespace(t)
			store := newBackupStore(t, ns)
			key := newClusterCacheOf(t, ns, "tour", 3, 1, release.Version)
			waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			const keys = 2000
			writeKeys(t, key, keys)
			for pod, version := range serverVersions(t, key) {
				if version != release.Version {
					t.Fatalf("%s runs Valkey %s, want %s", pod, version, release.Version)
				}
			}

			c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
			primaryPod, primary := podOfRole(t, c, cachev2.RolePrimary)
			if err := crashServer(ns, primaryPod.Name); err != nil {
				t.Fatal(err)
			}
			waitNewReplicaOn(t, key, primaryPod.Name, primary.ID, 6)
			assertKeysRead(t, key, keys)

			c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
			primaryPod, primary = podOfRole(t, c, cachev2.RolePrimary)
			if err := admin.Delete(context.Background(), primaryPod); err != nil {
				t.Fatal(err)
			}
			waitNewReplicaOn(t, key, primaryPod.Name, primary.ID, 6)
			assertKeysRead(t, key, keys)
			assertShape(t, key, 3, 1)

			for _, shards := range []int{4, 3} {
				began := time.Now()
				patchCache(t, key, fmt.Sprintf(`{"spec":{"shards":%d}}`, shards))
				waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, scalingTimeout)
				t.Logf("to %d shards, key by key: Ready again after %s", shards, time.Since(began).Round(100*time.Millisecond))
				assertShape(t, key, shards, 1)
				assertKeysRead(t, key, keys)
			}
			c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)

			b := waitBackup(t, newBackup(t, ns, "tour-backup", key.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
			if b.Status.Keys != keys || b.Status.ValkeyVersion != release.Version || int(b.Status.RDBFormat) != valkey.RDBFormat(release.Version) {
				t.Errorf("the backup holds %d keys of Valkey %s in RDB format %d; want %d of %s in %d",
					b.Status.Keys, b.Status.ValkeyVersion, b.Status.RDBFormat, keys, release.Version, valkey.RDBFormat(release.Version))
			}
			into := release.Version
			if i == 0 {
				into = valkeyVersion
			}
			recreateFromBackup(t, key, b.Name, func(restored *cachev2.Cache) {
				restored.Spec = c.Spec
				restored.Spec.Version = into
			})
			restored := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			assertRestored(t, restored, keys)
			assertKeysRead(t, key, keys)
			for pod, version := range serverVersions(t, key) {
				if version != into {
					t.Errorf("restored, %s runs Valkey %s, want %s", pod, version, into)
				}
			}
		})
	}
}
