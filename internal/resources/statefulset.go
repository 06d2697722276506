package resources

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/readiness"
	"example.com/cache-operator/internal/valkey"
)

const (
	// ContainerName is the name of the Valkey container in a cache node pod.
	ContainerName = "valkey"
	// PortName and Port are Valkey's client port.
	PortName = "valkey"
	Port     = 6379
	// BusPortName and BusPort are the Valkey Cluster bus, where a Cluster Cache's nodes gossip
	// and fail over: Valkey's default of the client port plus 10000.
	BusPortName = "cluster-bus"
	BusPort     = Port + 10000

	// NodeTimeout is how long, in milliseconds, a Cluster node may be unreachable before the
	// others count it failed and promote one of its replicas. Valkey's default is 15 s; a
	// cache is worth serving again sooner than that.
	NodeTimeout = 5000

	// DefaultImageRepository is where the Valkey images come from unless the operator is told
	// to use a mirror.
	DefaultImageRepository = "valkey/valkey"

	// EvictionPolicy suits a cache: when maxmemory is reached, evict the least recently used
	// keys, whatever their TTL. spec.config.maxmemoryPolicy chooses another.
	EvictionPolicy = "allkeys-lru"

	// valkeyUID is the valkey user of the official image.
	valkeyUID = 999

	dataVolume = "data"
	dataPath   = "/data"
)

// MaxMemory is the memory Valkey may use for data on a node with the given memory limit: three
// quarters of what is left once the server's own serverBaseline is set aside. The last quarter is
// for what grows beside the data: a replica's lag beyond the backlog (ReplicationBacklog), the
// pages a fork's child copies as writes land (a backup's snapshot, a replica's full sync) and
// allocator fragmentation, so the kernel's OOM killer never gets there before eviction does.
// Three quarters of the whole limit left too little at the smallest: a 64Mi node, filled and
// evicting under 1 MiB/s of writes while it forked for a full sync, peaked at 62.9 MiB.
func MaxMemory(limit resource.Quantity) int64 {
	return max(limit.Value()-serverBaseline, 0) / 4 * 3
}

// MemoryFor is the smallest memory limit, in whole MiB, whose MaxMemory holds bytes of data.
func MemoryFor(bytes int64) resource.Quantity {
	limit := bytes*4/3 + serverBaseline
	return *resource.NewQuantity((limit+1<<20-1)>>20<<20, resource.BinarySI)
}

// ReplicationBacklog is how much of its replication stream a server with the given memory limit
// keeps for a replica that reconnects to resume from without a full resync: a sixteenth of what
// is left once serverBaseline is set aside. A primary keeps one buffer of the stream, shared by
// the backlog and by the writes each replica has yet to receive. Valkey counts the backlog within
// maxmemory, but what a replica lags beyond it outside, where eviction never trims it; so a
// replica may lag by twice the backlog before the primary drops it (it then resyncs), and what
// is uncounted stays within a sixteenth, a quarter of the quarter beyond maxmemory, leaving the
// rest for a fork's copies. Valkey's defaults, a backlog of 10 MiB and a replica dropped only
// 256 MiB behind (or 64 MiB behind for a minute), took a quarter of a 64Mi node's maxmemory,
// and let a filled 256Mi primary, flooded with writes while its replicas fell behind on a busy
// node, grow into the OOM killer.
func ReplicationBacklog(limit resource.Quantity) int64 {
	return max(limit.Value()-serverBaseline, 0) / 16
}

// serverBaseline is what a Valkey server takes besides its data and its replication stream: its
// own code and heap, and its clients' buffers, a few MiB.
const serverBaseline = 8 << 20

// Image is the Valkey image for a version, from the given repository.
func Image(repository, version string) string {
	return fmt.Sprintf("%s:%s", repository, version)
}

// StatefulSet is the StatefulSet that runs a Cache's nodes, with pods of the images given.
func StatefulSet(cache *cachev2.Cache, images Images) *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:      cache.Name,
			Namespace: cache.Namespace,
			Labels:    Labels(cache),
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(cache.Spec.Nodes()),
			ServiceName: cache.Name,
			Selector:    &metav1.LabelSelector{MatchLabels: SelectorLabels(cache)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(cache)},
				Spec: corev1.PodSpec{
					SecurityContext:           podSecurityContext(),
					TopologySpreadConstraints: spreadOut(cache),
					Containers:                []corev1.Container{valkeyContainer(cache, images.ValkeyRepository), readinessContainer(cache, images.Agent)},
					Volumes:                   []corev1.Volume{dataVolumeSource(cache.Spec.Memory)},
				},
			},
		},
	}
	// No node waits for another to start: a Standalone Cache's nodes are independent, and the
	// operator forms a Cluster once every node answers. So the StatefulSet controller creates
	// and removes a Cache's pods all at once rather than one at a time, each after the previous
	// one is Ready. The policy is immutable: a StatefulSet made by an earlier release keeps the
	// default it was created with (mergeStatefulSet sets it at creation only).
	sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	if cache.Spec.Mode == cachev2.ModeCluster {
		// The operator restarts a Cluster's pods itself, in the order that keeps every shard
		// serving (topology.Roll): replicas first, each back in sync before the next, and a
		// primary only after a replica has taken over. The StatefulSet controller's rolling
		// update knows nothing of shards and would restart a primary and its replica back to
		// back; a partitioned rollout still goes by ordinal, which says nothing about who is
		// primary after a failover. So the StatefulSet only makes new pods from the new
		// template when the operator deletes old ones.
		sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
	if cache.Spec.TLS != nil {
		sts.Spec.Template.Spec.Volumes = append(sts.Spec.Template.Spec.Volumes, tlsVolumeSource(cache))
	}
	if cache.Spec.MetricsEnabled() {
		sts.Spec.Template.Spec.Containers = append(sts.Spec.Template.Spec.Containers, exporterContainer(cache, images.Exporter))
	}
	applyPodSettings(&sts.Spec.Template, cache.Spec.Pod)
	sts.Annotations = map[string]string{AnnotationTemplateWritten: ownedTemplateDigest(&sts.Spec.Template)}
	return sts
}

// mergeStatefulSet makes dst, a stored StatefulSet or a new empty one, match desired in the
// fields the operator owns: its labels, replicas, the pod labels, the pod security context,
// affinity and spread, the Valkey container, the readiness agent, the exporter, the data volume
// and the TLS volume.
// Everything else is left as it is: the fields the API server defaults, annotations on the pod
// template such as the one `kubectl rollout restart` sets, labels and containers added by
// others. So a stored StatefulSet that already matches comes out unchanged, and the caller
// writes nothing.
func mergeStatefulSet(dst, desired *appsv1.StatefulSet) {
	mergeLabels(&dst.Labels, desired.Labels)
	if dst.CreationTimestamp.IsZero() {
		// The selector and the governing Service are immutable: they are set at creation only.
		dst.Spec.Selector = desired.Spec.Selector
		dst.Spec.ServiceName = desired.Spec.ServiceName
		dst.Spec.PodManagementPolicy = desired.Spec.PodManagementPolicy
	}
	if dst.CreationTimestamp.IsZero() || ownedTemplateDigest(&dst.Spec.Template) != ownedTemplateDigest(&desired.Spec.Template) {
		// A restore's init step is the pods' from the start and goes with the first rollout once
		// the restore is over (desired has none then); during a restore a rollout gives it the
		// running release's agent image. It is not an owned field, so that its removal alone
		// restarts no pod (it does nothing once the restore is over: RestoreInitContainer); kept
		// for good, it would pin the release that made it, whose image a registry may prune.
		dst.Spec.Template.Spec.InitContainers = desired.Spec.Template.Spec.InitContainers
	}
	dst.Spec.Replicas = desired.Spec.Replicas
	if desired.Spec.UpdateStrategy.Type != "" {
		// Set for a Cluster only; a Standalone Cache keeps the server's default, rolling.
		dst.Spec.UpdateStrategy = desired.Spec.UpdateStrategy
	}

	mergeOwnedTemplate(&dst.Spec.Template, &desired.Spec.Template)
	mergeAnnotations(&dst.Annotations, map[string]string{AnnotationTemplateWritten: ownedTemplateDigest(&dst.Spec.Template)})
}

// mergeOwnedTemplate copies into dst the pod template fields that the operator owns, as src has
// them, and leaves every other field of dst alone. It is the one list of those fields: the merge
// applies it to a stored template, and the digest the informer keeps of a template
// (ownedTemplateDigest) applies it to an empty one.
func mergeOwnedTemplate(dst, src *corev1.PodTemplateSpec) {
	for _, key := range podLabelKeys {
		if value, ok := src.Labels[key]; ok {
			mergeLabels(&dst.Labels, map[string]string{key: value})
		}
	}
	dst.Spec.SecurityContext = src.Spec.SecurityContext
	// The anti-affinity of earlier releases goes with their template; the spread replaces it.
	dst.Spec.Affinity = src.Spec.Affinity
	dst.Spec.TopologySpreadConstraints = src.Spec.TopologySpreadConstraints
	mergePodSettings(dst, src)
	for i := range src.Spec.Containers {
		if c := &src.Spec.Containers[i]; c.Name == ContainerName || c.Name == ReadinessContainerName {
			mergeContainer(&dst.Spec.Containers, c)
		}
	}
	mergeExporter(dst, src)
	for _, v := range src.Spec.Volumes {
		if v.Name == dataVolume || v.Name == TLSVolume {
			upsertByName(&dst.Spec.Volumes, v, func(v corev1.Volume) string { return v.Name })
		}
	}
}

// mergeContainer sets the owned fields of the container named like want, adding it with only
// those if missing (the API server defaults the rest).
func mergeContainer(containers *[]corev1.Container, want *corev1.Container) {
	for i := range *containers {
		if c := &(*containers)[i]; c.Name == want.Name {
			setOwnedContainerFields(c, want)
			return
		}
	}
	c := corev1.Container{Name: want.Name}
	setOwnedContainerFields(&c, want)
	*containers = append(*containers, c)
}

// setOwnedContainerFields copies the fields of a container that the operator owns.
// Fields the API server defaults (image pull policy, termination message path and policy) are
// not owned, so they keep the server's values.
func setOwnedContainerFields(dst, src *corev1.Container) {
	dst.Image = src.Image
	dst.Command = src.Command
	dst.Args = src.Args
	dst.Env = src.Env
	dst.Ports = src.Ports
	dst.Resources = src.Resources
	dst.ReadinessProbe = src.ReadinessProbe
	dst.LivenessProbe = src.LivenessProbe
	dst.Lifecycle = src.Lifecycle
	dst.SecurityContext = src.SecurityContext
	dst.VolumeMounts = src.VolumeMounts
}

func upsertByName[T any](items *[]T, want T, name func(T) string) {
	for i := range *items {
		if name((*items)[i]) == name(want) {
			(*items)[i] = want
			return
		}
	}
	*items = append(*items, want)
}

// The builders below spell out every field that the API server would otherwise default inside
// the structs the operator owns (probe timings, port protocols), so that a stored StatefulSet
// compares equal to the desired one and an unchanged pass writes nothing.

func valkeyContainer(cache *cachev2.Cache, imageRepository string) corev1.Container {
	memory := cache.Spec.Memory
	cpuRequest, cpuLimit := cpuResources(cache.Spec.Pod)
	cli := cliOf(cache)
	c := corev1.Container{
		Name:  ContainerName,
		Image: Image(imageRepository, cache.Spec.Version),
		Args: slices.Concat([]string{"valkey-server"}, listening(cache), []string{
			"--maxmemory", strconv.FormatInt(MaxMemory(memory), 10),
			"--repl-backlog-size", strconv.FormatInt(ReplicationBacklog(memory), 10),
			// A hard limit only: a replica behind by more is dropped at once, however briefly.
			"--client-output-buffer-limit", fmt.Sprintf("replica %d 0 0", 2*ReplicationBacklog(memory)),
		}, valkeyConfigArgs(cache.Spec.Config), []string{
			// A cache keeps nothing on disk: no snapshots, no append-only file. The server
			// still forks for a backup's snapshot and for a replica's full sync, both streamed
			// over the network (repl-diskless-sync, on by default); the child's copy-on-write
			// pages count against the memory limit, within the quarter kept beyond maxmemory.
			"--save", "",
			"--appendonly", "no",
			"--repl-diskless-load", disklessLoad(cache.Spec.Version),
		}),
		Ports: []corev1.ContainerPort{{Name: PortName, ContainerPort: Port, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceMemory:           memory,
				corev1.ResourceCPU:              cpuRequest,
				corev1.ResourceEphemeralStorage: memory,
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: memory},
		},
		ReadinessProbe: readinessProbe(),
		LivenessProbe: probe(corev1.ProbeHandler{
			TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(PortName)},
		}, 10),
		SecurityContext: containerSecurityContext(),
		VolumeMounts:    []corev1.VolumeMount{{Name: dataVolume, MountPath: dataPath}},
	}
	switch {
	case cache.Spec.Mode == cachev2.ModeCluster:
		clusterNode(&c, cache.Spec.Version, cache.Spec.Auth != nil, cli)
	case cache.Spec.RestoreFrom != nil:
		c.Command = startRestored
	}
	if cache.Spec.Auth != nil {
		authenticated(&c, cache)
	}
	if cache.Spec.TLS != nil {
		servingTLS(&c, cache)
	}
	if cpuLimit != nil {
		c.Resources.Limits[corev1.ResourceCPU] = *cpuLimit
	}
	return c
}

// Environment variables of a Valkey container with auth.
const (
	// envACL holds the ACL file, which the entrypoint writes to aclFile before the server
	// starts: so a server restarted in place loads the users as the ACL Secret has them then.
	envACL = "VALKEY_ACL"
	// envReplicationPassword holds the replication user's password (masterauth).
	envReplicationPassword = "VALKEY_REPLICATION_PASSWORD"
	// envCLIAuth is the password valkey-cli authenticates with: the node user's, for a
	// Cluster node's preStop hook.
	envCLIAuth = "REDISCLI_AUTH"

	aclFile = "users.acl"
)

// authenticated makes the container's server require credentials: it loads the ACL file of the
// Cache's ACL Secret, and a replica authenticates to its primary as the replication user. A
// Cluster node's preStop hook speaks as the node user (cliOf).
func authenticated(c *corev1.Container, cache *cachev2.Cache) {
	secret := ACLSecretName(cache)
	c.Env = append(c.Env, secretKey(envACL, secret, ACLFileKey, false))
	c.Args = append(c.Args, "--aclfile", aclFile)
	if cache.Spec.Mode == cachev2.ModeCluster {
		c.Env = append(c.Env, secretKey(envCLIAuth, secret, NodeUser, false), secretKey(envReplicationPassword, secret, ReplicationUser, false))
		c.Args = append(c.Args, "--masteruser", ReplicationUser, "--masterauth", "$("+envReplicationPassword+")")
	}
	c.Command = writingACL(c.Command)
}

// nodeCLI is how a node's preStop hook calls valkey-cli: local, to the pod's own
// server; peer, to another node, or empty to call it as local with another host and port.
type nodeCLI struct{ local, peer string }

// cliOf is how valkey-cli is called in a Cache's pods: as the node user with auth, with the
// password in envCLIAuth; with TLS, to the pod's own server through its Unix socket, which
// needs no certificate, and to another node over TLS, with the node's certificate.
func cliOf(cache *cachev2.Cache) nodeCLI {
	cli := "valkey-cli"
	if cache.Spec.Auth != nil {
		cli += " --user " + NodeUser
	}
	if cache.Spec.TLS == nil {
		return nodeCLI{local: cli + " -p " + strconv.Itoa(Port)}
	}
	return nodeCLI{local: cli + " -s " + socketFile, peer: cli + " " + strings.Join(tlsClientArgs, " ")}
}

// writingACL is the entrypoint command that writes the ACL file from envACL and then runs
// command's script, or the server when command is nil.
func writingACL(command []string) []string {
	write := `printf '%s\n' "$` + envACL + `" > ` + aclFile + ` && `
	if command == nil {
		return []string{"sh", "-c", write + `exec "$@"`, "--"}
	}
	command = slices.Clone(command)
	command[2] = write + command[2]
	return command
}

// clusterNode makes the container a Valkey Cluster node. It announces its pod IP, which is how
// the other nodes and cluster clients reach it. It is ready once it serves slots as a primary or
// is a replica in sync with its primary (readiness.ClusterNodeReady, which the readiness agent
// answers its probe with): the PodDisruptionBudget counts a node not yet a replica in sync as
// unavailable, so a drain never takes its shard's primary meanwhile. The operator brings
// a node into the cluster whether or not it is ready, and judges the cluster's own health in the
// Cache's Ready condition.
//
// Every start of the container is a new, empty node (see startFresh), and it starts fenced: it
// refuses to serve a replica's SYNC until the operator lifts the fence (FenceRule).
//
// A primary whose pod goes of itself hands its shard over to a replica first, in its preStop hook
// (handOverScript), and stays up as its replica until the hook ends: clients are redirected to the
// new primary by the old one (MOVED) rather than find it gone. Since 9.0 the server can hand over
// on SIGTERM too (valkey.FailsOverOnShutdown), which it then does for a primary the hook could not
// hand over: it pauses its writes, waits for a replica to catch up, tells it to take over and
// exits. Alone it is no better for clients (docs/benchmark.md: 5 pod deletions each on 9.1.2, a
// median of 1 failed request either way), and 8.x needs the hook anyway: one way on every
// release, with the server's as the second chance.
func clusterNode(c *corev1.Container, version string, auth bool, cli nodeCLI) {
	c.Command = startFresh
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
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: handOverScript(cli)}}}
	if valkey.FailsOverOnShutdown(version) {
		// The hook's 10 s and then the server's wait for a replica, at most shutdown-timeout
		// (10 s), fit in the pod's grace period (30 s).
		c.Args = append(c.Args, "--shutdown-on-sigterm", "failover")
	}
}

// handOverScript is a Cluster node's preStop hook. A pod that goes of itself (deleted, evicted by a
// node drain) would otherwise take its shard's primary with it: clients then fail until the other
// nodes find it gone and its replica is elected, a few seconds. So a primary with a
// replica in sync first asks a connected replica, at the address the cluster announces, to take
// over (CLUSTER FAILOVER: the primary holds its clients while the replica catches up, then the
// replica serves, and no acknowledged write is lost), and waits, at most 10 s, until it is a
// replica itself; the server is stopped after. A replica, a primary with no replica in sync, or
// a failover refused: nothing happens, as before. The operator's own restarts hand over first
// already (topology.Roll), and find a replica here.
//
// The replica's address is as Valkey prints it, ip:port@cport, an IPv6 address without brackets:
// the port is what follows the last colon.
//
// With TLS, the replica is asked over TLS, at Port: the hook's own connection, through the
// socket, is in plain text, and to such a connection Valkey reports the nodes' plain-text port,
// which is 0 (off), not the TLS port they serve on.
func handOverScript(cli nodeCLI) []string {
	script, peer := `cli="`+cli.local+`"`+"\n", `$cli -h "$host" -p "$port"`
	if cli.peer != "" {
		script, peer = script+`peer="`+cli.peer+`"`+"\n", `$peer -h "$host" -p `+strconv.Itoa(Port)
	}
	return []string{"sh", "-c", script + `[ "$($cli ROLE | head -n 1)" = master ] && $cli INFO replication | grep -q '^slave[0-9]*:.*state=online' || exit 0
addr=$($cli CLUSTER REPLICAS "$($cli CLUSTER MYID)" | awk '$8 == "connected" && $3 !~ /fail/ { print $2; exit }')
addr=${addr%%@*}
host=${addr%:*} port=${addr##*:}
[ -n "$host" ] && ` + peer + ` CLUSTER FAILOVER | grep -q OK || exit 0
for i in $(seq 50); do
  [ "$($cli ROLE | head -n 1)" = slave ] && exit 0
  sleep 0.2
done`}
}

// podField is an environment variable that holds a field of the pod (the downward API).
func podField(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

// NodeName is what a Cluster node says it is (cluster-announce-human-nodename): its pod, by
// namespace and name. The operator checks it before it sends a server any command, so that an
// address that has since gone to another pod (a stale informer, a reused IP) never gets a
// command meant for the pod it had.
func NodeName(namespace, pod string) string { return namespace + "/" + pod }

// ClusterConfigFile is where a Cluster node keeps its identity and its view of the cluster, in
// its data directory.
const ClusterConfigFile = "nodes.conf"

// startFresh is a Cluster node's entrypoint: it removes the node's identity and data before
// starting the server, whose arguments follow. A container restarted in place (a crash, an OOM
// kill, a failed liveness probe) keeps the pod's IP and its data volume. With its old nodes.conf
// it would come back as the same node, still the owner of its slots, and serve them empty (a
// primary writes no RDB: persistence is off); its replica would resynchronise from it and empty
// too. Without it, the server is a new node with no slot, and the old one, whose address the new
// one now answers at, is healed like a departed node: its replica takes over.
//
// The RDB goes too: a replica keeps the copy its last sync loaded (rdb-del-sync-files is off by
// default), and a new node that loads keys at start claims their slots, which their owner holds.
// The one RDB a node may start with is a restore's (backup.RestoreRDB), which its init step downloads:
// it is loaded once, at the first start, and gone for any later one.
var startFresh = []string{"sh", "-c", `rm -f ` + ClusterConfigFile + ` ` + startRDB + ` && ` + takeRestore + `exec "$@"`, "--"}

// startRDB is the file a server loads at start (dbfilename's default).
const startRDB = "dump.rdb"

// takeRestore makes a restore's RDB (backup.RestoreRDB), if the init step left one, the server's
// to load.
const takeRestore = `{ ! [ -f ` + backup.RestoreRDB + ` ] || mv ` + backup.RestoreRDB + ` ` + startRDB + `; } && `

// startRestored is a Standalone node's entrypoint when its Cache is restored from a backup: the
// restore's RDB is loaded at the first start only, and a later start, a restart in place, is
// empty, as any Standalone node's (persistence is off), rather than back at the backup's data.
var startRestored = []string{"sh", "-c", `rm -f ` + startRDB + ` && ` + takeRestore + `exec "$@"`, "--"}

// FenceRule is the rule for Valkey's default user with which a Cluster node starts: everything
// but SYNC and PSYNC. A node that starts at the address of a node that crashed would otherwise
// be asked by the crashed node's replica, which reconnects to that address every second, to
// resynchronise, and the replica would throw its keys away for the new node's none: Valkey
// checks no node ID on replication. The operator lifts the fence (Unfence) once no member
// replicates a node that is gone.
var FenceRule = []string{"default", "on", "nopass", "~*", "&*", "+@all", "-sync", "-psync"}

// probeTimeoutSeconds is how long a probe of the Valkey container may take: a second more than
// the readiness agent takes to give up on its server, so that a server that hangs is reported
// as not ready, with why, rather than as a probe timed out. It is 5 s, not the kubelet's default
// of 1: on a node short of CPU, or in a container at its CPU limit (spec.pod.cpu), an answer can
// take longer than a second while the server serves well; three such timeouts in a row would
// take a healthy node out of its Service and its budget, and, for liveness, restart it empty.
const probeTimeoutSeconds = int32(readiness.CheckTimeout/time.Second) + 1

// probe is a probe of the Valkey container, every periodSeconds.
func probe(handler corev1.ProbeHandler, periodSeconds int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     handler,
		PeriodSeconds:    periodSeconds,
		TimeoutSeconds:   probeTimeoutSeconds,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
}

// PodReady reports whether the pod is ready, as its readiness probe says, and not going away.
func PodReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podSecurityContext meets the restricted Pod Security Standard.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](valkeyUID),
		RunAsGroup:     ptr.To[int64](valkeyUID),
		FSGroup:        ptr.To[int64](valkeyUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurityContext is a container's part of the restricted Pod Security Standard, with a
// read-only root filesystem: what a container writes goes to a volume.
func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// spreadOut asks the scheduler to spread a Cache's pods evenly over the nodes and over the zones,
// so that losing one machine, or one zone, loses as little of the cache as possible: with a pod
// per node, no node holds a shard's primary and its replica (where the scheduler must put two on
// one node, the operator keeps them in different shards, see topology.attachReplicas). The
// constraints are soft: pods are scheduled on fewer nodes or zones rather than left pending. They
// cost the scheduler no more than the preferred pod anti-affinity they replace (docs/benchmark.md,
// Placement), and count only the nodes the pods may run on (spec.pod.nodeSelector).
func spreadOut(cache *cachev2.Cache) []corev1.TopologySpreadConstraint {
	selector := &metav1.LabelSelector{MatchLabels: SelectorLabels(cache)}
	return []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: selector},
		{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: selector},
	}
}

// dataVolumeSource is Valkey's working directory, on the node's disk: the root filesystem is
// read-only. What lands there is an RDB of the node's data, which is at most about its memory
// (maxmemory, three quarters of it, and the encoding overhead an RDB sheds): the restore's, which
// the server loads at its first start and keeps until a restart, and on 8.0, which cannot load a
// full sync into a server holding data without a file (disklessLoad), the sync's, kept after the
// load, beside the next sync's while it arrives. So the volume is limited to twice the memory
// (past it the kubelet evicts the pod rather than let it fill the node's disk), and the Valkey
// container requests the memory's size of the node's disk (ephemeral storage): a node short of
// disk evicts first the pods that use more than they request, which a cache pod then does not.
func dataVolumeSource(memory resource.Quantity) corev1.Volume {
	return corev1.Volume{
		Name: dataVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: resource.NewQuantity(2*memory.Value(), resource.BinarySI),
		}},
	}
}

// disklessLoad is how a replica loads a full sync: straight from the network into memory, never
// through a file on the data volume. Since 8.1 (flush-before-load) it empties itself first, as a
// cache loses nothing by it: the data was going anyway, and keeping it while the new data loads
// (swapdb) would need twice the memory. 8.0 loads that way only into an empty server
// (on-empty-db), as when it has just started; otherwise it writes the sync to a file first.
func disklessLoad(version string) string {
	if valkey.OlderVersion(version, "8.1.0") {
		return "on-empty-db"
	}
	return "flush-before-load"
}
