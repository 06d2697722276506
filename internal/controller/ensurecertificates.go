package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

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
	// client is how the operator speaks TLS to the Cache's servers: trusting the CAs published
	// (publishCA); nil without TLS, or while the Secret holds no CA certificate.
	client *tls.Config
	// serial is the serial number of the certificate the Secret holds, and renewal when the
	// operator renews it, or has cert-manager renew it (spec.tls.issuerRef); zero for a Secret
	// of the user's, which its filler renews.
	serial  string
	renewal time.Time
	// leaf is the certificate of a Secret the operator does not fill, when the nodes can serve
	// it.
	leaf *x509.Certificate
	// caPEM are the CAs the Secret gives the nodes, published for clients (publishCA).
	caPEM []byte
	// distrusting are the pods whose servers do not trust yet the new CA of the operator's
	// own, which they are given beside the old (resources.NextCertificates): serveCertificate
	// has them read their files again.
	distrusting []corev1.Pod
	// pending: this reconciler created a Secret or the CA's ConfigMap, which its informer does
	// not show yet.
	pending bool
	// invalid, for a Secret of the user's, says why the nodes cannot serve it; missing: it is
	// so before the Cache has pods, which mount it, so none are made yet.
	invalid *metav1.Condition
	missing bool
}

// ensureCertificates reads the TLS Secret of a Cache with TLS: the user's, which the spec names
// (usersCertificates), one cert-manager fills (issuedCertificates), or the operator's own, with
// the Cache's CA, which it makes and renews (ownCertificates). Then it publishes the CAs that
// clients, and the operator, are to trust (publishCA).
func (r *CacheReconciler) ensureCertificates(ctx context.Context, cache *cachev2.Cache) (certificates, error) {
	var certs certificates
	var err error
	switch {
	case cache.Spec.TLS == nil:
		return certificates{}, nil
	case cache.Spec.TLS.SecretName != "":
		certs, err = r.usersCertificates(ctx, cache)
	case cache.Spec.TLS.IssuerRef != nil:
		certs, err = r.issuedCertificates(ctx, cache)
	default:
		certs, err = r.ownCertificates(ctx, cache)
	}
	if err != nil || certs.pending || len(certs.caPEM) == 0 {
		return certs, err
	}
	trusted, pending, err := r.publishCA(ctx, cache, certs)
	var conflict *NameConflictError
	switch {
	case errors.As(err, &conflict):
		// Clients then find no CA published, but the Cache is served and healed all the same.
		log.FromContext(ctx).Info("Cannot publish the CA for clients", "error", err.Error())
	case err != nil:
		return certificates{}, fmt.Errorf("publishing the CA in ConfigMap %s: %w", cache.CAConfigMapName(), err)
	}
	certs.pending = pending
	// A Secret of the user's whose CA cannot be read is said so by certs.invalid.
	if certs.client, err = resources.TLSClientConfig(cache, trusted); err != nil && certs.invalid == nil {
		return certificates{}, err
	}
	return certs, nil
}

// ownCertificates makes and renews the certificates of a Cache whose spec names no Secret nor
// issuer (resources.NextCertificates): the CA's certificate and key in the CA's Secret, written
// first, then the nodes' certificate, signed by it, and the CAs they trust, in the TLS Secret,
// which the pods mount. Each write is decided on what the API server holds, read afresh: a stale
// read never replaces a CA that exists. A TLS Secret from before the CA's Secret loses the CA's
// key once the CA's Secret holds it. While the nodes are given a new CA beside the old, it asks
// each whether it trusts the new one yet (distrustingProbe).
func (r *CacheReconciler) ownCertificates(ctx context.Context, cache *cachev2.Cache) (certificates, error) {
	tlsSecret, caSecret := &corev1.Secret{}, &corev1.Secret{}
	for _, secret := range []struct {
		obj  *corev1.Secret
		name string
	}{{tlsSecret, cache.TLSSecretName()}, {caSecret, cache.CASecretName()}} {
		key := client.ObjectKey{Namespace: cache.Namespace, Name: secret.name}
		pending, err := r.getCachedChild(ctx, key, secret.obj)
		switch {
		case pending:
			return certificates{pending: true}, nil
		case apierrors.IsNotFound(err):
			*secret.obj = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		case err != nil:
			return certificates{}, err
		}
	}
	ips, err := r.podIPs(ctx, cache)
	if err != nil {
		return certificates{}, err
	}
	nodes := resources.NodesReport{ServedSerial: cache.Status.CertificateSerial}
	next := func(tlsData, caData map[string][]byte) (resources.Certificates, error) {
		certs, _, err := resources.NextCertificates(cache, r.ClusterDomain, ips, resources.Certificates{TLS: tlsData, CA: caData}, nodes, time.Now())
		return certs, err
	}
	// The probe is of the CA the CA's Secret holds: a CA not written yet may never be.
	var distrusting []corev1.Pod
	if certs, err := next(tlsSecret.Data, caSecret.Data); err != nil {
		return certificates{}, err
	} else if certs.Probe != nil && maps.EqualFunc(certs.CA, caSecret.Data, bytes.Equal) {
		if distrusting, err = r.distrustingProbe(ctx, cache, certs); err != nil {
			return certificates{}, err
		}
		nodes.TrustCA = len(distrusting) == 0
	}
	if err := r.writeCertificates(ctx, cache, caSecret, func(stored map[string][]byte) (*corev1.Secret, error) {
		certs, err := next(tlsSecret.Data, stored)
		return resources.CASecret(cache, certs.CA), err
	}); err != nil {
		return certificates{}, err
	}
	if err := r.writeCertificates(ctx, cache, tlsSecret, func(stored map[string][]byte) (*corev1.Secret, error) {
		certs, err := next(stored, caSecret.Data)
		return resources.TLSSecret(cache, certs.TLS), err
	}); err != nil {
		return certificates{}, err
	}
	cert, err := resources.LeafCertificate(tlsSecret.Data)
	if err != nil {
		return certificates{}, err
	}
	// A certificate past its renewal is kept only while a new CA waits on the nodes' trust,
	// which is looked at again at its own pace.
	renewal := resources.RenewalTime(cert)
	if recheck := time.Now().Add(certificatesRecheck); renewal.Before(recheck) {
		renewal = recheck
	}
	return certificates{serial: cert.SerialNumber.String(), renewal: renewal,
		caPEM: tlsSecret.Data[resources.TLSCAKey], distrusting: distrusting}, nil
}

// distrustingProbe are the Cache's pods whose servers do not accept the probe of certs, a client
// certificate of the new CA: those that do not trust it yet.
func (r *CacheReconciler) distrustingProbe(ctx context.Context, cache *cachev2.Cache, certs resources.Certificates) ([]corev1.Pod, error) {
	config, err := resources.TLSClientConfig(cache, certs.TLS[resources.TLSCAKey])
	if err != nil {
		return nil, err
	}
	config.Certificates = []tls.Certificate{*certs.Probe}
	pods, err := livePods(ctx, r.APIReader, cache)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods, func(pod corev1.Pod) bool {
		return valkey.AcceptsClientCertificate(ctx, pod.Status.PodIP, resources.Port, config) == nil
	}), nil
}

// podIPs are the IPs of the Cache's pods that have one and run, or may: those its certificate
// names (resources.NextCertificates), and whose servers are to serve it (serveCertificate).
func (r *CacheReconciler) podIPs(ctx context.Context, cache *cachev2.Cache) ([]net.IP, error) {
	pods, err := livePods(ctx, r.Client, cache)
	if err != nil {
		return nil, err
	}
	ips := make([]net.IP, 0, len(pods))
	for _, pod := range pods {
		if ip := net.ParseIP(pod.Status.PodIP); ip != nil {
			ips = append(ips, ip)
		}
	}
	return ips, nil
}

// livePods are the Cache's pods, read through reader, that have an IP and are not deleted nor
// ended.
func livePods(ctx context.Context, reader client.Reader, cache *cachev2.Cache) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return nil, fmt.Errorf("listing the Cache's pods: %w", err)
	}
	return slices.DeleteFunc(pods.Items, func(pod corev1.Pod) bool {
		return pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	}), nil
}

// writeCertificates makes secret, the Cache's TLS Secret or its CA's as the informer or the
// reconciler's last write has it, hold what desired makes of what it holds, when that differs,
// and leaves secret as written. The data desired is given is the API server's, read afresh.
func (r *CacheReconciler) writeCertificates(ctx context.Context, cache *cachev2.Cache, secret *corev1.Secret, desired func(stored map[string][]byte) (*corev1.Secret, error)) error {
	want, err := desired(secret.Data)
	if err != nil {
		return err
	}
	if !secret.CreationTimestamp.IsZero() && maps.EqualFunc(secret.Data, want.Data, bytes.Equal) {
		return nil
	}
	c := r.Client
	if !secret.CreationTimestamp.IsZero() {
		c = storedReads{Client: r.Client, reader: r.APIReader}
	}
	var issueErr error
	_, err = r.ensureChild(ctx, c, cache, secret, func() {
		if want, issueErr = desired(secret.Data); issueErr == nil {
			resources.MergeTLSSecret(secret, want)
		}
	})
	if err = errors.Join(issueErr, err); err != nil {
		return fmt.Errorf("writing Secret %s: %w", secret.Name, err)
	}
	return nil
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update

// publishCA makes the Cache's CA ConfigMap hold the CAs clients are to trust, and returns them:
// those the Secret gives the nodes, and, until every node serves the Secret's certificate
// (status.certificateSerial), those published before too, since a node that has not read its
// files again still serves a certificate of an old CA. A cert-manager issuer whose CA changed so
// locks neither the operator nor clients out of the nodes. It decides from the informer's copy:
// a pass that changes nothing writes nothing; it reports a ConfigMap it made that the informer
// does not show yet as pending.
func (r *CacheReconciler) publishCA(ctx context.Context, cache *cachev2.Cache, certs certificates) (trusted []byte, pending bool, err error) {
	cached := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: cache.Namespace, Name: cache.CAConfigMapName()}
	pending, err = r.getCachedChild(ctx, key, cached)
	switch {
	case pending:
		return certs.caPEM, true, nil
	case client.IgnoreNotFound(err) != nil:
		return certs.caPEM, false, err
	}
	trusted = certs.caPEM
	if bundle := resources.TrustBundle(time.Now(), certs.caPEM, []byte(cached.Data[resources.TLSCAKey])); certs.serial != cache.Status.CertificateSerial && len(bundle) > 0 {
		trusted = bundle
	}
	desired := resources.CAConfigMap(cache, trusted)
	if err == nil && metav1.IsControlledBy(cached, cache) && maps.Equal(cached.Data, desired.Data) {
		return trusted, false, nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	if _, err = r.ensureChild(ctx, r.writer(err), cache, cm, func() { resources.MergeCAConfigMap(cm, desired) }); err != nil {
		return certs.caPEM, false, err
	}
	return trusted, false, nil
}

// usersCertificates reads the TLS Secret the spec names, which the operator neither writes nor
// renews, and says why the nodes cannot serve it, if they cannot (resources.UsableCertificate).
// A Secret that cannot be used keeps a Cache that has no pods yet from making them; one whose
// pods run keeps serving what they read last, and the operator does not have them read it again.
func (r *CacheReconciler) usersCertificates(ctx context.Context, cache *cachev2.Cache) (certificates, error) {
	name := cache.TLSSecretName()
	namedBy := "spec.tls.secretName"
	if cache.Spec.TLS.IssuerRef != nil {
		namedBy = "the cert-manager Certificate " + name + " of spec.tls.issuerRef"
	}
	secret := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: cache.Namespace, Name: name}, secret)
	var why string
	switch {
	case apierrors.IsNotFound(err):
		if why, err = r.unseenSecret(ctx, cache, name, namedBy); err != nil {
			return certificates{}, err
		}
	case err != nil:
		return certificates{}, err
	}
	var certs certificates
	if why == "" {
		cert, err := resources.UsableCertificate(cache, secret.Data)
		if err == nil {
			certs.serial, certs.leaf = cert.SerialNumber.String(), cert
		} else {
			why = fmt.Sprintf("Secret %s, named by %s, cannot be served: %v", name, namedBy, err)
		}
		// The nodes' CA, for the operator's connections and clients, even while the certificate
		// is unusable.
		certs.caPEM = secret.Data[resources.TLSCAKey]
	}
	if why == "" {
		return certs, nil
	}
	certs.invalid = certificateCondition(cache, metav1.ConditionFalse, cachev2.ReasonCertificateInvalid, why)
	err = r.Get(ctx, client.ObjectKey{Namespace: cache.Namespace, Name: cache.Name}, &appsv1.StatefulSet{})
	if certs.missing = apierrors.IsNotFound(err); !certs.missing && err != nil {
		return certificates{}, err
	}
	return certs, nil
}

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;create;update

// issuedCertificates reads the TLS Secret that cert-manager fills for a Cache whose spec names an
// issuer, as usersCertificates reads one the user names, and makes or mends the Certificate that
// has cert-manager fill it (resources.IssuedCertificate) when the Secret holds no certificate the
// nodes can serve, or one that is due for renewal. A Cache whose certificate is good so costs no
// read of its Certificate, and the operator, which watches no Certificate, needs none in its
// informers; a Certificate deleted by hand is made again by the renewal's time. The pass after
// renewal time is due comes at least certificatesRecheck later, until cert-manager renews.
func (r *CacheReconciler) issuedCertificates(ctx context.Context, cache *cachev2.Cache) (certificates, error) {
	certs, err := r.usersCertificates(ctx, cache)
	if err != nil {
		return certificates{}, err
	}
	if certs.leaf != nil {
		certs.renewal = resources.RenewalTime(certs.leaf)
	}
	if certs.invalid == nil && time.Now().Before(certs.renewal) {
		return certs, nil
	}
	desired := resources.IssuedCertificate(cache, r.ClusterDomain)
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(resources.CertificateGVK)
	stored.SetNamespace(desired.GetNamespace())
	stored.SetName(desired.GetName())
	_, err = r.ensureChild(ctx, storedReads{Client: r.Client, reader: r.APIReader}, cache, stored, func() {
		resources.MergeIssuedCertificate(stored, desired)
	})
	switch {
	case meta.IsNoMatchError(err):
		certs.invalid = certificateCondition(cache, metav1.ConditionFalse, cachev2.ReasonCertificateInvalid,
			"spec.tls.issuerRef needs cert-manager, and the API server knows no cert-manager.io/v1 Certificate: install cert-manager")
		return certs, nil
	case err != nil:
		return certificates{}, fmt.Errorf("writing the cert-manager Certificate %s: %w", desired.GetName(), err)
	}
	if recheck := time.Now().Add(certificatesRecheck); certs.renewal.Before(recheck) {
		certs.renewal = recheck
	}
	return certs, nil
}
