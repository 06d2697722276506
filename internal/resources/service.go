package resources

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/replication"
)

// Service is the headless Service that governs a Cache's StatefulSet: it gives each node the
// stable DNS name <cache>-<ordinal>.<cache>.<namespace>.svc.<cluster domain>.
func Service(cache *cachev2.Cache) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      cache.Name,
			Namespace: cache.Namespace,
			Labels:    Labels(cache),
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  SelectorLabels(cache),
			Ports:     servicePorts(),
		},
	}
}

// PrimaryServiceName and ReplicasServiceName are the Services of a Replicated Cache that clients
// use: the one in front of its primary, and the one in front of its replicas. The primary's is
// not <name>: that is the headless Service that governs the StatefulSet and names each pod, as in
// the other modes, and a StatefulSet's governing Service cannot change.
func PrimaryServiceName(cache *cachev2.Cache) string  { return cache.Name + "-primary" }
func ReplicasServiceName(cache *cachev2.Cache) string { return cache.Name + "-replicas" }

// RoleServices are a Replicated Cache's Services for clients: <name>-primary selects the pod
// that the operator labels the primary (LabelRole), and <name>-replicas those it labels replicas.
// Each has a cluster IP, so that a client that connects by the Service's name reaches the pod the
// label is on when it connects, whatever its DNS cache holds. A pod is behind its Service only
// while it is ready: a primary as soon as it takes writes, a replica while its link is up.
func RoleServices(cache *cachev2.Cache) []*corev1.Service {
	var services []*corev1.Service
	for name, role := range map[string]replication.Role{PrimaryServiceName(cache): replication.RolePrimary, ReplicasServiceName(cache): replication.RoleReplica} {
		selector := SelectorLabels(cache)
		selector[LabelRole] = string(role)
		services = append(services, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cache.Namespace, Labels: Labels(cache)},
			Spec:       corev1.ServiceSpec{Selector: selector, Ports: servicePorts()},
		})
	}
	slices.SortFunc(services, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	return services
}

// servicePorts spells out every field the API server would otherwise default, so that
// comparing them with a stored Service finds no difference.
func servicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{{
		Name:       PortName,
		Port:       Port,
		TargetPort: intstr.FromInt32(Port),
		Protocol:   corev1.ProtocolTCP,
	}}
}

// MergeService makes dst, a stored Service or a new empty one, match desired in the fields the
// operator owns: its labels, selector and ports. Everything else, including the fields the API
// server defaults and any labels or annotations added by others, is left as it is.
func MergeService(dst, desired *corev1.Service) {
	mergeLabels(&dst.Labels, desired.Labels)
	if dst.CreationTimestamp.IsZero() {
		// ClusterIP is immutable once set; it is chosen only when the Service is created.
		dst.Spec.ClusterIP = desired.Spec.ClusterIP
	}
	dst.Spec.Selector = desired.Spec.Selector
	dst.Spec.Ports = desired.Spec.Ports
}

// ServiceUpToDate reports whether merging desired into svc (MergeService) would change nothing.
// svc may be the informer's copy, reduced by StripService.
func ServiceUpToDate(svc, desired *corev1.Service) bool {
	merged := svc.DeepCopy()
	MergeService(merged, desired)
	return equality.Semantic.DeepEqual(merged, svc)
}

// StripService reduces a Service to what the reconciler reads of it: which object it is, whose,
// and the fields MergeService owns. The informer keeps Services stripped, as it keeps one per
// Cache; an update starts from a fresh read of the whole object.
func StripService(svc *corev1.Service) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   svc.TypeMeta,
		ObjectMeta: CachedMeta(svc.ObjectMeta),
		Spec: corev1.ServiceSpec{
			ClusterIP: svc.Spec.ClusterIP,
			Selector:  svc.Spec.Selector,
			Ports:     svc.Spec.Ports,
		},
	}
}
