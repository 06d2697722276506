package resources

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/readiness"
	"example.com/cache-operator/internal/valkey"
)

// valkeyContainer is the container of a cache node's Valkey server, as every Cache's pods run it.
// It and the builders it calls spell out every field that the API server would otherwise default
// inside the structs the operator owns (probe timings, port protocols), so that a stored
// StatefulSet compares equal to the desired one and an unchanged pass writes nothing.
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
			// A primary streams a full sync at once, rather than after Valkey's default of 5 s
			// spent waiting for more replicas to share the fork: the operator restarts one node
			// at a time, so none comes, and every restarted replica of an upgrade, a drain or a
			// heal, and every backup, waited those 5 s with its shard one copy short.
			"--repl-diskless-sync-delay", "0",
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
	switch cache.Spec.Mode { //nolint:exhaustive // a Standalone node is the server as the image starts it
	case cachev2.ModeCluster:
		clusterNode(&c, cache.Spec.Version, cache.Spec.Auth != nil, cli)
	case cachev2.ModeReplicated:
		replicatedNode(&c, cli)
	}
	if cache.Spec.Auth != nil {
		authenticated(&c, cache)
	}
	if steps := startSteps(cache); steps != nil {
		c.Command = scriptCommand(startScript, "start.sh", append(steps, "--")...)
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
	// envACL holds the ACL file, which the container's command writes to aclFile before the
	// server starts (startSteps): so a server restarted in place loads the users as the ACL
	// Secret has them then. scripts/start.sh reads it by this name.
	envACL = "VALKEY_ACL"
	// envReplicationPassword holds the replication user's password (masterauth).
	envReplicationPassword = "VALKEY_REPLICATION_PASSWORD"
	// envCLIAuth is the password valkey-cli authenticates with: the node user's, for the
	// preStop hook of a Cluster or Replicated node.
	envCLIAuth = "REDISCLI_AUTH"

	aclFile = "users.acl"
)

// authenticated makes the container's server require credentials: it loads the ACL file of the
// Cache's ACL Secret, and a replica authenticates to its primary as the replication user. The
// preStop hook of a Cluster or Replicated node speaks as the node user (cliOf).
func authenticated(c *corev1.Container, cache *cachev2.Cache) {
	secret := ACLSecretName(cache)
	c.Env = append(c.Env, secretKey(envACL, secret, ACLFileKey, false))
	c.Args = append(c.Args, "--aclfile", aclFile)
	if cache.Spec.Mode != cachev2.ModeStandalone {
		c.Env = append(c.Env, secretKey(envCLIAuth, secret, NodeUser, false), secretKey(envReplicationPassword, secret, ReplicationUser, false))
		c.Args = append(c.Args, "--masteruser", ReplicationUser, "--masterauth", "$("+envReplicationPassword+")")
	}
}

// startSteps are what the Valkey container's command (scripts/start.sh) does in the data directory
// before it starts the server, in order, or nil when there is nothing to do and the image's
// entrypoint starts it: with auth, the ACL file written (envACL); on a Cluster node, its identity
// and data removed (freshStart); on a Standalone node restored from a backup, the data of an
// earlier start removed (restoredStart); on both, a restore's RDB taken as the one the server
// loads (takeRestore); and on a Replicated node, its data removed (emptyStart), then, restored,
// a restore's RDB taken (a Cache made before restores of Replicated Caches keeps its command).
func startSteps(cache *cachev2.Cache) []string {
	var steps []string
	if cache.Spec.Auth != nil {
		steps = append(steps, "--write-acl", aclFile)
	}
	switch {
	case cache.Spec.Mode == cachev2.ModeCluster:
		steps = slices.Concat(steps, freshStart, takeRestore)
	case cache.Spec.Mode == cachev2.ModeReplicated && cache.Spec.RestoreFrom != nil:
		steps = slices.Concat(steps, emptyStart, takeRestore)
	case cache.Spec.Mode == cachev2.ModeReplicated:
		steps = slices.Concat(steps, emptyStart)
	case cache.Spec.RestoreFrom != nil:
		steps = slices.Concat(steps, restoredStart, takeRestore)
	}
	return steps
}

// nodeCLI is how a node's preStop hook calls valkey-cli: local, to the pod's own server; peer,
// to another node, port included, or empty to call it as local with the port Valkey prints.
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
	return nodeCLI{local: cli + " -s " + socketFile, peer: cli + " " + strings.Join(tlsClientArgs, " ") + " -p " + strconv.Itoa(Port)}
}

// podField is an environment variable that holds a field of the pod (the downward API).
func podField(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

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
