package v2

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

	// ReasonRolloutEmptiesNodes means a change of version or memory waits for consent: it
	// restarts every node, and no replica holds a node's keys while it restarts, so each comes
	// back empty. The pods keep running the spec before the change; the message says how to go
	// ahead (AnnotationRolloutEmptiesNodes, or replicas first for a Cluster).
	ReasonRolloutEmptiesNodes = "RolloutEmptiesNodes"

	// ReasonDowngradeRefused means a change of a Cluster or Replicated Cache's version waits
	// because the version asked for cannot read the data format of the release its primaries run (Valkey 8
	// that of Valkey 9): a replica on it could not sync from them. The pods keep the template
	// they have; setting the version back to that release or later ends the wait.
	ReasonDowngradeRefused = "DowngradeRefused"

	// ReasonPodsCannotStart means some of the Cache's pods have been waiting for a minute or
	// more on a container that will not start on its own: the kubelet cannot pull its image (a
	// spec.version with no image, or a registry the nodes cannot reach), or cannot make its
	// configuration. The message names the pods and what their kubelets report.
	ReasonPodsCannotStart = "PodsCannotStart"
)

// Reasons of a Cluster Cache's Ready condition beyond those above: what the operator sees in
// Valkey's own state that keeps the cluster from serving. The operator checks again every few
// seconds while one holds (Valkey sends no watch events), and the message names what is missing.
const (
	// ReasonClusterForming means the nodes are not one cluster yet: they have not all met, some
	// slots have no primary, or some node is neither primary nor replica. The message says what
	// the operator does or waits for next.
	ReasonClusterForming = "ClusterForming"

	// ReasonClusterStateNotOK means some node reports a cluster_state other than ok.
	ReasonClusterStateNotOK = "ClusterStateNotOK"

	// ReasonSlotsUnserved means some of the 16384 slots have no primary that every node sees as
	// reachable.
	ReasonSlotsUnserved = "SlotsUnserved"

	// ReasonReplicasMissing means a shard has fewer replicas with their replication link up than
	// spec.replicasPerShard asks for.
	ReasonReplicasMissing = "ReplicasMissing"

	// ReasonSlotsMigrating meant some slot was being migrated or imported.
	//
	// Deprecated: no longer set. The operator finishes or closes an open slot itself and
	// reports it as Rebalancing, or as the operation it belongs to.
	ReasonSlotsMigrating = "SlotsMigrating"

	// ReasonScalingOut means new shards are joining: their nodes meet the cluster, their
	// replicas attach, and slots move to them. The message counts the slots still to move.
	ReasonScalingOut = "ScalingOut"

	// ReasonDraining means pods are to be removed (fewer shards or fewer replicas): their
	// slots move to the primaries that stay, or a replica that stays takes over their shard,
	// and then the others forget them (a Replicated Cache's primary on a pod that goes hands
	// over to a replica that stays). The StatefulSet shrinks only after that.
	ReasonDraining = "Draining"

	// ReasonRebalancing means slots move between the primaries until each serves 16384/shards
	// of them, give or take one, or a migration that stopped is being finished.
	ReasonRebalancing = "Rebalancing"

	// ReasonHealing means the cluster mends itself after losing a node: a replica takes over,
	// the others forget the departed node, and the replacement pod's new node joins. With no
	// replica left, a departed primary's slots go to a new node, without their keys; an event
	// says so.
	ReasonHealing = "Healing"

	// ReasonUpgrading means the pods are restarted on a new pod template, one at a time:
	// replicas first, each back in sync before the next, then each shard's primary once a
	// replica on the new template has taken over with CLUSTER FAILOVER (a Replicated Cache's
	// primary hands over to a replica in sync with FAILOVER as its pod stops).
	ReasonUpgrading = "Upgrading"

	// ReasonClusterReady means every node is ready and the cluster serves every slot, with every
	// replica attached and in sync and no slot in migration.
	ReasonClusterReady = "ClusterReady"
)

// Reasons of a Replicated Cache's Ready condition beyond those above (ReasonReplicasMissing is
// shared): what its servers report about their replication.
const (
	// ReasonReplicationForming means the Cache's servers have no roles yet: the operator makes
	// one the primary once every server answers, and the others its replicas.
	ReasonReplicationForming = "ReplicationForming"

	// ReasonPrimaryLost means no server takes writes: the primary is gone, back empty, or
	// unreachable. The message says which replica takes over, or what the failover waits for.
	ReasonPrimaryLost = "PrimaryLost"

	// ReasonNodesUnreachable means the operator cannot ask some server for its replication, or
	// the replicas follow a primary that it cannot reach (it does not fail over a primary that a
	// replica still reaches).
	ReasonNodesUnreachable = "NodesUnreachable"

	// ReasonReplicationReady means one server takes writes, its pod alone is behind the
	// <name>-primary Service, and every replica is linked to it.
	ReasonReplicationReady = "ReplicationReady"
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

// PodTemplateCurrent reports, when False, that the Cache's pods do not run the pod template its
// spec and this operator release build: one of an earlier release (the operator does not
// restart a Cache's pods only because it was upgraded; the newer template is applied with the
// Cache's next spec change, or at once with AnnotationPodTemplate), or a new one waiting for its
// turn to roll out. The condition is absent while the template is current.
const (
	// ConditionPodTemplateCurrent is the type of the PodTemplateCurrent condition.
	ConditionPodTemplateCurrent = "PodTemplateCurrent"

	// ReasonNewerTemplateAvailable means this operator release would build the pods
	// differently from how they run: the message says how to apply it.
	ReasonNewerTemplateAvailable = "NewerTemplateAvailable"

	// ReasonRolloutQueued means a change of the pod template waits for its turn: as many Caches
	// as the operator lets roll out at once are rolling out (--max-concurrent-rollouts). The
	// pods keep running as they are; the message says how many are ahead.
	ReasonRolloutQueued = "RolloutQueued"
)

// Progressing reports, while a new pod template rolls out (status.rollout), whether the rollout
// still moves. False means no pod has come to run the new template for the operator's progress
// deadline (--rollout-progress-deadline): an image that cannot be pulled, a pod that never gets
// ready. The rollout then stops counting against --max-concurrent-rollouts, so that it holds up
// no other Cache's, and goes on if it moves again. The condition is absent when no rollout is
// under way.
const (
	// ConditionProgressing is the type of the Progressing condition.
	ConditionProgressing = "Progressing"

	// ReasonRollingOut means the rollout moves: the message says how far it has got.
	ReasonRollingOut = "RollingOut"

	// ReasonProgressDeadlineExceeded means the rollout has not moved for the progress deadline:
	// the pods' events say why (kubectl describe pod).
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
)

// Restored reports, on a Cache created with spec.restoreFrom, whether its nodes hold the backup's
// data. Until it is True, Ready is False with one of the reasons below.
const (
	// ConditionRestored is the type of the Restored condition.
	ConditionRestored = "Restored"

	// ReasonRestoring means the nodes are fetching the backup's data, loading it or being checked
	// against it; or the backup has not completed yet. The message says which.
	ReasonRestoring = "Restoring"

	// ReasonRestoreRefused means the backup cannot be restored into this Cache: it failed, or
	// its shards or mode differ from the Cache's. The message says why; the Cache creates no
	// pods. Delete it and create it again with a backup that fits.
	ReasonRestoreRefused = "RestoreRefused"

	// ReasonRestoreFailed means a node cannot fetch its shard (the backup's data is not whole,
	// or the bucket cannot be reached: its init step retries), or does not hold the keys its
	// shard had (its server restarted empty before the check): the Cache is not Ready, as it
	// would serve with keys missing. The message names the node and says why.
	ReasonRestoreFailed = "RestoreFailed"

	// ReasonRestoreVerified means every node held the keys its shard had when it was checked.
	ReasonRestoreVerified = "RestoreVerified"
)

// CredentialsCurrent reports, on a Cache with spec.auth, whether its running servers take exactly
// the application password in its Secret. It is absent on a Cache without auth.
const (
	// ConditionCredentialsCurrent is the type of the CredentialsCurrent condition.
	ConditionCredentialsCurrent = "CredentialsCurrent"

	// ReasonCredentialsApplied means every running node takes the Secret's password, and no
	// other.
	ReasonCredentialsApplied = "CredentialsApplied"

	// ReasonApplyingCredentials means the operator is giving the running nodes the users'
	// passwords as the ACL Secret now holds them; the message says which node it waits on.
	ReasonApplyingCredentials = "ApplyingCredentials"

	// ReasonPreviousPasswordValid means the password in the Secret changed and the previous one
	// keeps working until the time in the message (spec.auth.rotationGracePeriod), for clients
	// to pick up the new one.
	ReasonPreviousPasswordValid = "PreviousPasswordValid"

	// ReasonCredentialsInvalid means the application user's Secret cannot be used: it is
	// missing, lacks the label cache.example.com/credentials-of, or its password is missing or
	// too short. The message says which. The nodes keep the passwords they have; a Cache being
	// created makes no pod until the Secret is usable, and its Ready condition has this reason
	// too meanwhile.
	ReasonCredentialsInvalid = "CredentialsInvalid"
)

// CertificateServed reports, on a Cache with spec.tls, whether every node serves the
// certificate its TLS Secret holds now. It is absent on a Cache without TLS.
const (
	// ConditionCertificateServed is the type of the CertificateServed condition.
	ConditionCertificateServed = "CertificateServed"

	// ReasonCertificateServed means every node serves the Secret's certificate; the
	// message has its serial number and when it is renewed.
	ReasonCertificateServed = "CertificateServed"

	// ReasonServingNewCertificate means the Secret holds a certificate, new or renewed, that
	// some node does not serve yet: the operator has each read its files again once the
	// kubelet has updated them (up to a minute or two after the Secret changed). The message
	// names the nodes it waits on. Clients that trust the Cache's CA are served meanwhile.
	ReasonServingNewCertificate = "ServingNewCertificate"

	// ReasonCertificateInvalid means the Secret that spec.tls.secretName names cannot be
	// served: it is missing, lacks the label cache.example.com/credentials-of, or its
	// certificate does not match its key or its CA, is not good for server and client
	// authentication, or does not name <name>.<namespace>.svc. The message says which. The
	// nodes keep serving what they have; a Cache being created makes no pod until the Secret is
	// usable, and its Ready condition has this reason too meanwhile.
	ReasonCertificateInvalid = "CertificateInvalid"
)
