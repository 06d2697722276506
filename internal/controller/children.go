package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// children is what ensureChildren made of a Cache's Service and StatefulSet.
type children struct {
	sts *appsv1.StatefulSet
	// hold says why the pods keep their template, if they do.
	hold resources.TemplateHold
	// created: the Service or the StatefulSet did not exist, and this pass created it.
	created bool
	// pending: this reconciler created the Service or the StatefulSet and its informer does not
	// show it yet (ownCreations); nothing was done with that child or after it.
	pending bool
}

// ensureChildren makes the Cache's Services, StatefulSet and PodDisruptionBudget match its spec,
// with the number of pods given (nodesToRun), and, for a restored Cache, the restore's init step
// (set when the StatefulSet is made, never after). The Services come first: the StatefulSet's
// pods get their DNS names from the headless one; a Replicated Cache's clients use the other two.
// running is the newest Valkey release the primaries run (membersPhase,
// resources.JudgeStatefulSet).
func (r *CacheReconciler) ensureChildren(ctx context.Context, cache *cachev2.Cache, nodes int32, running string, restore *corev1.Container) (children, error) {
	services := []*corev1.Service{resources.Service(cache)}
	if cache.Spec.Mode == cachev2.ModeReplicated {
		services = append(services, resources.RoleServices(cache)...)
	}
	serviceCreated := false
	for _, desired := range services {
		created, pending, err := r.ensureService(ctx, cache, desired)
		if err != nil {
			return children{}, fmt.Errorf("ensuring Service %s: %w", desired.Name, err)
		}
		if pending {
			return children{pending: true}, nil
		}
		serviceCreated = serviceCreated || created
	}
	made, err := r.ensureStatefulSet(ctx, cache, nodes, running, restore)
	if err != nil {
		return children{}, fmt.Errorf("ensuring StatefulSet: %w", err)
	}
	if made.pending {
		return made, nil
	}
	budgetCreated, budgetPending, err := r.ensurePodDisruptionBudget(ctx, cache)
	if err != nil {
		return children{}, fmt.Errorf("ensuring PodDisruptionBudget: %w", err)
	}
	made.created = made.created || serviceCreated || budgetCreated
	made.pending = budgetPending
	return made, nil
}

// ensurePodDisruptionBudget makes the Cache's PodDisruptionBudget match its spec, deciding from
// the informer's copy, which keeps only the owned fields. It reports whether it created it, or
// found it pending (see getCachedChild) and did nothing.
func (r *CacheReconciler) ensurePodDisruptionBudget(ctx context.Context, cache *cachev2.Cache) (created, pending bool, err error) {
	desired := resources.PodDisruptionBudget(cache)
	cached := &policyv1.PodDisruptionBudget{}
	pending, err = r.getCachedChild(ctx, client.ObjectKeyFromObject(desired), cached)
	if pending {
		return false, true, nil
	}
	if err == nil && metav1.IsControlledBy(cached, cache) && resources.PodDisruptionBudgetUpToDate(cached, desired) {
		return false, false, nil
	}
	if client.IgnoreNotFound(err) != nil {
		return false, false, err
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	op, err := r.ensureChild(ctx, r.writer(err), cache, pdb, func() { resources.MergePodDisruptionBudget(pdb, desired) })
	return op == controllerutil.OperationResultCreated, false, err
}

// ensureStatefulSet decides from the informer's copy of the StatefulSet, which has no pod
// template (see InformerOptions), whether anything needs writing. Only an update, rare next to the
// passes that find nothing to do, reads the whole stored object first.
func (r *CacheReconciler) ensureStatefulSet(ctx context.Context, cache *cachev2.Cache, nodes int32, running string, restore *corev1.Container) (children, error) {
	desired := resources.StatefulSet(cache, r.Images)
	desired.Spec.Replicas = &nodes
	if restore != nil {
		desired.Spec.Template.Spec.InitContainers = []corev1.Container{*restore}
	}
	cached := &appsv1.StatefulSet{}
	pending, err := r.getCachedChild(ctx, client.ObjectKeyFromObject(desired), cached)
	if pending {
		return children{pending: true}, nil
	}
	queued := false
	if err == nil && metav1.IsControlledBy(cached, cache) {
		verdict := resources.JudgeStatefulSet(cache, cached, desired, running)
		if verdict.UpToDate {
			return children{sts: cached, hold: verdict.Hold}, nil
		}
		if verdict.StartsRollout {
			admitted, err := r.Rollouts.Admit(ctx, client.ObjectKeyFromObject(cached))
			if err != nil {
				return children{}, fmt.Errorf("counting the rollouts in progress: %w", err)
			}
			queued = !admitted
		}
		if queued && verdict.UpToDateBesidesTemplate {
			return children{sts: cached, hold: resources.TemplateHeldForFleet}, nil
		}
	}
	if client.IgnoreNotFound(err) != nil {
		return children{}, err
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	var hold resources.TemplateHold
	op, err := r.ensureChild(ctx, r.writer(err), cache, sts, func() {
		// Decided again on the stored object, which this closure gets fresh.
		hold = resources.UpdateStatefulSet(cache, sts, desired, running, queued)
	})
	if queued {
		hold = resources.TemplateHeldForFleet
	}
	return children{sts: sts, hold: hold, created: op == controllerutil.OperationResultCreated}, err
}

// ensureService makes one of the Cache's Services match desired, deciding from the informer's
// copy, which keeps only the owned fields (see InformerOptions), whether anything needs writing.
// It reports whether it created the Service, or found it pending (see getCachedChild) and did
// nothing.
func (r *CacheReconciler) ensureService(ctx context.Context, cache *cachev2.Cache, desired *corev1.Service) (created, pending bool, err error) {
	cached := &corev1.Service{}
	pending, err = r.getCachedChild(ctx, client.ObjectKeyFromObject(desired), cached)
	if pending {
		return false, true, nil
	}
	if err == nil && metav1.IsControlledBy(cached, cache) && resources.ServiceUpToDate(cached, desired) {
		return false, false, nil
	}
	if client.IgnoreNotFound(err) != nil {
		return false, false, err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	op, err := r.ensureChild(ctx, r.writer(err), cache, svc, func() { resources.MergeService(svc, desired) })
	return op == controllerutil.OperationResultCreated, false, err
}

// getCachedChild reads a child of a Cache from the informer into obj. A child that this
// reconciler created and the informer does not show yet is pending rather than not found: a
// pass that created it again would have the create rejected with AlreadyExists
// (ownCreations).
func (r *CacheReconciler) getCachedChild(ctx context.Context, key client.ObjectKey, obj client.Object) (pending bool, err error) {
	kind := r.kind(obj)
	err = r.Get(ctx, key, obj)
	switch {
	case err == nil:
		r.ownCreations.seen(kind, key)
	case apierrors.IsNotFound(err):
		return r.ownCreations.pending(kind, key, time.Now()), err
	}
	return false, err
}

// writer is the client a child is written through, given how reading the informer's copy went
// (cachedErr): a child the informer does not have is created, and one it has is updated from a
// fresh read of the whole stored object, since the informer keeps only part of it.
func (r *CacheReconciler) writer(cachedErr error) client.Client {
	if cachedErr == nil {
		return storedReads{Client: r.Client, reader: r.APIReader}
	}
	return r.Client
}

// storedReads is a client whose reads go to the API server rather than the informer cache.
type storedReads struct {
	client.Client
	reader client.Reader
}

func (c storedReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.reader.Get(ctx, key, obj, opts...)
}

// ensureChild creates child, or updates it when merging the owned fields changed any of them,
// says which it did, and makes the Cache its controller so the garbage collector removes it with
// the Cache. It reads and writes through c. A read from the informer cache may be stale: the
// child's name is the Cache's, so a create that races with an earlier one fails with
// AlreadyExists instead of making a second child, and an update from a stale copy fails with a
// conflict, which goes back to the queue.
//
// On AlreadyExists the stored object is read around the informer, which may lag (the child was
// created a moment ago) or never see it (a child whose managed-by label someone removed, or an
// object that is not the Cache's at all). The Cache's own child is merged as usual, which
// restores its label; any other object is a NameConflictError.
func (r *CacheReconciler) ensureChild(ctx context.Context, c client.Client, cache *cachev2.Cache, child client.Object, merge func()) (controllerutil.OperationResult, error) {
	op, err := r.createOrUpdate(ctx, c, cache, child, merge)
	if !apierrors.IsAlreadyExists(err) {
		return op, err
	}
	stored := child.DeepCopyObject().(client.Object)
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(child), stored); err != nil {
		return controllerutil.OperationResultNone, err
	}
	if !controlledByCacheNamed(stored, cache) {
		return controllerutil.OperationResultNone, r.nameConflict(stored)
	}
	return r.createOrUpdate(ctx, storedReads{Client: r.Client, reader: r.APIReader}, cache, child, merge)
}

func (r *CacheReconciler) createOrUpdate(ctx context.Context, c client.Client, cache *cachev2.Cache, child client.Object, merge func()) (controllerutil.OperationResult, error) {
	op, err := controllerutil.CreateOrUpdate(ctx, c, child, func() error {
		merge()
		return controllerutil.SetControllerReference(cache, child, r.Scheme())
	})
	if alreadyOwned := (*controllerutil.AlreadyOwnedError)(nil); errors.As(err, &alreadyOwned) {
		return controllerutil.OperationResultNone, r.nameConflict(child)
	}
	if op == controllerutil.OperationResultCreated {
		r.ownCreations.add(r.kind(child), client.ObjectKeyFromObject(child), time.Now())
	}
	if op != controllerutil.OperationResultNone {
		log.FromContext(ctx).Info("Wrote child", "kind", r.kind(child), "name", child.GetName(), "operation", op)
	}
	return op, err
}

// controlledByCacheNamed reports whether obj's controller is a Cache of cache's name: this one,
// or a deleted one whose children the garbage collector has not removed yet, which this one
// takes over, as SetControllerReference does for the children the informer sees.
func controlledByCacheNamed(obj client.Object, cache *cachev2.Cache) bool {
	owner := metav1.GetControllerOf(obj)
	return owner != nil && owner.Kind == "Cache" && owner.Name == cache.Name &&
		strings.HasPrefix(owner.APIVersion, cachev2.GroupVersion.Group+"/")
}

// NameConflictError is a child the operator cannot make because another object has its name.
type NameConflictError struct {
	Kind, Namespace, Name, Owner string
}

func (e *NameConflictError) Error() string {
	owner := "no controller"
	if e.Owner != "" {
		owner = "controller " + e.Owner
	}
	return fmt.Sprintf("a %s named %s already exists in namespace %s and is not this Cache's (it has %s): "+
		"delete or rename it, or give the Cache another name", e.Kind, e.Name, e.Namespace, owner)
}

func (r *CacheReconciler) nameConflict(obj client.Object) error {
	e := &NameConflictError{Kind: r.kind(obj), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if owner := metav1.GetControllerOf(obj); owner != nil {
		e.Owner = owner.Kind + "/" + owner.Name
	}
	return e
}

func (r *CacheReconciler) kind(obj client.Object) string {
	gvk, _ := r.GroupVersionKindFor(obj)
	return gvk.Kind
}
