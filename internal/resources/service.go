package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	cachev2 "example.com/cache-operator/api/v2"
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
