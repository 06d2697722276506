package v1

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	cachev2 "example.com/cache-operator/api/v2"
)

// AnnotationV2Fields holds, on a Cache read through v1, what its v2 form has that v1 cannot
// express (a Cluster's or Replicated Cache's mode, shards beyond v1's bound, replicas per shard,
// the backup a Cache was restored from, its auth, its pods' settings, metrics, Valkey settings,
// TLS and replication settings, the cluster's or the replication's status), as JSON. Written back through v1, the object converts to the same v2 object it came
// from, as Cluster API carries its hub's fields. A v1 client never needs to touch it; a change
// it makes to spec.replicas still takes effect, as the number of shards.
const AnnotationV2Fields = "cache.example.com/v2-fields"

// v2Fields is the content of AnnotationV2Fields.
type v2Fields struct {
	Mode             cachev2.Mode `json:"mode"`
	Shards           int32        `json:"shards"`
	ReplicasPerShard *int32       `json:"replicasPerShard,omitempty"`
	// Replicas is the spec.replicas the v1 form was given, so that a v1 client's change to it
	// can be told from the value conversion chose.
	Replicas    int32                  `json:"replicas"`
	RestoreFrom *cachev2.RestoreSource `json:"restoreFrom,omitempty"`
	Auth        *cachev2.Auth          `json:"auth,omitempty"`
	Pod         *cachev2.PodSettings   `json:"pod,omitempty"`
	Metrics     *cachev2.Metrics       `json:"metrics,omitempty"`
	Config      *cachev2.ValkeyConfig  `json:"config,omitempty"`
	TLS         *cachev2.TLS           `json:"tls,omitempty"`
	Replication *cachev2.Replication   `json:"replication,omitempty"`

	StatusShards      int32                  `json:"statusShards,omitempty"`
	StatusReadyShards int32                  `json:"statusReadyShards,omitempty"`
	SlotsAssigned     int32                  `json:"slotsAssigned,omitempty"`
	SlotsToMove       int32                  `json:"slotsToMove,omitempty"`
	SlotsMoved        int32                  `json:"slotsMoved,omitempty"`
	Nodes             []cachev2.ClusterNode  `json:"nodes,omitempty"`
	Primary           string                 `json:"primary,omitempty"`
	CertificateSerial string                 `json:"certificateSerial,omitempty"`
	Rollout           *cachev2.RolloutStatus `json:"rollout,omitempty"`
}

// ConvertTo converts this v1 Cache to the hub version, v2: replicas: N is mode: Standalone,
// shards: N, unless the object came from v2 with fields v1 cannot hold.
func (src *Cache) ConvertTo(dstRaw conversion.Hub) error {
	dst := dstRaw.(*cachev2.Cache)
	src.toV2(dst)
	encoded, ok := src.Annotations[AnnotationV2Fields]
	if !ok {
		return nil
	}
	var fields v2Fields
	if err := json.Unmarshal([]byte(encoded), &fields); err != nil {
		return fmt.Errorf("annotation %s is not what the operator wrote (%w): remove it to treat the Cache as Standalone", AnnotationV2Fields, err)
	}
	delete(dst.Annotations, AnnotationV2Fields)
	if len(dst.Annotations) == 0 {
		dst.Annotations = nil
	}
	dst.Spec.Mode = fields.Mode
	dst.Spec.ReplicasPerShard = fields.ReplicasPerShard
	dst.Spec.RestoreFrom = fields.RestoreFrom
	dst.Spec.Auth = fields.Auth
	dst.Spec.Pod = fields.Pod
	dst.Spec.Metrics = fields.Metrics
	dst.Spec.Config = fields.Config
	dst.Spec.TLS = fields.TLS
	dst.Spec.Replication = fields.Replication
	if src.Spec.Replicas == fields.Replicas {
		dst.Spec.Shards = fields.Shards
	}
	dst.Status.Shards = fields.StatusShards
	dst.Status.ReadyShards = fields.StatusReadyShards
	dst.Status.SlotsAssigned = fields.SlotsAssigned
	dst.Status.SlotsToMove, dst.Status.SlotsMoved = fields.SlotsToMove, fields.SlotsMoved
	dst.Status.Nodes, dst.Status.Primary = fields.Nodes, fields.Primary
	dst.Status.CertificateSerial = fields.CertificateSerial
	dst.Status.Rollout = fields.Rollout
	return nil
}

// toV2 is the conversion of a v1 Cache that carries no v2 fields.
func (src *Cache) toV2(dst *cachev2.Cache) {
	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	dst.Spec = cachev2.CacheSpec{
		Mode:    cachev2.ModeStandalone,
		Shards:  src.Spec.Replicas,
		Version: src.Spec.Version,
		Memory:  src.Spec.Memory.DeepCopy(),
	}
	dst.Status = cachev2.CacheStatus{
		ObservedGeneration: src.Status.ObservedGeneration,
		Replicas:           src.Status.Replicas,
		ReadyReplicas:      src.Status.ReadyReplicas,
		Shards:             src.Status.Replicas,
		ReadyShards:        src.Status.ReadyReplicas,
		Selector:           src.Status.Selector,
		Conditions:         src.Status.DeepCopy().Conditions,
	}
}

// ConvertFrom converts a v2 Cache to this version. What v1 cannot hold goes into
// AnnotationV2Fields, and only when there is such a thing: a Standalone Cache of up to nine
// nodes reads through v1 exactly as it did before v2.
func (dst *Cache) ConvertFrom(srcRaw conversion.Hub) error {
	src := srcRaw.(*cachev2.Cache)
	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	// Only this conversion writes the annotation: one set on the v2 object by hand says nothing.
	delete(dst.Annotations, AnnotationV2Fields)
	dst.Spec = CacheSpec{
		Replicas: min(src.Spec.Shards, cachev2.MaxStandaloneShards),
		Version:  src.Spec.Version,
		Memory:   src.Spec.Memory.DeepCopy(),
	}
	dst.Status = CacheStatus{
		ObservedGeneration: src.Status.ObservedGeneration,
		Replicas:           src.Status.Replicas,
		ReadyReplicas:      src.Status.ReadyReplicas,
		Selector:           src.Status.Selector,
		Conditions:         src.Status.DeepCopy().Conditions,
	}

	var plain cachev2.Cache
	dst.toV2(&plain)
	if equality.Semantic.DeepEqual(plain.Spec, src.Spec) && equality.Semantic.DeepEqual(plain.Status, src.Status) {
		return nil
	}
	encoded, err := json.Marshal(v2Fields{
		Mode:              src.Spec.Mode,
		Shards:            src.Spec.Shards,
		ReplicasPerShard:  src.Spec.ReplicasPerShard,
		Replicas:          dst.Spec.Replicas,
		RestoreFrom:       src.Spec.RestoreFrom,
		Auth:              src.Spec.Auth,
		Pod:               src.Spec.Pod,
		Metrics:           src.Spec.Metrics,
		Config:            src.Spec.Config,
		TLS:               src.Spec.TLS,
		Replication:       src.Spec.Replication,
		StatusShards:      src.Status.Shards,
		StatusReadyShards: src.Status.ReadyShards,
		SlotsAssigned:     src.Status.SlotsAssigned,
		SlotsToMove:       src.Status.SlotsToMove,
		SlotsMoved:        src.Status.SlotsMoved,
		Nodes:             src.Status.Nodes,
		Primary:           src.Status.Primary,
		CertificateSerial: src.Status.CertificateSerial,
		Rollout:           src.Status.Rollout,
	})
	if err != nil {
		return err
	}
	if dst.Annotations == nil {
		dst.Annotations = map[string]string{}
	}
	dst.Annotations[AnnotationV2Fields] = string(encoded)
	return nil
}
