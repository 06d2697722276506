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
type admissionCheck struct {
	// reader is where the Cache is looked for first (SetupAdmission).
	reader client.Reader
	// apiServer is where a Cache that reader lacks is looked for before the backup is refused:
	// an informer learns of a Cache a moment after its creation, and a Cache and its backup
	// applied together (`kubectl apply -f` of both) come closer together than that.
	apiServer client.Reader
}

func (a admissionCheck) ValidateCreate(ctx context.Context, b *cachev1alpha1.CacheBackup) (admission.Warnings, error) {
	if b.Spec.CacheName == "" {
		return nil, nil // an imported backup: of no Cache here
	}
	key := client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.CacheName}
	err := a.reader.Get(ctx, key, &cachev2.Cache{})
	if apierrors.IsNotFound(err) {
		err = a.apiServer.Get(ctx, key, &cachev2.Cache{})
	}
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
// the API server, since the webhook answers for backups in every namespace. It asks the API
// server itself before it refuses a backup.
func SetupAdmission(mgr ctrl.Manager, reader client.Reader) error {
	check := admissionCheck{reader: reader, apiServer: mgr.GetAPIReader()}
	return ctrl.NewWebhookManagedBy(mgr, &cachev1alpha1.CacheBackup{}).WithValidator(check).Complete()
}
