package resources

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/valkey"
)

// clusterNode makes the container a Valkey Cluster node. It announces its pod IP, which is how
// the other nodes and cluster clients reach it. It is ready once it serves slots as a primary or
// is a replica in sync with its primary (readiness.ClusterNodeReady, which the readiness agent
// answers its probe with): the PodDisruptionBudget counts a node not yet a replica in sync as
// unavailable, so a drain never takes its shard's primary meanwhile. The operator brings
// a node into the cluster whether or not it is ready, and judges the cluster's own health in the
// Cache's Ready condition.
//
// Every start of the container is a new, empty node (freshStart), and it starts fenced: it
// refuses to serve a replica's SYNC until the operator lifts the fence (FenceRule).
//
// A primary whose pod goes of itself hands its shard over to a replica first, in its preStop hook
// (handOverCommand), and stays up as its replica until the hook ends: clients are redirected to the
// new primary by the old one (MOVED) rather than find it gone. Since 9.0 the server can hand over
// on SIGTERM too (valkey.FailsOverOnShutdown), which it then does for a primary the hook could not
// hand over: it pauses its writes, waits for a replica to catch up, tells it to take over and
// exits. Alone it is no better for clients (docs/benchmark.md: 5 pod deletions each on 9.1.2, a
// median of 1 failed request either way), and 8.x needs the hook anyway: one way on every
// release, with the server's as the second chance.
func clusterNode(c *corev1.Container, version string, auth bool, cli nodeCLI) {
	c.Args = append(c.Args,
		"--cluster-enabled", "yes",
		"--cluster-config-file", ClusterConfigFile,
		"--cluster-node-timeout", strconv.Itoa(NodeTimeout),
		"--cluster-announce-ip", "$(POD_IP)",
		"--cluster-announce-human-nodename", NodeName("$(POD_NAMESPACE)", "$(POD_NAME)"),
		"--cluster-port", strconv.Itoa(BusPort),
		// Any replica may stand for election, however long it has been cut off from its
		// primary: a cache would rather serve slightly stale keys than none (Valkey's default,
		// 10, can keep every replica of a shard from standing).
		"--cluster-replica-validity-factor", "0",
		// A shard with no node left to serve it (its primary gone, no replica, or its replicas
		// gone too) takes only its own slots down: the other shards keep serving theirs.
		// Valkey's default, yes, answers CLUSTERDOWN for every key until the shard is back or
		// healed, and with replicasPerShard 0 a node drain evicts a primary at a time.
		"--cluster-require-full-coverage", "no")
	if !auth {
		// With auth, the ACL file fences the replication user instead (ReplicationFence).
		c.Args = append(c.Args, "--user")
		c.Args = append(c.Args, FenceRule...)
	}
	c.Env = []corev1.EnvVar{podField("POD_IP", "status.podIP"), podField("POD_NAMESPACE", "metadata.namespace"), podField("POD_NAME", "metadata.name")}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: BusPortName, ContainerPort: BusPort, Protocol: corev1.ProtocolTCP})
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: handOverCommand(cli)}}}
	if valkey.FailsOverOnShutdown(version) {
		// The hook's 10 s and then the server's wait for a replica, at most shutdown-timeout
		// (10 s), fit in the pod's grace period (30 s).
		c.Args = append(c.Args, "--shutdown-on-sigterm", "failover")
	}
}

// handOverCommand is a Cluster node's preStop hook (scripts/hand-over.sh). A pod that goes of
// itself (deleted, evicted by a node drain) would otherwise take its shard's primary with it:
// clients then fail until the other nodes find it gone and its replica is elected, a few seconds.
// So a primary with a replica in sync first asks a connected replica, at the address the cluster
// announces, to take over (CLUSTER FAILOVER: the primary holds its clients while the replica
// catches up, then the replica serves, and no acknowledged write is lost), and waits, at most
// 10 s, until it is a replica itself; the server is stopped after. A replica, a primary with no
// replica in sync, or a failover refused: nothing happens, as before. The operator's own restarts
// hand over first already (topology.Roll), and find a replica here.
//
// With TLS, the replica is asked over TLS, at Port: the hook's own connection, through the
// socket, is in plain text, and to such a connection Valkey reports the nodes' plain-text port,
// which is 0 (off), not the TLS port they serve on.
func handOverCommand(cli nodeCLI) []string {
	return scriptCommand(handOverScript, "hand-over.sh", cli.local, cli.peer)
}

// NodeName is what a Cluster node says it is (cluster-announce-human-nodename): its pod, by
// namespace and name. The operator checks it before it sends a server any command, so that an
// address that has since gone to another pod (a stale informer, a reused IP) never gets a
// command meant for the pod it had.
func NodeName(namespace, pod string) string { return namespace + "/" + pod }

// ClusterConfigFile is where a Cluster node keeps its identity and its view of the cluster, in
// its data directory.
const ClusterConfigFile = "nodes.conf"

// freshStart are a Cluster node's start steps (startSteps): they remove the node's identity and
// data before the server starts. A container restarted in place (a crash, an OOM kill, a failed
// liveness probe) keeps the pod's IP and its data volume. With its old nodes.conf it would come
// back as the same node, still the owner of its slots, and serve them empty (a primary writes no
// RDB: persistence is off); its replica would resynchronise from it and empty too. Without it,
// the server is a new node with no slot, and the old one, whose address the new one now answers
// at, is healed like a departed node: its replica takes over.
//
// The RDB goes too: a replica keeps the copy its last sync loaded (rdb-del-sync-files is off by
// default), and a new node that loads keys at start claims their slots, which their owner holds.
// The one RDB a node may start with is a restore's (backup.RestoreRDB), which its init step
// downloads: it is loaded once, at the first start (takeRestore), and gone for any later one.
var freshStart = []string{"--remove", ClusterConfigFile, "--remove", startRDB}

// startRDB is the file a server loads at start (dbfilename's default).
const startRDB = "dump.rdb"

// takeRestore are the start steps that make a restore's RDB (backup.RestoreRDB), if the init step
// left one, the server's to load.
var takeRestore = []string{"--take", backup.RestoreRDB, startRDB}

// restoredStart are the start steps of a Standalone node whose Cache is restored from a backup,
// before takeRestore: the restore's RDB is loaded at the first start only, and a later start, a
// restart in place, is empty, as any Standalone node's (persistence is off), rather than back at
// the backup's data.
var restoredStart = []string{"--remove", startRDB}

// FenceRule is the rule for Valkey's default user with which a Cluster node starts: everything
// but SYNC and PSYNC. A node that starts at the address of a node that crashed would otherwise
// be asked by the crashed node's replica, which reconnects to that address every second, to
// resynchronise, and the replica would throw its keys away for the new node's none: Valkey
// checks no node ID on replication. The operator lifts the fence (Unfence) once no member
// replicates a node that is gone.
var FenceRule = []string{"default", "on", "nopass", "~*", "&*", "+@all", "-sync", "-psync"}
