package resources

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
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
					// Nothing in a cache pod talks to the API server, and Valkey reads no
					// environment of the namespace's Services: no token to steal, and one volume
					// and a list of variables less for the kubelet to make at each start.
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					Containers:                   []corev1.Container{valkeyContainer(cache, images.ValkeyRepository), readinessContainer(cache, images.Agent)},
					Volumes:                      []corev1.Volume{dataVolumeSource(cache.Spec.Memory)},
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
	if cache.Spec.Mode != cachev2.ModeStandalone {
		// The operator restarts the pods of a Cluster or Replicated Cache itself, in the order
		// that keeps every shard serving (topology.Roll, replication's roll): replicas first,
		// each back in sync before the next, and a primary only after a replica has taken
		// over. The StatefulSet controller's rolling update knows nothing of roles and would
		// restart a primary and its replica back to back; a partitioned rollout still goes by
		// ordinal, which says nothing about who is primary after a failover. So the
		// StatefulSet only makes new pods from the new template when the operator deletes old
		// ones.
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
	dst.Spec.AutomountServiceAccountToken = src.Spec.AutomountServiceAccountToken
	dst.Spec.EnableServiceLinks = src.Spec.EnableServiceLinks
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
