package backupcontroller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
)

// admissionCheck refuses, at creation, a backup of a Cache that does not exist: a typo in
// cacheName is told at once, to the user who made it. The schema checks the rest. A Cache
// deleted later still fails its backups, with CacheNotFound: admission is a courtesy, not the
// guard, and the install asks the API server to admit backups when the webhook cannot answer.
type admissionCheck struct{ reader client.Reader }

func (a admissionCheck) ValidateCreate(ctx context.Context, b *cachev1alpha1.CacheBackup) (admission.Warnings, error) {
	if b.Spec.CacheName == "" {
		return nil, nil // an imported backup: of no Cache here
	}
	err := a.reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.CacheName}, &cachev2.Cache{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("spec.cacheName: Cache %s does not exist in namespace %s", b.Spec.CacheName, b.Namespace)
	}
	return nil, err
}

func (admissionCheck) ValidateUpdate(context.Context, *cachev1alpha1.CacheBackup, *cachev1alpha1.CacheBackup) (admission.Warnings, error) {
	return nil, nil // the spec cannot change (the schema)
}

func (admissionCheck) ValidateDelete(context.Context, *cachev1alpha1.CacheBackup) (admission.Warnings, error) {
	return nil, nil
}

// SetupAdmission registers the admission check with the manager's webhook server; it reads the
// Caches through reader: the manager's informer, or, for an operator scoped to some namespaces,
// the API server, since the webhook answers for backups in every namespace.
func SetupAdmission(mgr ctrl.Manager, reader client.Reader) error {
	return ctrl.NewWebhookManagedBy(mgr, &cachev1alpha1.CacheBackup{}).WithValidator(admissionCheck{reader: reader}).Complete()
}
