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
)
