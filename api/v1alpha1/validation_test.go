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
		"no-cache":       {"storage": storage(nil)}, // nor importPath
		"no-storage":     {"cacheName": "orders"},
		"url-endpoint":   {"cacheName": "orders", "storage": storage(func(s map[string]any) { s["endpoint"] = "https://s3.example.internal" })},
		"upper-bucket":   {"cacheName": "orders", "storage": storage(func(s map[string]any) { s["bucket"] = "Caches" })},
		"no-credentials": {"cacheName": "orders", "storage": storage(func(s map[string]any) { delete(s, "credentialsSecret") })},
		"both":           {"cacheName": "orders", "importPath": "shop/orders/nightly", "storage": storage(nil)},
		"import-url":     {"importPath": "s3://caches/shop/orders/nightly", "storage": storage(nil)},
		"import-slashes": {"importPath": "/shop//orders/", "storage": storage(nil)},
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

// A backup made or imported by hand keeps its objects when deleted unless it says otherwise.
func TestABackupRetainsItsObjectsByDefault(t *testing.T) {
	ctx := context.Background()
	for _, u := range []*unstructured.Unstructured{
		backupObject("by-hand", map[string]any{"cacheName": "orders", "storage": storage(nil)}),
		backupObject("imported", map[string]any{"importPath": "shop/orders/nightly", "storage": storage(nil)}),
	} {
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
		if policy, _, _ := unstructured.NestedString(u.Object, "spec", "deletionPolicy"); policy != "Retain" {
			t.Errorf("%s: deletionPolicy defaults to %q, want Retain", u.GetName(), policy)
		}
	}
	if err := k8s.Create(ctx, backupObject("odd-policy", map[string]any{"cacheName": "orders", "storage": storage(nil), "deletionPolicy": "Archive"})); !apierrors.IsInvalid(err) {
		t.Errorf("deletionPolicy Archive: got %v, want invalid", err)
	}
	// Deleting an imported backup's objects would delete the original's, which another cluster
	// may still list and restore from.
	if err := k8s.Create(ctx, backupObject("imported-delete", map[string]any{"importPath": "shop/orders/nightly", "storage": storage(nil), "deletionPolicy": "Delete"})); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "deletionPolicy is Retain") {
		t.Errorf("an imported backup with deletionPolicy Delete: got %v, want invalid: its deletionPolicy is Retain", err)
	}
}

func scheduleObject(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "cache.example.com", Version: "v1alpha1", Kind: "CacheBackupSchedule"})
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

// A schedule's spec is checked at admission: a cron schedule's shape (the operator reports a
// value out of range), a retention of at least one, and a name its backups' names can extend.
func TestSchemaChecksASchedule(t *testing.T) {
	ctx := context.Background()
	spec := func(edit func(map[string]any)) map[string]any {
		s := map[string]any{"cacheName": "orders", "schedule": "0 3 * * *", "storage": storage(nil)}
		if edit != nil {
			edit(s)
		}
		return s
	}
	long := "a-schedule-whose-name-its-backups-cannot-carry"
	if err := k8s.Create(ctx, scheduleObject(long, spec(nil))); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at most 43 characters") {
		t.Errorf("a %d-character name: got %v, want invalid: at most 43 characters", len(long), err)
	}
	for name, s := range map[string]map[string]any{
		"four-fields": spec(func(s map[string]any) { s["schedule"] = "0 3 * *" }),
		"every":       spec(func(s map[string]any) { s["schedule"] = "@every 1m" }),
		"time-zone":   spec(func(s map[string]any) { s["schedule"] = "CRON_TZ=Europe/Paris 0 3 * * *" }),
		"keep-none":   spec(func(s map[string]any) { s["keep"] = int64(0) }),
		"no-cache":    spec(func(s map[string]any) { delete(s, "cacheName") }),
		"no-storage":  spec(func(s map[string]any) { delete(s, "storage") }),
		"bad-endpoint": spec(func(s map[string]any) {
			s["storage"] = storage(func(s map[string]any) { s["endpoint"] = "https://s3" })
		}),
	} {
		if err := k8s.Create(ctx, scheduleObject(name, s)); !apierrors.IsInvalid(err) {
			t.Errorf("%s: got %v, want invalid", name, err)
		}
	}
	for _, schedule := range []string{"0 3 * * *", "*/15 * * * *", "0 9 * * MON-FRI", "@daily"} {
		u := scheduleObject("nightly", spec(func(s map[string]any) { s["schedule"] = schedule }))
		if err := k8s.Create(ctx, u); err != nil {
			t.Errorf("%q: %v", schedule, err)
			continue
		}
		if keep, _, _ := unstructured.NestedInt64(u.Object, "spec", "keep"); keep != 7 {
			t.Errorf("keep defaults to %d, want 7", keep)
		}
		if err := k8s.Delete(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
}
