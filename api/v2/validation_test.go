//go:build integration

package v2_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/test/harness/testenv"
)

// k8s sends objects as a user's YAML would; typed is a Go client of the Cache type.
var k8s, typed client.Client

func TestMain(m *testing.M) {
	testenv.Main(m, func(cfg *rest.Config) (err error) {
		if k8s, err = client.New(cfg, client.Options{}); err != nil {
			return err
		}
		typed, err = client.New(cfg, client.Options{Scheme: controller.NewScheme()})
		return err
	})
}

// cacheObject is a Cache as a user would write it in YAML, so that a test can send what the Go
// types could not express: a missing field, a string where a number belongs.
func cacheObject(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "cache.example.com", Version: "v2", Kind: "Cache"})
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

func TestSchemaRejectsBadSpecsAtAdmission(t *testing.T) {
	valid := func() map[string]any {
		return map[string]any{"mode": "Standalone", "shards": int64(3), "version": "8.1.1"}
	}
	for _, tc := range []struct {
		name      string
		field     string
		value     any // nil: remove the field
		wantField string
		wantText  string
	}{
		{"zero shards", "shards", int64(0), "spec.shards", "greater than or equal to 1"},
		{"too many Standalone shards", "shards", int64(10), "spec", "a Standalone Cache has at most 9 shards"},
		{"replicas per shard in Standalone mode", "replicasPerShard", int64(1), "spec", "replicasPerShard applies to Cluster and Replicated modes only"},
		{"unknown mode", "mode", "Sentinel", "spec.mode", `supported values: "Standalone", "Cluster", "Replicated"`},
		{"two-part version", "version", "1.2", "spec.version", "MAJOR.MINOR.PATCH"},
		{"tag instead of version", "version", "latest", "spec.version", "MAJOR.MINOR.PATCH"},
		{"v-prefixed version", "version", "v1.2.3", "spec.version", "MAJOR.MINOR.PATCH"},
		{"missing version", "version", nil, "spec.version", "Required value"},
		{"negative memory", "memory", "-1", "spec.memory", "at least 64Mi"},
		{"tiny memory", "memory", "10Ki", "spec.memory", "at least 64Mi"},
		{"huge memory", "memory", "100Gi", "spec.memory", "at most 64Gi"},
		{"memory that is no quantity", "memory", "lots", "spec.memory", "should match"},
		{"auth with a Secret name that is none", "auth", map[string]any{"secretName": "Not_A_Name"}, "spec.auth.secretName", "must be the name of a Secret"},
		{"auth with a negative grace period", "auth", map[string]any{"rotationGracePeriod": "-1m"}, "spec.auth.rotationGracePeriod", "between 0s and 168h"},
		{"tls with a Secret name that is none", "tls", map[string]any{"secretName": "Not_A_Name"}, "spec.tls.secretName", "must be the name of a Secret"},
		{"tls with both a Secret and an issuer", "tls", map[string]any{"secretName": "mine", "issuerRef": map[string]any{"name": "shop-ca"}}, "spec.tls", "secretName or issuerRef, not both"},
		{"tls with an issuer with no name", "tls", map[string]any{"issuerRef": map[string]any{"kind": "ClusterIssuer"}}, "spec.tls.issuerRef.name", "Required value"},
		{"tls with an issuer of a kind that is none", "tls", map[string]any{"issuerRef": map[string]any{"name": "shop-ca", "kind": "issuer"}}, "spec.tls.issuerRef.kind", "should match"},
		{"tls with certificates valid for a minute", "tls", map[string]any{"certificateValidity": "1m"}, "spec.tls.certificateValidity", "between 1h and 8760h"},
		{"tls with certificates valid for two years", "tls", map[string]any{"certificateValidity": "17520h"}, "spec.tls.certificateValidity", "between 1h and 8760h"},
		{"auth with a grace period of a month", "auth", map[string]any{"rotationGracePeriod": "720h"}, "spec.auth.rotationGracePeriod", "between 0s and 168h"},
		{"auth granting the administrative commands", "auth", map[string]any{"grant": []any{"@admin"}}, "spec.auth.grant[0]", "Unsupported value"},
		{"auth granting CONFIG", "auth", map[string]any{"grant": []any{"keys", "config"}}, "spec.auth.grant[1]", "Unsupported value"},
		{"auth granting in capitals", "auth", map[string]any{"grant": []any{"FLUSHDB"}}, "spec.auth.grant[0]", "Unsupported value"},
		{"auth granting one command twice", "auth", map[string]any{"grant": []any{"keys", "keys"}}, "spec.auth.grant[1]", "Duplicate value"},
		{"a pod label of the operator's", "pod", map[string]any{"labels": map[string]any{"app.kubernetes.io/name": "x"}}, "spec.pod.labels", "are the operator's"},
		{"a pod label value too long", "pod", map[string]any{"labels": map[string]any{"team": strings.Repeat("a", 64)}}, "spec.pod.labels.team", "may not be more than 63"},
		{"a pod label value with a space", "pod", map[string]any{"labels": map[string]any{"team": "check out"}}, "spec.pod.labels", "must be label keys and values"},
		{"a pod annotation of the operator's", "pod", map[string]any{"annotations": map[string]any{"cache.example.com/pod-settings": "{}"}}, "spec.pod.annotations", "are the operator's"},
		{"a nodeSelector key that is no label key", "pod", map[string]any{"nodeSelector": map[string]any{"-pool": "caches"}}, "spec.pod.nodeSelector", "must be label keys and values"},
		{"a toleration of no operator", "pod", map[string]any{"tolerations": []any{map[string]any{"key": "k", "operator": "Is"}}}, "spec.pod.tolerations", "operator is Exists or Equal"},
		{"a priority class that is no name", "pod", map[string]any{"priorityClassName": "High"}, "spec.pod.priorityClassName", "must be the name of a PriorityClass"},
		{"a CPU request of 1m", "pod", map[string]any{"cpu": map[string]any{"request": "1m"}}, "spec.pod.cpu.request", "between 10m and 64"},
		{"a CPU limit below the request", "pod", map[string]any{"cpu": map[string]any{"request": "500m", "limit": "250m"}}, "spec.pod.cpu", "at least the request"},
		{"a CPU limit below the default request", "pod", map[string]any{"cpu": map[string]any{"limit": "50m"}}, "spec.pod.cpu", "at least the request (100m unless set)"},
		{"an eviction policy Valkey lacks", "config", map[string]any{"maxmemoryPolicy": "lru"}, "spec.config.maxmemoryPolicy", "Unsupported value"},
		{"a negative idle timeout", "config", map[string]any{"timeout": int64(-1)}, "spec.config.timeout", "greater than or equal to 0"},
		{"an idle timeout over a day", "config", map[string]any{"timeout": int64(86401)}, "spec.config.timeout", "less than or equal to 86400"},
		{"a keyspace event class Valkey lacks", "config", map[string]any{"notifyKeyspaceEvents": "KQ"}, "spec.config.notifyKeyspaceEvents", "should match"},
		{"metrics that are no object", "metrics", "yes", "spec.metrics", "must be of type object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := valid()
			if tc.value == nil {
				delete(spec, tc.field)
			} else {
				spec[tc.field] = tc.value
			}
			name := "bad-" + strings.ReplaceAll(tc.name, " ", "-")

			err := k8s.Create(context.Background(), cacheObject(name, spec))

			if !apierrors.IsInvalid(err) {
				t.Fatalf("create with %s=%v: got %v, want the API server to reject it as invalid", tc.field, tc.value, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.wantField) || !strings.Contains(msg, tc.wantText) {
				t.Errorf("error %q should name %s and say %q", msg, tc.wantField, tc.wantText)
			}
		})
	}
}

// A Cluster needs Valkey 8.0 or later (a primary passes slot migrations on to its replicas); a
// Standalone Cache runs any release.
func TestSchemaRejectsAClusterOfValkeyBefore8(t *testing.T) {
	err := k8s.Create(context.Background(), cacheObject("cluster-on-7", map[string]any{"mode": "Cluster", "shards": int64(3), "version": "7.2.4"}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "a Cluster needs Valkey 8.0 or later") {
		t.Errorf("a Cluster of Valkey 7.2.4: got %v, want it refused as needing Valkey 8.0", err)
	}
	standalone := cacheObject("standalone-on-7", map[string]any{"mode": "Standalone", "shards": int64(3), "version": "7.2.4"})
	if err := k8s.Create(context.Background(), standalone); err != nil {
		t.Errorf("a Standalone Cache of Valkey 7.2.4 was refused: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), standalone) })
}

func TestSchemaRejectsNamesTheChildrenCannotCarry(t *testing.T) {
	for _, tc := range []struct{ name, wantText string }{
		{"orders.cache", "must be a DNS label"},
		{"9orders", "must be a DNS label"},
		{strings.Repeat("a", 53), "at most 52 characters"},
	} {
		err := k8s.Create(context.Background(), cacheObject(tc.name, map[string]any{"shards": int64(1), "version": "8.1.1"}))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantText) {
			t.Errorf("create %q: got %v, want invalid: %s", tc.name, err, tc.wantText)
		}
	}
}

func TestSchemaAcceptsAValidSpecAndDefaultsModeShardsAndMemory(t *testing.T) {
	ctx := context.Background()
	u := cacheObject("orders-cache", map[string]any{"version": "8.1.1"})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatalf("a valid Cache was rejected: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })

	for field, want := range map[string]any{"mode": "Cluster", "shards": int64(3), "memory": "256Mi"} {
		if got := u.Object["spec"].(map[string]any)[field]; got != want {
			t.Errorf("spec.%s = %v, want the default %v", field, got, want)
		}
	}
}

// Valkey settings within their bounds, and metrics, are taken as written, and may change.
func TestSchemaAcceptsValkeySettingsMetricsAndTheirChange(t *testing.T) {
	ctx := context.Background()
	config := map[string]any{"maxmemoryPolicy": "volatile-lfu", "timeout": int64(300), "notifyKeyspaceEvents": "Ex$"}
	u := cacheObject("with-valkey-settings", map[string]any{"version": "8.1.1", "config": config, "metrics": map[string]any{"enabled": true}})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatalf("valid Valkey settings were rejected: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
	patch := []byte(`{"spec":{"config":{"maxmemoryPolicy":"noeviction","timeout":null},"metrics":{"enabled":false}}}`)
	if err := k8s.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Errorf("a change of the Valkey settings and metrics was rejected: %v", err)
	}
}

// Pod settings within their bounds are taken as written, and may change: a change rolls out.
func TestSchemaAcceptsPodSettingsAndTheirChange(t *testing.T) {
	ctx := context.Background()
	pod := map[string]any{
		"cpu":               map[string]any{"request": "250m", "limit": "2"},
		"nodeSelector":      map[string]any{"topology.kubernetes.io/zone": "eu-west-1a"},
		"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "caches", "effect": "NoSchedule"}},
		"priorityClassName": "caches-high",
		"labels":            map[string]any{"team": "checkout", "example.com/cost-center": ""},
		"annotations":       map[string]any{"example.com/owner": "checkout team, floor 3"},
	}
	u := cacheObject("with-pod-settings", map[string]any{"version": "8.1.1", "pod": pod})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatalf("valid pod settings were rejected: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
	patch := []byte(`{"spec":{"pod":{"labels":{"team":"payments"},"cpu":{"limit":"500m"}}}}`)
	if err := k8s.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Errorf("a change of the pod settings was rejected: %v", err)
	}
}

func TestSchemaTakesAClusterOfUpTo100ShardsWithUpTo2Replicas(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name             string
		shards, replicas int64
		wantText         string // empty: accepted
	}{
		{"largest", cachev2.MaxClusterShards, cachev2.MaxReplicasPerShard, ""},
		{"no replicas", 1, 0, ""},
		{"too many shards", cachev2.MaxClusterShards + 1, 0, "spec.shards: Invalid value"},
		{"too many replicas", 3, cachev2.MaxReplicasPerShard + 1, "a Cluster's shard has at most 2 replicas"},
	} {
		u := cacheObject("cluster-"+strings.ReplaceAll(tc.name, " ", "-"),
			map[string]any{"mode": "Cluster", "shards": tc.shards, "replicasPerShard": tc.replicas, "version": "8.1.1"})
		err := k8s.Create(ctx, u)
		if err == nil {
			t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
		}
		if tc.wantText == "" && err != nil {
			t.Errorf("%s: rejected: %v", tc.name, err)
		}
		if tc.wantText != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantText)) {
			t.Errorf("%s: got %v, want invalid: %s", tc.name, err, tc.wantText)
		}
	}
}

// A Replicated Cache has one primary and up to 5 replicas, and takes its replicas in
// replicasPerShard.
func TestSchemaTakesAReplicatedCacheOfOnePrimaryAndUpTo5Replicas(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		spec map[string]any
		want string // empty: accepted
	}{
		{"largest", map[string]any{"shards": int64(1), "replicasPerShard": int64(cachev2.MaxReplicatedReplicas)}, ""},
		{"no replicas", map[string]any{"shards": int64(1)}, ""},
		{"too many replicas", map[string]any{"shards": int64(1), "replicasPerShard": int64(cachev2.MaxReplicatedReplicas + 1)}, "spec.replicasPerShard: Invalid value"},
		{"shards left at the default", map[string]any{"replicasPerShard": int64(1)}, "set shards: 1"},
		{"two primaries", map[string]any{"shards": int64(2)}, "a Replicated Cache has one primary"},
		{"a restore", map[string]any{"shards": int64(1), "restoreFrom": map[string]any{"backup": "b"}}, ""},
		{"auth and tls", map[string]any{"shards": int64(1), "auth": map[string]any{}, "tls": map[string]any{}}, ""},
		{"a failover after a second", map[string]any{"shards": int64(1), "replication": map[string]any{"failoverAfter": "1s"}}, ""},
		{"a failover at once", map[string]any{"shards": int64(1), "replication": map[string]any{"failoverAfter": "0s"}}, "failoverAfter must be between 1s and 5m"},
		{"a failover after an hour", map[string]any{"shards": int64(1), "replication": map[string]any{"failoverAfter": "1h"}}, "failoverAfter must be between 1s and 5m"},
	} {
		spec := map[string]any{"mode": "Replicated", "version": "9.1.2"}
		maps.Copy(spec, tc.spec)
		u := cacheObject("replicated-"+strings.ReplaceAll(tc.name, " ", "-"), spec)
		err := k8s.Create(ctx, u)
		if err == nil {
			t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
		}
		if tc.want == "" && err != nil {
			t.Errorf("%s: rejected: %v", tc.name, err)
		}
		if tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want invalid: %s", tc.name, err, tc.want)
		}
	}
}

// The replication settings are a Replicated Cache's only, and an empty one has the default the
// operator uses when they are unset.
func TestSchemaKeepsReplicationToReplicatedCachesAndDefaultsIt(t *testing.T) {
	ctx := context.Background()
	cluster := cacheObject("cluster-with-replication", map[string]any{"mode": "Cluster", "shards": int64(3), "version": "9.1.2",
		"replication": map[string]any{}})
	if err := k8s.Create(ctx, cluster); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "replication applies to Replicated mode only") {
		t.Errorf("a Cluster with replication settings: got %v, want invalid", err)
	}
	u := cacheObject("replicated-default-failover", map[string]any{"mode": "Replicated", "shards": int64(1), "version": "9.1.2",
		"replication": map[string]any{}})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
	got, _, _ := unstructured.NestedString(u.Object, "spec", "replication", "failoverAfter")
	if d, err := time.ParseDuration(got); err != nil || d != cachev2.DefaultFailoverAfter {
		t.Errorf("replication: {} defaults failoverAfter to %q, want %v, as when unset", got, cachev2.DefaultFailoverAfter)
	}
}

// A Cluster's shards and replicas may change either way: the operator moves slots and drains
// pods before it removes them.
func TestSchemaAcceptsClusterScaling(t *testing.T) {
	ctx := context.Background()
	u := cacheObject("scaled-shards", map[string]any{"mode": "Cluster", "shards": int64(3), "replicasPerShard": int64(1), "version": "8.1.1"})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })

	for _, patch := range []string{
		`{"spec":{"shards":4}}`, `{"spec":{"shards":2}}`, `{"spec":{"replicasPerShard":0}}`, `{"spec":{"replicasPerShard":2}}`,
	} {
		if err := k8s.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Errorf("%s: refused: %v", patch, err)
		}
	}
}

func TestSchemaRefusesToChangeTheMode(t *testing.T) {
	ctx := context.Background()
	u := cacheObject("fixed-mode", map[string]any{"mode": "Standalone", "shards": int64(3), "version": "8.1.1"})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })

	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mode":"Cluster"}}`))
	err := k8s.Patch(ctx, u, patch)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "mode cannot be changed") {
		t.Errorf("changing the mode: got %v, want invalid: mode cannot be changed", err)
	}
}

// restoreFrom is the Cache's from its creation: it cannot be added, changed or removed after,
// while the rest of the spec still changes.
func TestSchemaKeepsRestoreFromAsCreated(t *testing.T) {
	ctx := context.Background()
	restored := cacheObject("restored", map[string]any{"shards": int64(3), "version": "8.1.1", "restoreFrom": map[string]any{"backup": "nightly"}})
	plain := cacheObject("not-restored", map[string]any{"shards": int64(3), "version": "8.1.1"})
	for _, u := range []*unstructured.Unstructured{restored, plain} {
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
	}
	for _, c := range []struct {
		u     *unstructured.Unstructured
		patch string
	}{
		{restored, `{"spec":{"restoreFrom":{"backup":"weekly"}}}`},
		{restored, `{"spec":{"restoreFrom":null}}`},
		{plain, `{"spec":{"restoreFrom":{"backup":"nightly"}}}`},
	} {
		err := k8s.Patch(ctx, c.u, client.RawPatch(types.MergePatchType, []byte(c.patch)))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "restoreFrom is set when a Cache is created") {
			t.Errorf("%s on %s: got %v, want invalid: restoreFrom is set when a Cache is created", c.patch, c.u.GetName(), err)
		}
	}
	if err := k8s.Patch(ctx, restored, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"shards":4}}`))); err != nil {
		t.Errorf("scaling a restored Cache: %v", err)
	}
	bad := cacheObject("restored-from-nothing", map[string]any{"version": "8.1.1", "restoreFrom": map[string]any{"backup": ""}})
	if err := k8s.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Errorf("a restore from a backup with no name: got %v, want invalid", err)
	}
}

// auth and tls are the Cache's from its creation: neither can be added or removed after; what
// they hold may change, and each has its default.
func TestSchemaKeepsAuthAndTLSAsCreated(t *testing.T) {
	ctx := context.Background()
	for _, f := range []struct {
		field, defaulted, defaultValue, change string
		// frozen are changes of what the field holds that are refused, each with the message's
		// start.
		frozen map[string]string
	}{
		{"auth", "rotationGracePeriod", "10m", `{"spec":{"auth":{"secretName":"rotated","rotationGracePeriod":"0s","grant":["keys","script|flush","@dangerous"]}}}`, nil},
		{"tls", "certificateValidity", "2160h", `{"spec":{"tls":{"certificateValidity":"24h"}}}`, map[string]string{
			`{"spec":{"tls":{"secretName":"certificates-of-mine"}}}`:   "tls.secretName is set when a Cache is created",
			`{"spec":{"tls":{"issuerRef":{"name":"issuer-of-mine"}}}}`: "tls.issuerRef is set when a Cache is created",
		}},
	} {
		with := cacheObject("with-"+f.field, map[string]any{"shards": int64(1), "version": "8.1.1", f.field: map[string]any{}})
		without := cacheObject("without-"+f.field, map[string]any{"shards": int64(1), "version": "8.1.1"})
		for _, u := range []*unstructured.Unstructured{with, without} {
			if err := k8s.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
		}
		if got, _, _ := unstructured.NestedString(with.Object, "spec", f.field, f.defaulted); got != f.defaultValue {
			t.Errorf("%s.%s defaulted to %q, want %s", f.field, f.defaulted, got, f.defaultValue)
		}
		for _, c := range []struct {
			u     *unstructured.Unstructured
			patch string
		}{
			{with, `{"spec":{"` + f.field + `":null}}`},
			{without, `{"spec":{"` + f.field + `":{}}}`},
		} {
			err := k8s.Patch(ctx, c.u, client.RawPatch(types.MergePatchType, []byte(c.patch)))
			if want := f.field + " is set when a Cache is created"; !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s on %s: got %v, want invalid: %s", c.patch, c.u.GetName(), err, want)
			}
		}
		if err := k8s.Patch(ctx, with, client.RawPatch(types.MergePatchType, []byte(f.change))); err != nil {
			t.Errorf("%s: %v", f.change, err)
		}
		for patch, message := range f.frozen {
			err := k8s.Patch(ctx, with, client.RawPatch(types.MergePatchType, []byte(patch)))
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), message) {
				t.Errorf("%s: got %v, want invalid: %s", patch, err, message)
			}
		}
	}
}

func TestScaleSubresourceTargetsTheCache(t *testing.T) {
	ctx := context.Background()
	u := cacheObject("scaled-cache", map[string]any{"mode": "Standalone", "shards": int64(3), "version": "8.1.1"})
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, u) })

	// kubectl scale cache/scaled-cache --replicas=5
	scale := &unstructured.Unstructured{}
	scale.SetGroupVersionKind(schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"})
	if err := k8s.SubResource("scale").Get(ctx, u, scale); err != nil {
		t.Fatalf("reading the scale subresource: %v", err)
	}
	if err := unstructured.SetNestedField(scale.Object, int64(5), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.SubResource("scale").Update(ctx, u, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scaling through the scale subresource: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	if shards, _, _ := unstructured.NestedInt64(u.Object, "spec", "shards"); shards != 5 {
		t.Errorf("spec.shards = %d after scaling to 5", shards)
	}

	// The schema's bounds hold for scaling too.
	if err := unstructured.SetNestedField(scale.Object, int64(10), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.SubResource("scale").Update(ctx, u, client.WithSubResourceBody(scale)); !apierrors.IsInvalid(err) {
		t.Errorf("scaling to 10: got %v, want the schema to reject it", err)
	}
}

func TestAGoClientThatLeavesMemoryUnsetGetsTheDefault(t *testing.T) {
	ctx := context.Background()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "typed-cache", Namespace: "default"},
		Spec:       cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: "8.1.1"},
	}
	if err := typed.Create(ctx, c); err != nil {
		t.Fatalf("a Cache without memory was rejected: %v", err)
	}
	t.Cleanup(func() { _ = typed.Delete(ctx, c) })
	if want := resource.MustParse("256Mi"); c.Spec.Memory.Cmp(want) != 0 {
		t.Errorf("spec.memory = %s, want the default 256Mi", c.Spec.Memory.String())
	}
}
