package backupcontroller

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/controller"
)

// A Job of the backup's Job's name that is someone else's is neither adopted nor deleted: the
// backup fails, saying so, and the Job stays; one of an earlier backup of the same name, which
// the garbage collector removes, is waited for.
func TestAJobThatIsNotTheBackupsIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 1},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: "8.1.1"},
		Status: cachev2.CacheStatus{Conditions: []metav1.Condition{{Type: cachev2.ConditionReady, Status: metav1.ConditionTrue,
			Reason: cachev2.ReasonAllReplicasReady, ObservedGeneration: 1}}}}
	for name, owner := range map[string][]metav1.OwnerReference{
		"someone's": nil,
		"an earlier backup's": {{APIVersion: cachev1alpha1.GroupVersion.String(), Kind: "CacheBackup", Name: "nightly",
			UID: "the-earlier-one", Controller: ptr.To(true)}},
	} {
		t.Run(name, func(t *testing.T) {
			b := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly", UID: "this-one"},
				Spec: cachev1alpha1.CacheBackupSpec{CacheName: "orders", Storage: cachev1alpha1.BucketLocation{
					Endpoint: "s3:9000", Bucket: "caches", CredentialsSecret: "creds"}}}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly-backup", OwnerReferences: owner}}
			c := fake.NewClientBuilder().WithScheme(controller.NewScheme()).WithObjects(cache, b, job).
				WithStatusSubresource(&cachev1alpha1.CacheBackup{}).Build()
			r := &Reconciler{Client: c, APIReader: c, AgentImage: "example.com/cache-operator:test"}
			for range 2 { // the second pass finds the backup as the first left it
				if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				t.Fatal(err)
			}
			complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete)
			if owner == nil && (b.Status.Phase != cachev1alpha1.BackupFailed || complete == nil || !strings.Contains(complete.Message, "is not this backup's")) {
				t.Errorf("with someone's Job: %+v; want Failed saying the Job is not its own", b.Status)
			}
			if owner != nil && b.Status.Phase != "" {
				t.Errorf("with an earlier backup's Job: phase %q; want it waiting", b.Status.Phase)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil || len(job.OwnerReferences) != len(owner) {
				t.Errorf("the Job: %v, owned by %+v; want it left as it was", err, job.OwnerReferences)
			}
		})
	}
}
