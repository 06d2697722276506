// Package resources builds the Kubernetes objects that make up a Cache, as pure functions of the
// Cache, and merges the fields the operator owns into objects that already exist.
package resources

import (
	cachev2 "example.com/cache-operator/api/v2"
)

// Label keys and values on every object the operator creates for a Cache.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelVersion   = "app.kubernetes.io/version"
	// LabelMode is on the pods of Cluster and Replicated Caches only, with the mode as its
	// value: the operator's informer caches those pods, whose addresses it needs, and no others.
	LabelMode = "cache.example.com/mode"
	// LabelRole is on the pods of a Replicated Cache, set by the operator as their servers'
	// roles change (replication.RolePrimary or RoleReplica), not by the pod template: the
	// Services <name>-primary and <name>-replicas select on it.
	LabelRole = "cache.example.com/role"

	// AppName is the value of app.kubernetes.io/name: what runs in the pods.
	AppName = "valkey"
	// ManagedBy is the value of app.kubernetes.io/managed-by. The operator's informers only
	// cache StatefulSets and Services that carry it.
	ManagedBy = "cache-operator"
)

// SelectorLabels select the pods of one Cache. They never change for the life of the Cache,
// since a StatefulSet's selector is immutable.
func SelectorLabels(cache *cachev2.Cache) map[string]string {
	return map[string]string{
		LabelName:     AppName,
		LabelInstance: cache.Name,
	}
}

// Labels are the labels of a Cache's StatefulSet and Service.
func Labels(cache *cachev2.Cache) map[string]string {
	l := SelectorLabels(cache)
	l[LabelManagedBy] = ManagedBy
	return l
}

// podLabelKeys are the keys of podLabels: the pod labels the operator owns.
var podLabelKeys = []string{LabelName, LabelInstance, LabelManagedBy, LabelVersion, LabelMode}

// podLabels are the labels of a Cache's pods: the object labels plus the Valkey version.
func podLabels(cache *cachev2.Cache) map[string]string {
	l := Labels(cache)
	l[LabelVersion] = cache.Spec.Version
	if cache.Spec.Mode == cachev2.ModeCluster || cache.Spec.Mode == cachev2.ModeReplicated {
		l[LabelMode] = string(cache.Spec.Mode)
	}
	return l
}

// mergeLabels sets the wanted labels in *dst and leaves every other label alone, so that
// labels added by other tools survive.
func mergeLabels(dst *map[string]string, want map[string]string) { mergeAnnotations(dst, want) }

// mergeAnnotations sets the wanted entries in *dst, a map of labels or annotations, and leaves
// every other entry alone.
func mergeAnnotations(dst *map[string]string, want map[string]string) {
	if *dst == nil {
		*dst = make(map[string]string, len(want))
	}
	for k, v := range want {
		(*dst)[k] = v
	}
}
