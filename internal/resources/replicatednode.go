package resources

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"example.com/cache-operator/internal/replication"
)

// HoldAddress is where a Replicated node's server points as a replica from its start until the
// operator gives it a role (replication.Member.Held): the pod's own loopback, at a port nothing
// in the pod listens on, so the connection is refused at once and never leaves the pod.
var HoldAddress = replication.Address{IP: "127.0.0.1", Port: 1}

// replicatedNode makes the container a node of a Replicated Cache. Its server starts as a
// replica of HoldAddress: it takes no write (READONLY) and serves no replica's resynchronisation
// (NOMASTERLINK) until the operator makes it the primary or a replica of the primary. A primary
// restarted in place (a crash, an OOM kill) comes back so, empty, at the address its replicas
// still point at: it takes no write through the primary's Service meanwhile, and no replica
// throws its keys away to copy its nothing, as they would from an empty primary. The operator
// then promotes the replica furthest into its writes (replication.Next).
//
// Like a Cluster node, it says which pod it is (cluster-announce-human-nodename, which Valkey
// keeps outside Cluster mode too): the operator checks it before it sends a server any command.
//
// A primary whose pod goes of itself (deleted, evicted by a node drain) hands over to a replica in
// sync first, in its preStop hook (scripts/fail-over.sh, Valkey's FAILOVER): the replica takes
// over with every write the primary acknowledged, rather than once the server has gone.
func replicatedNode(c *corev1.Container, cli nodeCLI) {
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
		Command: scriptCommand(failOverScript, "fail-over.sh", cli.local, strconv.FormatInt(HandOverTimeout.Milliseconds(), 10)),
	}}}
	c.Args = append(c.Args,
		"--replicaof", HoldAddress.IP, strconv.Itoa(HoldAddress.Port),
		"--cluster-announce-human-nodename", NodeName("$(POD_NAMESPACE)", "$(POD_NAME)"))
	c.Env = append(c.Env, podField("POD_NAMESPACE", "metadata.namespace"), podField("POD_NAME", "metadata.name"))
}

// HandOverTimeout bounds how long a Replicated primary that hands its role to a replica (FAILOVER,
// in its preStop hook or at the operator's asking in a scale-in) holds its writers while that
// replica catches up; past it, the primary stays the primary.
const HandOverTimeout = 5 * time.Second

// emptyStart are a Replicated node's start steps (startSteps): a replica keeps the copy its last
// sync loaded (rdb-del-sync-files is off by default), and a server restarted in place would load
// it, keys of an older time. It starts empty instead, as a node without persistence should, and
// gets its primary's keys again when it is made its replica.
var emptyStart = []string{"--remove", startRDB}
