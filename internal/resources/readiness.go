package resources

import (
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/readiness"
)

// This file is the readiness agent that runs beside Valkey in every pod of a Cache (package
// readiness), and the Valkey container's readiness probe, which asks it.

const (
	// ReadinessContainerName is the readiness agent's container in a Cache's pods.
	ReadinessContainerName = "cache-readiness"
	// ReadinessPortName names the agent's port.
	ReadinessPortName = "readiness"
)

// readinessProbe is the Valkey container's readiness probe: an HTTP GET of the agent beside it,
// which the kubelet sends itself, with no process started in the container. The agent answers
// with what the server reports (readiness.ClusterNodeReady for a Cluster node; a Standalone
// node is ready when it answers). Should the agent not answer, the server is not ready: no pod
// counts as ready that nothing vouches for.
func readinessProbe() *corev1.Probe {
	return probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path:   readiness.Path,
		Port:   intstr.FromInt32(readiness.Port),
		Scheme: corev1.URISchemeHTTP,
	}}, readinessPeriodSeconds)
}

// readinessPeriodSeconds is how often the kubelet asks the agent. Every restart of an ordered
// upgrade, a drain or a scale-out waits for the new pod to be ready before the next one starts,
// and a pod is ready only at the first probe after its server is: every 5 s, the kubelet's
// probe, not the server, set the pace of an upgrade (2.5 s of each pod's restart on average).
// A probe costs the agent one question to a server it keeps a connection to, and the kubelet
// one HTTP request.
const readinessPeriodSeconds = 2

// readinessContainer is the readiness agent beside the Cache's server, from the operator's own
// image. It reaches its server as the pod's other containers do: at 127.0.0.1, or with TLS through
// the server's Unix socket, which needs no certificate; with auth, as the node user. It
// lives as long as the server: stopped with the pod, it answers until its server is gone.
func readinessContainer(cache *cachev2.Cache, image string) corev1.Container {
	options := readiness.Options{Cluster: cache.Spec.Mode == cachev2.ModeCluster, Replicated: cache.Spec.Mode == cachev2.ModeReplicated, ServerPort: Port}
	c := corev1.Container{
		Name:  ReadinessContainerName,
		Image: image,
		Ports: []corev1.ContainerPort{{Name: ReadinessPortName, ContainerPort: readiness.Port, Protocol: corev1.ProtocolTCP}},
		// It took 9 MB on its own, and a few milliseconds of CPU per probe.
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
		},
		// Go's runtime collects before it nears the limit.
		Env: []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "24MiB"}},
		LivenessProbe: probe(corev1.ProbeHandler{
			TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(ReadinessPortName)},
		}, 10),
		SecurityContext: containerSecurityContext(),
	}
	if cache.Spec.TLS != nil {
		options.Socket = path.Join(dataPath, socketFile)
		c.VolumeMounts = []corev1.VolumeMount{{Name: dataVolume, MountPath: dataPath, ReadOnly: true}}
	}
	if cache.Spec.Auth != nil {
		options.User = NodeUser
		c.Env = append(c.Env, secretKey(readiness.EnvPassword, ACLSecretName(cache), NodeUser, false))
	}
	c.Command = options.Command()
	return c
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
