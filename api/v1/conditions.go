package v1

// Ready reports whether every replica of the Cache runs the wanted spec and is ready to serve.
// `kubectl wait --for=condition=Ready cache/NAME` waits on it.
const (
	// ConditionReady is the type of the Ready condition.
	ConditionReady = "Ready"

	// ReasonProgressing means the StatefulSet is converging on the spec: scaling, rolling out a
	// new version, or waiting for pods to become ready. The message says how far it has got.
	ReasonProgressing = "Progressing"

	// ReasonAllReplicasReady means every wanted replica is ready and runs the current spec.
	ReasonAllReplicasReady = "AllReplicasReady"

	// ReasonReconcileFailed means the operator could not make the Cache's StatefulSet or
	// Service match the spec, for a reason other than a routine conflict; the message has the
	// API server's error (a Forbidden one points at the operator's RBAC). It is retried with
	// backoff.
	ReasonReconcileFailed = "ReconcileFailed"

	// ReasonNameConflict means a StatefulSet or Service with the Cache's name exists and is not
	// the Cache's, so the operator cannot make its own; the message names it. The Cache stays
	// not ready until that object is removed or renamed, or the Cache is.
	ReasonNameConflict = "NameConflict"
)

// Registered reports whether the Cache is listed in the external service catalogue, where
// clients outside Kubernetes discover its nodes. It is absent when the operator runs without a
// catalogue.
const (
	// ConditionRegistered is the type of the Registered condition.
	ConditionRegistered = "Registered"

	// ReasonRegistered means the catalogue lists every wanted node of the Cache.
	ReasonRegistered = "Registered"

	// ReasonCatalogUnavailable means registering or deregistering failed; the message has the
	// catalogue's error. The operator retries with backoff.
	ReasonCatalogUnavailable = "CatalogUnavailable"
)
