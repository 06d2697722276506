package resources

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	cachev2 "example.com/cache-operator/api/v2"
)

// This file is the metrics exporter that runs beside Valkey in the pods of a Cache with
// spec.metrics.enabled: redis_exporter, which asks its own server what it reports (INFO, CLUSTER
// INFO) at each scrape and serves it to Prometheus.

const (
	// ExporterContainerName is the exporter's container in a Cache's pods: a name of the
	// operator's own, so that a sidecar someone else added (a metrics-exporter of their own, say)
	// is never taken for it.
	ExporterContainerName = "cache-exporter"
	// MetricsPortName and MetricsPort are where the exporter serves Prometheus metrics; the
	// install's PodMonitor scrapes the pods' ports of this name.
	MetricsPortName = "metrics"
	MetricsPort     = 9121

	// DefaultExporterImage is the exporter's image unless the operator is told otherwise
	// (--exporter-image): the release the tests run (Debian's build of it), known to read what
	// Valkey 8 reports.
	DefaultExporterImage = "oliver006/redis_exporter:v1.45.0"
)

// Images are the images a Cache's pods run.
type Images struct {
	// ValkeyRepository is the repository of Valkey's image; the Cache's version is the tag.
	ValkeyRepository string
	// Exporter is the metrics exporter's image.
	Exporter string
	// Agent is the operator's own image (--agent-image): its readiness agent runs beside each
	// server, and its restore mode fetches a restored Cache's data.
	Agent string
}

// DefaultImages are the images a Cache's pods run unless the operator is told otherwise.
var DefaultImages = Images{ValkeyRepository: DefaultImageRepository, Exporter: DefaultExporterImage, Agent: DefaultAgentImage}

// Environment variables the exporter reads its credentials from.
const (
	envExporterUser     = "REDIS_USER"
	envExporterPassword = "REDIS_PASSWORD"
)

// exporterContainer is the exporter of a Cache's pod. With auth, it connects as ExporterUser,
// whose password it reads from the ACL Secret: it may read what the server reports, and nothing
// else, so a leak of its password exposes no key. With TLS, it connects through the server's
// Unix socket in the data volume: a connection that never leaves the pod needs no TLS, and the
// exporter no certificate files.
func exporterContainer(cache *cachev2.Cache, image string) corev1.Container {
	server := "redis://localhost:" + strconv.Itoa(Port)
	if cache.Spec.TLS != nil {
		server = "unix://" + dataPath + "/" + socketFile
	}
	c := corev1.Container{
		Name:    ExporterContainerName,
		Image:   image,
		Command: []string{"/redis_exporter"},
		Args: []string{
			"--redis.addr=" + server,
			"--web.listen-address=:" + strconv.Itoa(MetricsPort),
			// Valkey's metrics, not the exporter's own Go runtime's: fewer series per pod.
			"--redis-only-metrics",
		},
		Ports: []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		// No readiness probe: the exporter is ready while it runs, and a server it cannot
		// reach is what it reports (redis_up 0), not a reason to take the node out of service.
		LivenessProbe: probe(corev1.ProbeHandler{
			TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(MetricsPortName)},
		}, 10),
		SecurityContext: containerSecurityContext(),
	}
	if cache.Spec.TLS != nil {
		c.VolumeMounts = []corev1.VolumeMount{{Name: dataVolume, MountPath: dataPath}}
	}
	if cache.Spec.Auth != nil {
		c.Env = []corev1.EnvVar{
			{Name: envExporterUser, Value: ExporterUser},
			secretKey(envExporterPassword, ACLSecretName(cache), ExporterUser, false),
		}
	}
	return c
}

// mergeExporter gives dst the exporter src has, or takes dst's away when src has none: the
// container's name is the operator's.
func mergeExporter(dst, src *corev1.PodTemplateSpec) {
	for i := range src.Spec.Containers {
		if c := &src.Spec.Containers[i]; c.Name == ExporterContainerName {
			mergeContainer(&dst.Spec.Containers, c)
			return
		}
	}
	dst.Spec.Containers = slices.DeleteFunc(dst.Spec.Containers, func(c corev1.Container) bool { return c.Name == ExporterContainerName })
}

// hasExporter reports whether a pod template runs the exporter.
func hasExporter(template *corev1.PodTemplateSpec) bool {
	return slices.ContainsFunc(template.Spec.Containers, func(c corev1.Container) bool { return c.Name == ExporterContainerName })
}
