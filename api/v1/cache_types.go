package v1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheSpec is the user's intent for a Cache: how many nodes, which Valkey release and how much
// memory each node gets.
type CacheSpec struct {
	// Replicas is the number of cache nodes, each a pod of the Cache's StatefulSet.
	// The scale subresource reads and writes this field, so `kubectl scale` and a
	// HorizontalPodAutoscaler target the Cache rather than its StatefulSet.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +required
	Replicas int32 `json:"replicas"`

	// Version is the Valkey release to run, MAJOR.MINOR.PATCH (for example 8.1.1). It becomes
	// the image tag; changing it rolls the nodes one at a time, highest ordinal first.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+[.][0-9]+[.][0-9]+$')",message="version must be a Valkey release as MAJOR.MINOR.PATCH, such as 8.1.1 (no 'v' prefix, no tags such as 'latest')"
	// +required
	Version string `json:"version"`

	// Memory is the memory of each cache node: the container's memory request and limit. Valkey
	// may use three quarters of it, less 8Mi for the server itself, for data (maxmemory: 186Mi of
	// 256Mi) and evicts the least recently used keys beyond that; the rest is headroom for forks,
	// connections and buffers. At least 64Mi, at most 64Gi.
	// +kubebuilder:default="256Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0",message="memory must be at least 64Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Gi')) <= 0",message="memory must be at most 64Gi"
	// +optional
	Memory resource.Quantity `json:"memory,omitzero"`
}

// CacheStatus is what the operator last observed of a Cache. Only the operator writes it.
type CacheStatus struct {
	// ObservedGeneration is the metadata.generation of the spec that this status describes.
	// While it is lower than metadata.generation, the latest change has not been acted on yet.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of cache node pods that exist, ready or not.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of cache node pods that are ready to serve.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Selector is the label selector of the cache node pods, in string form, for the scale
	// subresource (a HorizontalPodAutoscaler needs it to find the pods).
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions are the latest observations of the Cache's state. Ready is True when every
	// wanted replica runs the current spec and is ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Cache is a Valkey cache: a StatefulSet of cache nodes behind a headless Service, kept in
// line with the spec by cache-operator.
//
// The name is held to what the children need: the Service's name must be a DNS label, and the
// StatefulSet's pod names and revision labels add up to 11 characters to it.
//
// +kubebuilder:object:root=true
// +kubebuilder:deprecatedversion:warning="cache.example.com/v1 Cache is deprecated: use cache.example.com/v2, which adds Cluster mode (v1 objects convert to v2 Standalone)"
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lower-case letters, digits and '-', starting with a letter): it also names the Cache's Service"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: the Cache's pod names and revision labels extend it"
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=cch,categories=all
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CacheSpec `json:"spec"`
	// +optional
	Status CacheStatus `json:"status,omitempty"`
}

// CacheList is a list of Caches.
//
// +kubebuilder:object:root=true
type CacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cache `json:"items"`
}
