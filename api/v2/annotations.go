package v2

// Finalizer keeps a deleted Cache until the operator has removed its record from the external
// service catalogue. The operator adds it only when it runs with a catalogue.
const Finalizer = "cache.example.com/deregister"

// AnnotationAbandonCatalogRecord, set to "true" on a Cache, lets the operator remove the
// Finalizer without deregistering: the escape hatch for a catalogue that is gone for good. The
// record is left behind, and a Warning event says so.
const AnnotationAbandonCatalogRecord = "cache.example.com/abandon-catalog-record"

// AnnotationPodTemplate, set to PodTemplateLatest on a Cache, lets the operator roll the Cache's
// pods onto the pod template of the running operator release, which it otherwise applies only
// with the next change of the spec (see ConditionPodTemplateCurrent). Left set, every later
// release's template is applied as soon as that release runs.
const AnnotationPodTemplate = "cache.example.com/pod-template"

// PodTemplateLatest is the value of AnnotationPodTemplate that opts in.
const PodTemplateLatest = "latest"

// AnnotationRolloutEmptiesNodes, set to RolloutEmptiesNodesAllowed on a Cache whose nodes have no
// replica to take over from them (every Standalone Cache, and a Cluster with replicasPerShard
// 0), lets a change of version or memory restart its nodes, each of which comes back empty: the
// data of a node goes with its restart. Without it such a change waits, with Ready False and
// reason ReasonRolloutEmptiesNodes. It is a standing consent: left set, later changes go ahead
// too.
const AnnotationRolloutEmptiesNodes = "cache.example.com/rollout-empties-nodes"

// RolloutEmptiesNodesAllowed is the value of AnnotationRolloutEmptiesNodes that consents.
const RolloutEmptiesNodesAllowed = "allow"
