package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update

// credentialsRecheck is how soon a Cache whose application Secret cannot be used looks at it
// again.
const credentialsRecheck = 10 * time.Second

// credentials is what a pass made of a Cache's credentials (spec.auth).
type credentials struct {
	// auth is who the operator is to the Cache's servers: no one for a Cache without auth.
	auth valkey.Auth
	// condition is the CredentialsCurrent condition; nil for a Cache without auth.
	condition *metav1.Condition
	// missing: the Cache has no ACL Secret and none can be made yet (condition says why), so
	// its pods, which load it at their start, are not made either.
	missing bool
	// pending: this reconciler created a Secret that its informer does not show yet.
	pending bool
	// due is when the credentials are to be looked at again: a rotation's grace period ends,
	// or a Secret that cannot be used is read again.
	due time.Time
	// applyErr is why the running servers could not all be given the current passwords; the
	// pass goes on, and returns it for a retry.
	applyErr error
}

// ensureCredentials brings a Cache with auth one step along its credentials: the application
// user's Secret, made if the spec names none; the ACL Secret, made once with the internal users'
// passwords, and moved on when the application password changes or its previous one's grace
// period ends (resources.NextACL); and the running servers, given the users' passwords as the
// ACL Secret holds them whenever it holds others than they were last given, or a ready server
// holds others than it holds. Servers that start later load the ACL Secret's file. Every step is
// decided by what the Secrets hold, so a pass that crashed half-way is taken up by the next.
func (r *CacheReconciler) ensureCredentials(ctx context.Context, cache *cachev2.Cache, tlsConfig *tls.Config) (credentials, error) {
	if cache.Spec.Auth == nil {
		return credentials{auth: valkey.Auth{TLS: tlsConfig}}, nil
	}
	password, invalid, pending, err := r.appPassword(ctx, cache)
	if err != nil || pending {
		return credentials{pending: pending}, err
	}
	stored := &corev1.Secret{}
	pending, err = r.getCachedChild(ctx, client.ObjectKey{Namespace: cache.Namespace, Name: resources.ACLSecretName(cache)}, stored)
	switch {
	case pending:
		return credentials{pending: true}, nil
	case apierrors.IsNotFound(err):
		stored = nil
	case err != nil:
		return credentials{}, err
	}
	acl := resources.ReadACL(stored)
	if invalid != "" {
		// The nodes keep the passwords they were given. A Secret without the label sends no
		// event when it is made or fixed, so it is looked at again after a while.
		return credentials{auth: operatorAuth(cache, acl, tlsConfig), missing: stored == nil, due: time.Now().Add(credentialsRecheck),
			condition: credentialsCondition(cache, metav1.ConditionFalse, cachev2.ReasonCredentialsInvalid, invalid)}, nil
	}

	next, due := resources.NextACL(cache, acl, password, time.Now())
	if stored == nil {
		// No server of the Cache has other passwords: its pods are made after this Secret.
		next.Applied = next.Digest(cache)
	}
	if stored == nil || !acl.Equal(next) {
		if err := r.writeACL(ctx, cache, stored, next); err != nil {
			return credentials{}, fmt.Errorf("writing the ACL Secret: %w", err)
		}
	}
	creds := credentials{auth: operatorAuth(cache, next, tlsConfig), due: due}
	// Every pass, not only when the ACL Secret moved on: a pod may have loaded the Secret's file
	// as it was before the last write (its container made just before, from a kubelet's copy of
	// the Secret not yet updated), and it was not running to be given the passwords then.
	if creds.applyErr = r.applyUsers(ctx, cache, next, creds.auth); creds.applyErr != nil {
		creds.condition = credentialsCondition(cache, metav1.ConditionFalse, cachev2.ReasonApplyingCredentials, creds.applyErr.Error())
		return creds, nil
	}
	if next.Applied != next.Digest(cache) {
		applied := next
		applied.Applied = next.Digest(cache)
		if err := r.writeACL(ctx, cache, stored, applied); err != nil {
			return credentials{}, fmt.Errorf("writing the ACL Secret: %w", err)
		}
	}
	creds.condition = credentialsCondition(cache, metav1.ConditionTrue, cachev2.ReasonCredentialsApplied,
		"every running node takes the password in Secret "+cache.AuthSecretName()+" and no other")
	if !due.IsZero() {
		creds.condition = credentialsCondition(cache, metav1.ConditionFalse, cachev2.ReasonPreviousPasswordValid, fmt.Sprintf(
			"the password in Secret %s changed; the previous one keeps working until %s", cache.AuthSecretName(), due.UTC().Format(time.RFC3339)))
	}
	return creds, nil
}

// operatorAuth is who the operator is to the servers of a Cache with auth, speaking TLS as
// tlsConfig says (nil: plain text).
func operatorAuth(cache *cachev2.Cache, acl resources.ACL, tlsConfig *tls.Config) valkey.Auth {
	auth := valkey.Auth{User: resources.OperatorUser, Password: acl.Passwords[resources.OperatorUser], TLS: tlsConfig}
	if cache.Spec.Mode == cachev2.ModeCluster {
		auth.ReplicationUser = resources.ReplicationUser
	}
	return auth
}

func credentialsCondition(cache *cachev2.Cache, status metav1.ConditionStatus, reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: cachev2.ConditionCredentialsCurrent, Status: status, Reason: reason,
		Message: message, ObservedGeneration: cache.Generation}
}

// appPassword reads the application password from the Secret of the Cache's application user,
// making that Secret first when the spec names none; invalid says why a Secret the spec names
// cannot be used.
func (r *CacheReconciler) appPassword(ctx context.Context, cache *cachev2.Cache) (password, invalid string, pending bool, err error) {
	name := cache.AuthSecretName()
	secret := &corev1.Secret{}
	pending, err = r.getCachedChild(ctx, client.ObjectKey{Namespace: cache.Namespace, Name: name}, secret)
	switch {
	case pending:
		return "", "", true, nil
	case apierrors.IsNotFound(err) && cache.Spec.Auth.SecretName == "":
		desired := resources.AppSecret(cache)
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cache.Namespace}}
		_, err = r.ensureChild(ctx, r.Client, cache, secret, func() { resources.MergeAppSecret(secret, desired) })
		if err != nil {
			return "", "", false, fmt.Errorf("making Secret %s: %w", name, err)
		}
	case apierrors.IsNotFound(err):
		invalid, err = r.unseenSecret(ctx, cache, name, "spec.auth.secretName")
		return "", invalid, false, err
	case err != nil:
		return "", "", false, err
	}
	password, err = resources.AppPassword(secret)
	if err != nil {
		return "", err.Error(), false, nil
	}
	return password, "", false, nil
}

// unseenSecret says why the informer does not show a Secret of the user's that the spec names at
// field: the informer sees only the Secrets that carry the label LabelCredentialsOf, so it is
// missing, or unlabelled.
func (r *CacheReconciler) unseenSecret(ctx context.Context, cache *cachev2.Cache, name, field string) (string, error) {
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cache.Namespace, Name: name}, &corev1.Secret{})
	switch {
	case err == nil:
		return fmt.Sprintf("Secret %s lacks the label %s=%s, without which the operator does not see it", name, cachev2.LabelCredentialsOf, cache.Name), nil
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("Secret %s, named by %s, does not exist", name, field), nil
	}
	return "", err
}

// writeACL stores acl in the Cache's ACL Secret: it creates it when stored is nil, and
// otherwise updates it from a fresh read.
func (r *CacheReconciler) writeACL(ctx context.Context, cache *cachev2.Cache, stored *corev1.Secret, acl resources.ACL) error {
	desired := resources.ACLSecret(cache, acl)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	c := r.Client
	if stored != nil {
		c = storedReads{Client: r.Client, reader: r.APIReader}
	}
	_, err := r.ensureChild(ctx, c, cache, secret, func() { resources.MergeACLSecret(secret, desired) })
	return err
}

// applyUsers gives every running server of the Cache the users' passwords and rights as acl
// holds them, when it does not have those passwords or the ACL Secret moved on since they were
// last given (acl.Applied). A pod that is not running yet loads them from the ACL Secret when it
// starts, and is looked at again by a later pass.
func (r *CacheReconciler) applyUsers(ctx context.Context, cache *cachev2.Cache, acl resources.ACL, auth valkey.Auth) error {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return fmt.Errorf("listing the Cache's pods: %w", err)
	}
	users := acl.Users(cache)
	applied := acl.Applied == acl.Digest(cache)
	var errs []error
	for _, pod := range pods.Items {
		// Once applied, only the ready pods are checked: a server still starting may not answer
		// yet, and the pass its readiness brings checks it.
		if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning || applied && !resources.PodReady(&pod) {
			continue
		}
		server, err := valkey.Connect(pod.Status.PodIP, resources.Port, auth)
		if err == nil {
			err = giveUsers(ctx, server, users, applied)
			server.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", pod.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("setting the users' passwords and rights: %w", err)
	}
	return nil
}

// giveUsers gives the server the users as listed, unless applied (the ACL Secret has not moved
// on since they were last given) and the server has their passwords already.
func giveUsers(ctx context.Context, server *valkey.Server, users map[string]valkey.User, applied bool) error {
	if applied {
		if has, err := server.HasPasswords(ctx, users); err != nil || has {
			return err
		}
	}
	return server.SetUsers(ctx, users)
}

// waitForCredentials records why a Cache has no pods yet, as the waiting condition says: with
// auth, it has no ACL Secret, and the application user's Secret it would be made from cannot be
// used; with TLS, the Secret the spec names cannot be served.
func (r *CacheReconciler) waitForCredentials(ctx context.Context, cache *cachev2.Cache, waiting *metav1.Condition) (ctrl.Result, error) {
	status := *cache.Status.DeepCopy()
	meta.SetStatusCondition(&status.Conditions, *waiting)
	ready := *waiting
	ready.Type = cachev2.ConditionReady
	meta.SetStatusCondition(&status.Conditions, ready)
	if err := r.writeStatus(ctx, cache, status); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating status: %w", err)
	}
	return ctrl.Result{RequeueAfter: credentialsRecheck}, nil
}

// cacheOfCredentials maps a Secret that holds a Cache's credentials to the Cache.
func cacheOfCredentials(_ context.Context, secret client.Object) []ctrl.Request {
	name := secret.GetLabels()[cachev2.LabelCredentialsOf]
	if name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: secret.GetNamespace(), Name: name}}}
}
