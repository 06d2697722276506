//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// readyIs waits until the Cache's status describes its current generation and its Ready
// condition has the given status and message.
func readyIs(t *testing.T, namespace string, status metav1.ConditionStatus, reason, message string) *cachev2.Cache {
	t.Helper()
	var c *cachev2.Cache
	waitFor(t, fmt.Sprintf("Ready=%s %s %q", status, reason, message), func() (bool, string) {
		c = getCache(t, namespace)
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		if ready == nil {
			return false, "no Ready condition"
		}
		ok := c.Status.ObservedGeneration == c.Generation && ready.ObservedGeneration == c.Generation &&
			ready.Status == status && ready.Reason == reason && ready.Message == message
		return ok, fmt.Sprintf("generation %d, observedGeneration %d, Ready %s/%s %q (condition generation %d)",
			c.Generation, c.Status.ObservedGeneration, ready.Status, ready.Reason, ready.Message, ready.ObservedGeneration)
	})
	return c
}

func isControlledBy(obj metav1.Object, owner *cachev2.Cache) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == owner.UID && ref.Kind == "Cache" && ref.APIVersion == cachev2.GroupVersion.String()
}

func TestWorkedExampleCreateBecomeReadyAndScale(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns, nil)
	cache := newCache(t, ns)

	// Creating the Cache creates its children, owned by it.
	c := readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	if c.Status.ReadyReplicas != 0 {
		t.Errorf("readyReplicas = %d, want 0", c.Status.ReadyReplicas)
	}
	sts := getStatefulSet(t, ns)
	if !isControlledBy(sts, cache) {
		t.Errorf("StatefulSet owner references %v do not name the Cache as controller", sts.OwnerReferences)
	}
	if *sts.Spec.Replicas != 3 {
		t.Errorf("StatefulSet replicas = %d, want 3", *sts.Spec.Replicas)
	}
	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 2 || pod.Containers[0].Image != "valkey/valkey:8.1.1" || pod.Containers[1].Name != resources.ReadinessContainerName {
		t.Errorf("pod containers = %+v, want valkey/valkey:8.1.1 and the readiness agent", pod.Containers)
	}
	if !slices.Contains(pod.Containers[0].Args, "--maxmemory") || !slices.Contains(pod.Containers[0].Args, "allkeys-lru") {
		t.Errorf("Valkey args %q lack maxmemory and the eviction policy", pod.Containers[0].Args)
	}
	var svc corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(cache), &svc); err != nil {
		t.Fatal(err)
	}
	if !isControlledBy(&svc, cache) {
		t.Errorf("Service owner references %v do not name the Cache as controller", svc.OwnerReferences)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service clusterIP = %q, want headless", svc.Spec.ClusterIP)
	}

	// The StatefulSet controller reports every pod ready.
	setStatefulSetReady(t, ns, 3)
	c = readyIs(t, ns, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, "3/3 replicas ready")
	if c.Status.ReadyReplicas != 3 {
		t.Errorf("readyReplicas = %d, want 3", c.Status.ReadyReplicas)
	}
	before := c.Generation

	// kubectl patch cache/orders-cache --type merge -p '{"spec":{"shards":5}}'
	patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"shards":5}}`))
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	if c.Generation != before+1 {
		t.Errorf("generation = %d after the patch, want %d", c.Generation, before+1)
	}
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "3/5 replicas ready")
	if got := *getStatefulSet(t, ns).Spec.Replicas; got != 5 {
		t.Errorf("StatefulSet replicas = %d, want 5", got)
	}

	setStatefulSetReady(t, ns, 5)
	readyIs(t, ns, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, "5/5 replicas ready")
	assertOneOfEachChild(t, ns)
}

func TestDeletedChildIsRecreated(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns, nil)
	newCache(t, ns)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	old := getStatefulSet(t, ns)

	if err := k8s.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "a new StatefulSet", func() (bool, string) {
		var sts appsv1.StatefulSet
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(old), &sts)
		return err == nil && sts.UID != old.UID, fmt.Sprintf("get: %v", err)
	})
}

// The informer holds StatefulSets without their pod template; a hand edit of an owned field
// inside the template must still be seen and undone, and other edits left alone.
func TestHandEditOfThePodTemplateIsUndone(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns, nil)
	newCache(t, ns)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")

	// kubectl set image statefulset/orders-cache valkey=valkey/valkey:7.2.0, plus a sidecar.
	sts := getStatefulSet(t, ns)
	sts.Spec.Template.Spec.Containers[0].Image = "valkey/valkey:7.2.0"
	sts.Spec.Template.Spec.Containers = append(sts.Spec.Template.Spec.Containers, corev1.Container{Name: "log-shipper", Image: "shipper:2"})
	if err := k8s.Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the Valkey image restored", func() (bool, string) {
		containers := getStatefulSet(t, ns).Spec.Template.Spec.Containers
		images := make([]string, 0, len(containers))
		for _, c := range containers {
			images = append(images, c.Image)
		}
		return slices.Equal(images, []string{"valkey/valkey:8.1.1", resources.DefaultAgentImage, "shipper:2"}), fmt.Sprintf("images %v", images)
	})
}

// The informer holds Services with only the owned fields; a hand edit of one is still undone,
// and the update, made from the whole stored Service, keeps everything else.
func TestHandEditOfTheServiceIsUndone(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns, nil)
	newCache(t, ns)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")

	var svc corev1.Service
	key := client.ObjectKey{Namespace: ns, Name: getStatefulSet(t, ns).Spec.ServiceName}
	if err := k8s.Get(context.Background(), key, &svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[0].Port = 7000
	svc.Annotations = map[string]string{"team": "checkout"}
	if err := k8s.Update(context.Background(), &svc); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the Service's port restored", func() (bool, string) {
		if err := k8s.Get(context.Background(), key, &svc); err != nil {
			return false, err.Error()
		}
		return svc.Spec.Ports[0].Port == resources.Port, fmt.Sprintf("port %d", svc.Spec.Ports[0].Port)
	})
	if svc.Annotations["team"] != "checkout" || len(svc.Spec.ClusterIPs) == 0 {
		t.Errorf("the update lost fields it does not own: annotations %v, clusterIPs %v", svc.Annotations, svc.Spec.ClusterIPs)
	}
}

func TestUnchangedPassesMakeNoWrites(t *testing.T) {
	t.Run("without settings", func(t *testing.T) { unchangedPassesMakeNoWrites(t, nil) })
	t.Run("with pod and Valkey settings and metrics", func(t *testing.T) {
		unchangedPassesMakeNoWrites(t, func(spec *cachev2.CacheSpec) {
			spec.Pod = &cachev2.PodSettings{
				CPU:               &cachev2.CPU{Request: ptr.To(resource.MustParse("0.25")), Limit: ptr.To(resource.MustParse("1000m"))},
				NodeSelector:      map[string]cachev2.LabelValue{"pool": "caches"},
				Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
				PriorityClassName: "caches-high",
				Labels:            map[string]cachev2.LabelValue{"team": "payments"},
				Annotations:       map[string]string{"example.com/owner": "payments"},
			}
			spec.Config = &cachev2.ValkeyConfig{MaxmemoryPolicy: "allkeys-lfu", Timeout: ptr.To[int32](60), NotifyKeyspaceEvents: "Ex"}
			spec.Metrics = &cachev2.Metrics{Enabled: true}
		})
	})
	t.Run("with auth and TLS", func(t *testing.T) {
		unchangedPassesMakeNoWrites(t, func(spec *cachev2.CacheSpec) {
			spec.Auth = &cachev2.Auth{}
			spec.TLS = &cachev2.TLS{}
		})
	})
}

// unchangedPassesMakeNoWrites is TestUnchangedPassesMakeNoWrites for a Cache whose spec the
// user set as set says (nil: as newCache makes it).
func unchangedPassesMakeNoWrites(t *testing.T, set func(*cachev2.CacheSpec)) {
	ns := newNamespace(t)
	cache := newCacheWith(t, ns, set)
	firstPass(t, cache)
	// The direct client reads objects exactly as stored, with every field the API server
	// defaulted, so a merge that fought defaulting would show up as writes here.
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}

	assertNoWrites := func(t *testing.T, state string) {
		t.Helper()
		counting, writes := countingWrites(k8s)
		r := newReconciler(counting, nil)
		for range 10 {
			if err := reconcile(r, cache); err != nil {
				t.Fatal(err)
			}
		}
		if n := writes.Load(); n != 0 {
			t.Errorf("%s: ten reconciles of unchanged state made %d writes, want 0", state, n)
		}
	}
	assertNoWrites(t, "progressing")

	setStatefulSetReady(t, ns, 3)
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	readyIs(t, ns, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, "3/3 replicas ready")
	assertNoWrites(t, "ready")

	// Others change the StatefulSet in fields the operator does not own: kubectl rollout
	// restart annotates the pod template, another tool adds a label.
	sts := getStatefulSet(t, ns)
	if sts.Spec.Template.Annotations == nil {
		sts.Spec.Template.Annotations = map[string]string{}
	}
	sts.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-11-29T10:00:00Z"
	sts.Labels["team"] = "checkout"
	if err := k8s.Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
	setStatefulSetReady(t, ns, 3)
	assertNoWrites(t, "after a rollout restart and a foreign label")
	sts = getStatefulSet(t, ns)
	if sts.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" || sts.Labels["team"] != "checkout" {
		t.Errorf("the operator removed what others set: annotations %v, labels %v", sts.Spec.Template.Annotations, sts.Labels)
	}
}

func TestConflictOnStatusWriteIsRetriedFromAFreshRead(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	firstPass(t, cache)
	// A second writer changes the Cache between the reconciler's read and its status write,
	// so the API server rejects the write as based on a stale resourceVersion.
	racing := interceptor.NewClient(k8s, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			other := getCache(t, ns)
			other.Annotations = map[string]string{"touched-by": "another-writer"}
			if err := k8s.Update(ctx, other); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})

	err := reconcile(newReconciler(racing, nil), cache)
	if !apierrors.IsConflict(err) {
		t.Fatalf("reconcile returned %v, want the API server's conflict so the queue retries", err)
	}

	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatalf("the pass after the conflict: %v", err)
	}
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	assertOneOfEachChild(t, ns)
}

func TestCrashBeforeTheStatusWriteConverges(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	firstPass(t, cache)
	// The process dies after creating the children and before writing status: the status
	// write never reaches the API server.
	crashing := interceptor.NewClient(k8s, interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return errors.New("process killed")
		},
	})
	if err := reconcile(newReconciler(crashing, nil), cache); err == nil {
		t.Fatal("reconcile succeeded although its status write failed")
	}
	getStatefulSet(t, ns)
	if c := getCache(t, ns); c.Status.ObservedGeneration != 0 {
		t.Fatalf("status was written before the crash: %+v", c.Status)
	}

	// A fresh operator, with empty informer caches, takes over.
	startManager(t, ns, nil)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	assertOneOfEachChild(t, ns)
}

func TestStaleReadThatMissesTheStatefulSetCreatesNoDuplicate(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	// The create fails with AlreadyExists; a read around the cache finds the Cache's own
	// StatefulSet, which is already as it should be. The reconciler is a new one (a restarted
	// operator) that does not remember creating it.
	r := newReconciler(statefulSetsUnseen(), nil)
	r.APIReader = k8s
	if err := reconcile(r, cache); err != nil {
		t.Fatalf("the pass with the stale read: %v", err)
	}
	assertOneOfEachChild(t, ns)

	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatalf("the pass after the stale read: %v", err)
	}
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	assertOneOfEachChild(t, ns)
}

// A pass that runs after the reconciler created a Cache's children but before its informer shows
// the StatefulSet, as the event of the Service's creation brings one, waits for the creation's
// event: it does not create the StatefulSet again, which would only fail with AlreadyExists.
func TestAPassBeforeTheInformerShowsACreatedChildWaits(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	r := newReconciler(k8s, nil)
	if err := reconcile(r, cache); err != nil {
		t.Fatal(err)
	}

	assertPassWaits(t, r, cache, statefulSetsUnseen(), "the pass before the informer shows the StatefulSet")

	if err := reconcile(r, cache); err != nil {
		t.Fatal(err)
	}
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	assertOneOfEachChild(t, ns)
}

func TestFailureToUpdateAChildShowsInTheReadyCondition(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	setStatefulSetReady(t, ns, 3)
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	scaleErr := func(err error) client.WithWatch {
		return interceptor.NewClient(k8s, interceptor.Funcs{
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if _, ok := obj.(*appsv1.StatefulSet); ok {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
		})
	}
	patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"shards":5}}`))
	if err := k8s.Patch(context.Background(), getCache(t, ns), patch); err != nil {
		t.Fatal(err)
	}
	gr := schema.GroupResource{Group: "apps", Resource: "statefulsets"}

	// A conflict is routine: retried, but not reported, so Ready does not flip.
	conflict := apierrors.NewConflict(gr, "orders-cache", errors.New("the object has been modified"))
	if err := reconcile(newReconciler(scaleErr(conflict), nil), cache); !apierrors.IsConflict(err) {
		t.Fatalf("reconcile returned %v, want the conflict", err)
	}
	if ready := meta.FindStatusCondition(getCache(t, ns).Status.Conditions, cachev2.ConditionReady); ready.Reason != cachev2.ReasonAllReplicasReady {
		t.Errorf("after a conflict Ready is %s/%s, want it untouched", ready.Status, ready.Reason)
	}

	// Missing RBAC is not: the condition says what failed.
	forbidden := apierrors.NewForbidden(gr, "orders-cache", errors.New("RBAC: update not allowed"))
	if err := reconcile(newReconciler(scaleErr(forbidden), nil), cache); !apierrors.IsForbidden(err) {
		t.Fatalf("reconcile returned %v, want the Forbidden error", err)
	}
	ready := meta.FindStatusCondition(getCache(t, ns).Status.Conditions, cachev2.ConditionReady)
	if ready.Status != metav1.ConditionFalse || ready.Reason != cachev2.ReasonReconcileFailed ||
		!strings.Contains(ready.Message, "forbidden") || !strings.Contains(ready.Message, "StatefulSet") {
		t.Errorf("Ready = %s/%s %q, want False/ReconcileFailed naming the StatefulSet and the Forbidden error",
			ready.Status, ready.Reason, ready.Message)
	}

	// Once the permission is back, the next pass converges and Ready says so again.
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "3/5 replicas ready")
}

// A template that differs from this release's only in what the release decides (here a probe's
// period, as an earlier release might have set it) is kept: an operator upgrade alone restarts no
// pod. The Cache says so, and the newer template goes out on request, or whole with the next
// change of the spec.
func TestAnEarlierReleasesPodTemplateIsKeptUntilTheSpecChangesOrTheUserOptsIn(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startManager(t, ns, nil)
	c := newCache(t, ns)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")

	livenessPeriod := func() int32 {
		return getStatefulSet(t, ns).Spec.Template.Spec.Containers[0].LivenessProbe.PeriodSeconds
	}
	// An earlier release wrote its template and no record of it, as the releases before the
	// record did; a hand edit keeps the record, which then no longer matches.
	edit := func(byHand bool) int64 {
		sts := getStatefulSet(t, ns)
		sts.Spec.Template.Spec.Containers[0].LivenessProbe.PeriodSeconds = 20
		if !byHand {
			delete(sts.Annotations, resources.AnnotationTemplateWritten)
		}
		if err := k8s.Update(ctx, sts); err != nil {
			t.Fatal(err)
		}
		return sts.Generation
	}
	templateCurrent := func(want metav1.ConditionStatus) {
		t.Helper()
		waitFor(t, "PodTemplateCurrent "+string(want), func() (bool, string) {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionPodTemplateCurrent)
			if want == metav1.ConditionTrue { // current: no condition at all
				return cond == nil, fmt.Sprintf("%+v", cond)
			}
			return cond != nil && cond.Reason == cachev2.ReasonNewerTemplateAvailable, fmt.Sprintf("%+v", cond)
		})
	}

	edit(true)
	waitFor(t, "the hand edit undone", func() (bool, string) { return livenessPeriod() == 10, fmt.Sprint(livenessPeriod()) })

	generation := edit(false)
	templateCurrent(metav1.ConditionFalse)
	if sts := getStatefulSet(t, ns); sts.Generation != generation || livenessPeriod() != 20 {
		t.Errorf("the operator rewrote the earlier release's template: generation %d → %d, period %d", generation, sts.Generation, livenessPeriod())
	}

	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, cachev2.AnnotationPodTemplate, cachev2.PodTemplateLatest))
	if err := k8s.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release's template on request", func() (bool, string) { return livenessPeriod() == 10, fmt.Sprint(livenessPeriod()) })
	templateCurrent(metav1.ConditionTrue)

	patch = client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, cachev2.AnnotationPodTemplate))
	if err := k8s.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	edit(false)
	templateCurrent(metav1.ConditionFalse)
	// With consent to a rollout that empties the nodes: a Standalone Cache has no replicas.
	if err := k8s.Patch(ctx, c, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"version":"8.1.2"}}`,
		cachev2.AnnotationRolloutEmptiesNodes, cachev2.RolloutEmptiesNodesAllowed))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the whole template with the new version", func() (bool, string) {
		sts := getStatefulSet(t, ns)
		image := sts.Spec.Template.Spec.Containers[0].Image
		return image == "valkey/valkey:8.1.2" && livenessPeriod() == 10, fmt.Sprintf("image %s, period %d", image, livenessPeriod())
	})
	templateCurrent(metav1.ConditionTrue)
}

// A change of version or memory that would empty every node (a Standalone Cache has no replicas)
// waits for the user's consent: the StatefulSet keeps its template, so no pod restarts, and Ready
// says why and how to go ahead. With the annotation, the change goes out.
func TestARolloutThatEmptiesEveryNodeWaitsForConsent(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startManager(t, ns, nil)
	c := newCache(t, ns)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	image := func() string { return getStatefulSet(t, ns).Spec.Template.Spec.Containers[0].Image }

	if err := k8s.Patch(ctx, c, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"version":"8.1.2"}}`))); err != nil {
		t.Fatal(err)
	}
	held := readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonRolloutEmptiesNodes, rolloutConsentAwaited(c).Message)
	if got := image(); got != "valkey/valkey:8.1.1" {
		t.Errorf("the StatefulSet runs %s before the user consented to empty every node", got)
	}
	if !strings.Contains(meta.FindStatusCondition(held.Status.Conditions, cachev2.ConditionReady).Message, cachev2.AnnotationRolloutEmptiesNodes) {
		t.Error("the Ready message does not name the annotation that consents")
	}

	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, cachev2.AnnotationRolloutEmptiesNodes, cachev2.RolloutEmptiesNodesAllowed)
	if err := k8s.Patch(ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new version once consented", func() (bool, string) { return image() == "valkey/valkey:8.1.2", image() })
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
}

// statefulSetsUnseen reads through an informer cache that has not seen any StatefulSet yet, as
// one a moment behind a creation.
func statefulSetsUnseen() client.WithWatch {
	return interceptor.NewClient(k8s, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*appsv1.StatefulSet); ok {
				return apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// assertPassWaits runs one pass of r reading and writing through c, and checks that it waits for
// the informer: no write, no error, and a requeue. r's own client is restored after.
func assertPassWaits(t *testing.T, r *CacheReconciler, cache *cachev2.Cache, c client.WithWatch, pass string) {
	t.Helper()
	counted, writes := countingWrites(c)
	own := r.Client
	r.Client = counted
	defer func() { r.Client = own }()
	result, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cache)})
	if err != nil || result.RequeueAfter == 0 || writes.Load() != 0 {
		t.Errorf("%s: %d writes, result %+v, error %v; want none, a requeue, no error", pass, writes.Load(), result, err)
	}
}

// staleReads serves the given objects as a lagging informer would, in place of the stored ones.
func staleReads(stale ...client.Object) client.WithWatch {
	return interceptor.NewClient(k8s, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			for _, s := range stale {
				if client.ObjectKeyFromObject(s) == key && fmt.Sprintf("%T", s) == fmt.Sprintf("%T", obj) {
					return k8s.Scheme().Convert(s.DeepCopyObject(), obj, nil)
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// A pass that reads a Cache older than the stored one computes its status for an older
// generation; the status write, an update at the old resourceVersion, fails with a conflict, so
// observedGeneration never goes backwards.
func TestAStatusFromAStaleReadNeverMovesObservedGenerationBack(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	old := getCache(t, ns) // as an informer may still have it: generation 1, no status yet
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"shards":5}}`))
	if err := k8s.Patch(context.Background(), getCache(t, ns), patch); err != nil {
		t.Fatal(err)
	}
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	current := getCache(t, ns)
	if current.Status.ObservedGeneration != current.Generation || current.Generation <= old.Generation {
		t.Fatalf("setup: generation %d, observed %d (old generation %d)", current.Generation, current.Status.ObservedGeneration, old.Generation)
	}

	err := reconcile(newReconciler(staleReads(old), nil), cache)
	if !apierrors.IsConflict(err) {
		t.Fatalf("the pass from the stale read returned %v, want a conflict", err)
	}
	if got := getCache(t, ns).Status.ObservedGeneration; got != current.Generation {
		t.Errorf("observedGeneration went from %d to %d", current.Generation, got)
	}
}

// A pass that reads a StatefulSet older than the stored one (all 3 of an older spec's pods
// ready, while the Cache asks for 5) does not report those counts as the current spec's: the
// StatefulSet is updated from a fresh read, and Ready comes from what the update returns.
func TestAStaleStatefulSetIsNotReportedAsCurrent(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	setStatefulSetReady(t, ns, 3)
	old := getStatefulSet(t, ns)
	patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"shards":5}}`))
	if err := k8s.Patch(context.Background(), getCache(t, ns), patch); err != nil {
		t.Fatal(err)
	}
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}

	r := newReconciler(staleReads(old), nil)
	r.APIReader = k8s
	if err := reconcile(r, cache); err != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
	c := getCache(t, ns)
	ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
	if ready.Status == metav1.ConditionTrue || c.Status.ObservedGeneration != c.Generation {
		t.Errorf("with the old StatefulSet read: Ready %s %q at observedGeneration %d of %d; want not Ready for the 5-node spec",
			ready.Status, ready.Message, c.Status.ObservedGeneration, c.Generation)
	}
}

// A pass that reads the Cache as it was before the reconciler's own last write, as a lagging
// informer serves it, waits for that write's event instead of acting on the old read: it writes
// nothing (no status update bound to conflict, no child taken back to an older spec) and asks to
// be looked at again. Once the read is current, passes go on as before.
func TestAPassReadingTheCacheFromBeforeItsOwnWriteWaits(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	firstPass(t, cache)
	before := getCache(t, ns)
	r := newReconciler(k8s, nil)
	if err := reconcile(r, cache); err != nil {
		t.Fatal(err)
	}
	if getCache(t, ns).ResourceVersion == before.ResourceVersion {
		t.Fatal("setup: the first pass wrote no status")
	}

	assertPassWaits(t, r, cache, staleReads(before), "the pass from before our write")

	setStatefulSetReady(t, ns, 3)
	if err := reconcile(r, cache); err != nil {
		t.Fatal(err)
	}
	if ready := meta.FindStatusCondition(getCache(t, ns).Status.Conditions, cachev2.ConditionReady); ready.Status != metav1.ConditionTrue {
		t.Errorf("with a current read: Ready %s %q, want True", ready.Status, ready.Message)
	}
}
