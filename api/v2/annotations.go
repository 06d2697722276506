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
