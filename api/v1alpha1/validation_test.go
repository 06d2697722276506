//go:build integration

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/test/harness/testenv"
)

var k8s client.Client

func TestMain(m *testing.M) {
	testenv.Main(m, func(cfg *rest.Config) (err error) {
		k8s, err = client.New(cfg, client.Options{})
		return err
	})
}

// backupObject is a CacheBackup as a user would write it in YAML.
func backupObject(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "cache.example.com", Version: "v1alpha1", Kind: "CacheBackup"})
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

func storage(edit func(map[string]any)) map[string]any {
	s := map[string]any{"endpoint": "s3.example.internal:9000", "bucket": "caches", "credentialsSecret": "bucket-credentials"}
	if edit != nil {
		edit(s)
	}
	return s
}

// A backup's spec is checked at admission and fixed once made: another backup is another object.
func TestSchemaChecksABackupAndKeepsItAsMade(t *testing.T) {
	ctx := context.Background()
	long := "a-backup-whose-name-is-longer-than-its-job-name-can-carry"
	if err := k8s.Create(ctx, backupObject(long, map[string]any{"cacheName": "orders", "storage": storage(nil)})); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "at most 56 characters") {
		t.Errorf("a %d-character name: got %v, want invalid: at most 56 characters", len(long), err)
	}
	for name, spec := range map[string]map[string]any{
		"bad-cache-name": {"cacheName": "Orders", "storage": storage(nil)},
		"no-cache":       {"storage": storage(nil)},
		"no-storage":     {"cacheName": "orders"},
		"url-endpoint":   {"cacheName": "orders", "storage": storage(func(s map[string]any) { s["endpoint"] = "https://s3.example.internal" })},
		"upper-bucket":   {"cacheName": "orders", "storage": storage(func(s map[string]any) { s["bucket"] = "Caches" })},
		"no-credentials": {"cacheName": "orders", "storage": storage(func(s map[string]any) { delete(s, "credentialsSecret") })},
	} {
		if err := k8s.Create(ctx, backupObject(name, spec)); !apierrors.IsInvalid(err) {
			t.Errorf("%s: got %v, want invalid", name, err)
		}
	}

	u := backupObject("nightly", map[string]any{"cacheName": "orders", "storage": storage(nil)})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
	for _, patch := range []string{`{"spec":{"cacheName":"carts"}}`, `{"spec":{"storage":{"bucket":"other"}}}`} {
		err := k8s.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(patch)))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
			t.Errorf("%s: got %v, want invalid: spec is immutable", patch, err)
		}
	}
}
