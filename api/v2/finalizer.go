package v2

// Finalizer keeps a deleted Cache until the operator has removed its record from the external
// service catalogue. The operator adds it only when it runs with a catalogue.
const Finalizer = "cache.example.com/deregister"

// AnnotationAbandonCatalogRecord, set to "true" on a Cache, lets the operator remove the
// Finalizer without deregistering: the escape hatch for a catalogue that is gone for good. The
// record is left behind, and a Warning event says so.
const AnnotationAbandonCatalogRecord = "cache.example.com/abandon-catalog-record"
