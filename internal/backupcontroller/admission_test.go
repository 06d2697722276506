package backupcontroller

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/controller"
)

// A backup of a Cache that the informer has not seen yet, but the API server has (both applied
// at once), is admitted; one of a Cache that neither has is refused, naming it.
func TestAdmissionAsksTheAPIServerBeforeItRefuses(t *testing.T) {
	scheme := controller.NewScheme()
	informer := fake.NewClientBuilder().WithScheme(scheme).Build()
	apiServer := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(&cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}).Build()
	check := admissionCheck{reader: informer, apiServer: apiServer}
	backupOf := func(cache string) *cachev1alpha1.CacheBackup {
		return &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly"},
			Spec: cachev1alpha1.CacheBackupSpec{CacheName: cache}}
	}

	if _, err := check.ValidateCreate(context.Background(), backupOf("orders")); err != nil {
		t.Errorf("a backup of a Cache the informer has not seen yet was refused: %v", err)
	}
	if _, err := check.ValidateCreate(context.Background(), backupOf("ordres")); err == nil || !strings.Contains(err.Error(), "Cache ordres does not exist") {
		t.Errorf("a backup of no Cache: %v, want it refused naming ordres", err)
	}
}
