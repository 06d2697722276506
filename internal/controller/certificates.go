package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
)

// certificatesRecheck is how soon a Cache whose nodes do not all serve its certificate yet is
// looked at again: the kubelet updates a Secret's files in a pod some time after the Secret
// changed, and sends no event when it has.
const certificatesRecheck = 10 * time.Second

// certificates is what a pass made of a Cache's TLS (spec.tls).
type certificates struct {
	// client is how the operator speaks TLS to the Cache's servers; nil without TLS.
	client *tls.Config
	// serial is the serial number of the certificate the Secret holds, and served says whether
	// every running node serves it (resources.AnnotationCertificateServed): then the operator
	// makes no connection for it.
	serial string
	served bool
	// renewal is when the certificate is due for renewal.
	renewal time.Time
	// pending: this reconciler created the Secret, which its informer does not show yet.
	pending bool
}

// ensureCertificates makes the TLS Secret of a Cache with TLS, with its CA and its nodes'
// certificate, and renews them when due (resources.NextCertificates). Each write is decided on
// what the API server holds, read afresh: a stale read never replaces a CA that exists.
func (r *CacheReconciler) ensureCertificates(ctx context.Context, cache *cachev2.Cache) (certificates, error) {
	if cache.Spec.TLS == nil {
		return certificates{}, nil
	}
	key := client.ObjectKey{Namespace: cache.Namespace, Name: cache.TLSSecretName()}
	secret := &corev1.Secret{}
	pending, err := r.getCachedChild(ctx, key, secret)
	switch {
	case pending:
		return certificates{pending: true}, nil
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	case err != nil:
		return certificates{}, err
	}
	next, _, err := resources.NextCertificates(cache, r.ClusterDomain, secret.Data, time.Now())
	if err != nil {
		return certificates{}, err
	}
	if secret.CreationTimestamp.IsZero() || !maps.EqualFunc(secret.Data, next, bytes.Equal) {
		if err := r.writeCertificates(ctx, cache, secret); err != nil {
			return certificates{}, fmt.Errorf("writing Secret %s: %w", key.Name, err)
		}
	}
	return certificatesOf(cache, secret)
}

// writeCertificates stores in the Cache's TLS Secret what NextCertificates makes of what the
// API server holds, and leaves secret as written.
func (r *CacheReconciler) writeCertificates(ctx context.Context, cache *cachev2.Cache, secret *corev1.Secret) error {
	c := r.Client
	if !secret.CreationTimestamp.IsZero() {
		c = storedReads{Client: r.Client, reader: r.APIReader}
	}
	var issueErr error
	_, err := r.ensureChild(ctx, c, cache, secret, func() {
		var next map[string][]byte
		if next, _, issueErr = resources.NextCertificates(cache, r.ClusterDomain, secret.Data, time.Now()); issueErr == nil {
			resources.MergeTLSSecret(secret, resources.TLSSecret(cache, next))
		}
	})
	return errors.Join(issueErr, err)
}

// certificatesOf is what the stored TLS Secret says.
func certificatesOf(cache *cachev2.Cache, secret *corev1.Secret) (certificates, error) {
	config, err := resources.TLSClientConfig(cache, secret.Data[resources.TLSCAKey])
	if err != nil {
		return certificates{}, err
	}
	cert, err := resources.LeafCertificate(secret.Data)
	if err != nil {
		return certificates{}, err
	}
	serial := cert.SerialNumber.String()
	return certificates{client: config, serial: serial, renewal: resources.RenewalTime(cert),
		served: secret.Annotations[resources.AnnotationCertificateServed] == serial}, nil
}

// serveCertificate has every running node of a Cache with TLS serve the certificate its Secret
// holds, once the Secret holds one that was not served yet: a node that serves another reads its
// files again (ReloadCertificates), and serves the new one if the kubelet has updated them. Once
// every node serves it, the Secret says so (resources.AnnotationCertificateServed); until then
// the condition names the nodes waited on, and the Cache is looked at again after
// certificatesRecheck. Every pod with an IP counts, running or not yet: one whose server started
// before the kubelet updated its files serves the certificate before; one that starts later
// mounts the Secret as it is then.
func (r *CacheReconciler) serveCertificate(ctx context.Context, cache *cachev2.Cache, certs certificates, auth valkey.Auth) (*metav1.Condition, time.Duration, error) {
	if cache.Spec.TLS == nil {
		return nil, 0, nil
	}
	served := certificateCondition(cache, metav1.ConditionTrue, cachev2.ReasonCertificateServed, fmt.Sprintf(
		"every node serves the certificate of Secret %s, serial %s, which is renewed at %s",
		cache.TLSSecretName(), certs.serial, certs.renewal.UTC().Format(time.RFC3339)))
	if certs.served {
		return served, 0, nil
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return nil, 0, fmt.Errorf("listing the Cache's pods: %w", err)
	}
	var waiting []string
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if err := serveOn(ctx, pod.Status.PodIP, certs.serial, auth); err != nil {
			waiting = append(waiting, fmt.Sprintf("%s (%v)", pod.Name, err))
		}
	}
	if len(waiting) > 0 {
		return certificateCondition(cache, metav1.ConditionFalse, cachev2.ReasonServingNewCertificate, fmt.Sprintf(
			"Secret %s holds the certificate with serial %s, which these nodes do not serve yet: %v",
			cache.TLSSecretName(), certs.serial, waiting)), certificatesRecheck, nil
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cache.TLSSecretName(), Namespace: cache.Namespace}}
	_, err := r.ensureChild(ctx, storedReads{Client: r.Client, reader: r.APIReader}, cache, secret, func() {
		resources.MarkCertificateServed(secret, certs.serial)
	})
	return served, 0, err
}

// serveOn has the server at ip serve the certificate with the given serial, and fails if it
// serves another even after reading its files again.
func serveOn(ctx context.Context, ip, serial string, auth valkey.Auth) error {
	cert, err := valkey.ServedCertificate(ctx, ip, resources.Port, auth.TLS)
	if err == nil && cert.SerialNumber.String() == serial {
		return nil
	}
	server, err := valkey.Connect(ip, resources.Port, auth)
	if err != nil {
		return err
	}
	defer server.Close()
	if err := server.ReloadCertificates(ctx); err != nil {
		return err
	}
	if cert, err = valkey.ServedCertificate(ctx, ip, resources.Port, auth.TLS); err != nil {
		return err
	}
	if got := cert.SerialNumber.String(); got != serial {
		return fmt.Errorf("serves serial %s: its files are not updated yet", got)
	}
	return nil
}

func certificateCondition(cache *cachev2.Cache, status metav1.ConditionStatus, reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: cachev2.ConditionCertificateServed, Status: status, Reason: reason,
		Message: message, ObservedGeneration: cache.Generation}
}
