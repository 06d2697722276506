package controller

import (
	"reflect"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/packedinformer"
	"example.com/cache-operator/internal/resources"
)

// InformerOptions keeps the manager's informers down to what the reconciler reads, which is most
// of the operator's memory on a large cluster:
//   - no managedFields on any cached object;
//   - only the StatefulSets, Services and PodDisruptionBudgets that carry the operator's
//     managed-by label rather than every one in the cluster;
//   - StatefulSets with their pod template replaced by a digest, and the rest cut down to what
//     the reconciler reads (resources.StripStatefulSet), Services with only the fields the
//     operator owns (resources.StripService), and budgets without their status; an update of
//     any of them reads the whole stored object first;
//   - only the pods of Cluster Caches, whose addresses the reconciler needs to reach their
//     servers, with little more than those addresses;
//   - only the Jobs of backups and the ConfigMaps of restores (they carry the managed-by label
//     too), and only the Secrets of Caches' credentials (cachev2.LabelCredentialsOf), without
//     what the operator does not read of them (resources.StripSecret);
//   - the kinds the reconciler reads one object at a time (packedKinds) kept encoded and
//     compressed, which takes about a third of the memory, and decoded afresh on each read, so
//     that a read needs no copy either.
//
// A child whose label someone removed is invisible to the informer; its next create fails with
// AlreadyExists, not as a duplicate, and the reconciler then reads it around the informer and
// takes it back (ensureChild).
//
// operatorNamespace, if set, is the namespace of the operator itself, whose Secrets are cached
// whatever their labels: the conversion webhook's certificate is one of them, and they are few.
//
// watched, if any, are the only namespaces whose objects are cached (--watch-namespaces), the
// operator's own Secrets aside: an operator scoped to them sees, and so manages, nothing else.
func InformerOptions(operatorNamespace string, watched ...string) cache.Options {
	managed := labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy})
	var namespaces map[string]cache.Config
	for _, ns := range watched {
		if namespaces == nil {
			namespaces = map[string]cache.Config{}
		}
		namespaces[ns] = cache.Config{}
	}
	byObject := map[client.Object]cache.ByObject{
		&appsv1.StatefulSet{}: {Label: managed, Transform: func(in any) (any, error) {
			if sts, ok := in.(*appsv1.StatefulSet); ok {
				return resources.StripStatefulSet(sts), nil
			}
			return in, nil
		}},
		&corev1.Service{}: {Label: managed, Transform: func(in any) (any, error) {
			if svc, ok := in.(*corev1.Service); ok {
				return resources.StripService(svc), nil
			}
			return in, nil
		}},
		&corev1.Secret{}: secretsCached(operatorNamespace, watched),
		&policyv1.PodDisruptionBudget{}: {Label: managed, Transform: func(in any) (any, error) {
			if pdb, ok := in.(*policyv1.PodDisruptionBudget); ok {
				return resources.StripPodDisruptionBudget(pdb), nil
			}
			return in, nil
		}},
		&batchv1.Job{}:      {Label: managed},
		&corev1.ConfigMap{}: {Label: managed},
		&corev1.Pod{}: {
			Label: labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy}).Add(podsOfModes),
			Transform: func(in any) (any, error) {
				if pod, ok := in.(*corev1.Pod); ok {
					return clusterMemberPod(pod), nil
				}
				return in, nil
			},
		},
	}
	for obj, options := range byObject {
		if slices.ContainsFunc(packedKinds, func(kind packedinformer.Object) bool { return reflect.TypeOf(kind) == reflect.TypeOf(obj) }) {
			// Each read decodes a copy of its own.
			options.UnsafeDisableDeepCopy = ptr.To(true)
			byObject[obj] = options
		}
	}
	return cache.Options{
		DefaultNamespaces: namespaces,
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject:          byObject,
		NewInformer:       packedinformer.For(packedKinds...),
	}
}

// packedKinds are the kinds the informer keeps encoded (packedinformer): those of which the
// operator keeps one or more objects per Cache and reads them by name, or, for StatefulSets,
// by an index that holds few (indexRollingOut). The pods a pass lists stay decoded.
var packedKinds = []packedinformer.Object{&appsv1.StatefulSet{}, &corev1.Secret{}, &corev1.ConfigMap{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}}

// podsOfModes selects the pods the informer caches: those of Cluster and Replicated Caches,
// whose servers the operator talks to.
var podsOfModes = func() labels.Requirement {
	r, err := labels.NewRequirement(resources.LabelMode, selection.In, []string{string(cachev2.ModeCluster), string(cachev2.ModeReplicated)})
	if err != nil {
		panic(err)
	}
	return *r
}()

// clusterMemberPod is what the reconciler reads of a Cluster or Replicated Cache's pod: which it
// is, whether it is going away, its node and IP, when its handover was seen in an upgrade, and
// how often its containers restarted (a Replicated primary's server restarted in place is failed
// over at once: replicatedPodChanged).
func clusterMemberPod(pod *corev1.Pod) *corev1.Pod {
	meta := resources.CachedMeta(pod.ObjectMeta)
	if seen, ok := pod.Annotations[annotationHandoverSeen]; ok {
		meta.Annotations = map[string]string{annotationHandoverSeen: seen}
	}
	return &corev1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: meta,
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP, ContainerStatuses: restarts(pod)},
	}
}

// restarts are the pod's container statuses cut down to their names and restart counts.
func restarts(pod *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, c := range pod.Status.ContainerStatuses {
		out = append(out, corev1.ContainerStatus{Name: c.Name, RestartCount: c.RestartCount})
	}
	return out
}

// secretsCached are the Secrets the informer caches: those of Caches' credentials, the operator's
// and those users name for it (cachev2.LabelCredentialsOf), stripped (resources.StripSecret), in
// every namespace or only those watched, and every Secret of the operator's own namespace, if
// given, whole but for their managed fields.
func secretsCached(operatorNamespace string, watched []string) cache.ByObject {
	credentials := labels.NewSelector()
	if exists, err := labels.NewRequirement(cachev2.LabelCredentialsOf, selection.Exists, nil); err == nil {
		credentials = credentials.Add(*exists)
	}
	stripManagedFields := cache.TransformStripManagedFields()
	transform := func(in any) (any, error) {
		if secret, ok := in.(*corev1.Secret); ok {
			if _, credential := secret.Labels[cachev2.LabelCredentialsOf]; credential {
				return resources.StripSecret(secret), nil
			}
		}
		return stripManagedFields(in)
	}
	if operatorNamespace == "" && len(watched) == 0 {
		return cache.ByObject{Label: credentials, Transform: transform}
	}
	namespaces := map[string]cache.Config{}
	if len(watched) == 0 {
		watched = []string{cache.AllNamespaces}
	}
	for _, ns := range watched {
		namespaces[ns] = cache.Config{LabelSelector: credentials}
	}
	if operatorNamespace != "" {
		// An empty selector rather than none, which would take the default above.
		namespaces[operatorNamespace] = cache.Config{LabelSelector: labels.Everything(), FieldSelector: fields.Everything()}
	}
	return cache.ByObject{Namespaces: namespaces, Transform: transform}
}
