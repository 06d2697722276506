// Package conversionwebhook serves the Cache conversion webhook, which the API server calls to
// turn a stored v2 Cache into v1 for a v1 client and back. Every replica of the operator serves
// it, not only the leader: while no replica answers, every read and write of a Cache through v1
// fails, and so does every list of Caches that includes one stored as v1.
//
// The operator issues its own serving certificate and rotates it before it expires, with
// open-policy-agent/cert-controller: a CA and a certificate kept in a Secret in the operator's
// namespace. The operator injects the CA into the Cache CRD's conversion webhook, so installing
// needs nothing else.
package conversionwebhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
)

// CRDName is the name of the CRD whose conversion webhook this is.
const CRDName = "caches.cache.example.com"

// cert-controller keeps the certificate, its key, the CA and its key under these keys of the
// Secret.
const (
	certKey  = "tls.crt"
	keyKey   = "tls.key"
	caKey    = "ca.crt"
	caKeyKey = "ca.key"
)

// Config says where the certificate lives and how it is made.
type Config struct {
	// Secret holds the CA and the serving certificate. The operator creates it when it is
	// missing, with a first CA and certificate; cert-controller renews them.
	Secret types.NamespacedName
	// DNSName is the name in the serving certificate: the host name the API server connects
	// to, the webhook Service's in a cluster.
	DNSName string
	// CertDir is where the current certificate is written, as tls.crt and tls.key, for
	// cert-controller, which checks there that it reached the server.
	CertDir string
	// CertValidity is how long a serving certificate is valid; RenewBefore, how long before it
	// expires a new one is issued; CheckInterval, how often that is checked.
	CertValidity, RenewBefore, CheckInterval time.Duration
}

// +kubebuilder:rbac:groups="",namespace=cache-operator-system,resources=secrets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;patch,resourceNames=caches.cache.example.com
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;patch,resourceNames=cache-operator

// Setup registers the conversion webhook with the manager's webhook server, whose TLS comes from
// cert (see ServingCert.Configure), the certificate's issue and rotation (cert-controller), and
// what serves each new certificate and injects its CA (certificateLoader). It
// creates the Secret, with a first certificate, when it is missing (ensureSecret).
func Setup(ctx context.Context, mgr ctrl.Manager, cfg Config, cert *ServingCert) error {
	certsWritten := make(chan struct{})
	certs := &rotator.CertRotator{
		SecretKey:      cfg.Secret,
		CertDir:        cfg.CertDir,
		CAName:         "cache-operator-webhook-ca",
		CAOrganization: "cache-operator",
		DNSName:        cfg.DNSName,
		IsReady:        certsWritten,
		// No webhook for cert-controller to inject the CA into: its injection updates the CRD on
		// every start, written or not, and an operator that restarts must write nothing.
		Webhooks: nil,
		// Every replica serves the webhook, so every replica must have the certificate.
		RequireLeaderElection:  false,
		ServerCertDuration:     cfg.CertValidity,
		LookaheadInterval:      cfg.RenewBefore,
		RotationCheckFrequency: cfg.CheckInterval,
	}
	if err := rotator.AddRotator(mgr, certs); err != nil {
		return fmt.Errorf("setting up the webhook certificate's rotation: %w", err)
	}
	if err := ensureSecret(ctx, mgr, cfg.Secret, certs); err != nil {
		return err
	}
	loader := &certificateLoader{cache: mgr.GetCache(), client: mgr.GetClient(), crdReader: mgr.GetAPIReader(),
		secret: cfg.Secret, dir: cfg.CertDir, cert: cert}
	if err := mgr.Add(loader); err != nil {
		return err
	}
	// Not ready, so not behind the webhook Service, until the certificate is served and its CA
	// is in the CRD: before that, the API server would refuse the certificate.
	err := mgr.AddReadyzCheck("webhook-certificate", func(*http.Request) error {
		select {
		case <-certsWritten:
		default:
			return errors.New("cert-controller has not issued the webhook certificate yet")
		}
		if !cert.caInjected.Load() {
			return errors.New("the webhook certificate's CA is not in the CRD yet")
		}
		return nil
	})
	if err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &cachev2.Cache{}).Complete()
}

// ensureSecret creates the Secret key when it is missing, with a CA and a certificate that
// certs issues, as its rotation would. Given an empty Secret, cert-controller's start and its
// reconcile of the Secret would each issue a CA, and one of the two updates would fail with a
// conflict, logged at error level on every new install. Replicas that start together each
// create it, and all but the first find it there.
func ensureSecret(ctx context.Context, mgr ctrl.Manager, key types.NamespacedName, certs *rotator.CertRotator) error {
	err := mgr.GetAPIReader().Get(ctx, key, &corev1.Secret{})
	if apierrors.IsNotFound(err) {
		var secret *corev1.Secret
		if secret, err = issuedSecret(key, certs, time.Now()); err == nil {
			err = client.IgnoreAlreadyExists(mgr.GetClient().Create(ctx, secret))
		}
	}
	if err != nil {
		return fmt.Errorf("ensuring the webhook certificate's Secret %s: %w", key, err)
	}
	return nil
}

// issuedSecret is the Secret key holding a new CA and a serving certificate signed by it, issued
// by certs at now, as its rotation fills a Secret, valid from an hour before for clocks behind.
func issuedSecret(key types.NamespacedName, certs *rotator.CertRotator, now time.Time) (*corev1.Secret, error) {
	begin := now.Add(-time.Hour)
	ca, err := certs.CreateCACert(begin, now.Add(certs.CaCertDuration))
	if err != nil {
		return nil, fmt.Errorf("issuing the webhook's CA: %w", err)
	}
	cert, certKeyPEM, err := certs.CreateCertPEM(ca, begin, now.Add(certs.ServerCertDuration))
	if err != nil {
		return nil, fmt.Errorf("issuing the webhook's certificate: %w", err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Data:       map[string][]byte{caKey: ca.CertPEM, caKeyKey: ca.KeyPEM, certKey: cert, keyKey: certKeyPEM},
	}, nil
}

// ServingCert is the certificate the webhook server presents, the latest one in the Secret. It
// is held in memory, not read from files, so that a rotated certificate is served as soon as
// the Secret changes, without waiting for a kubelet to update a mounted volume.
type ServingCert struct {
	current    atomic.Pointer[tls.Certificate]
	caInjected atomic.Bool
}

// Serving reports whether the webhook can convert: it presents a certificate whose CA is in the
// CRD. Until then, listing Caches may block on conversions that cannot succeed.
func (s *ServingCert) Serving() bool {
	return s.current.Load() != nil && s.caInjected.Load()
}

// Configure makes a TLS configuration present the current certificate.
func (s *ServingCert) Configure(c *tls.Config) {
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if cert := s.current.Load(); cert != nil {
			return cert, nil
		}
		return nil, errors.New("no webhook serving certificate yet: cert-controller has not issued one")
	}
}

// certificateLoader serves the certificate in the Secret, writes it where cert-controller checks
// for it, and puts its CA into the CRD's conversion webhook, which it patches only when the CA
// there differs. It acts on every change of the Secret and, since a CRD applied again or replaced
// (kubectl apply, a Helm upgrade) may lose the CA while the Secret stays as it is, looks again
// now and then: every caRecheckInterval, or every caRetryInterval until the CA is in. Every
// replica runs it.
type certificateLoader struct {
	cache  cache.Cache
	client client.Writer
	// crdReader reads the CRD from the API server: the operator caches no CRDs.
	crdReader client.Reader
	secret    types.NamespacedName
	dir       string
	cert      *ServingCert

	// mu keeps the Secret's handler and the periodic look from loading at the same time, and
	// so writing the files at the same time.
	mu sync.Mutex
}

const (
	caRecheckInterval = time.Minute
	caRetryInterval   = 2 * time.Second
)

// NeedLeaderElection is false: every replica serves the webhook.
func (l *certificateLoader) NeedLeaderElection() bool { return false }

func (l *certificateLoader) Start(ctx context.Context) error {
	informer, err := l.cache.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return err
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.load(ctx, obj) },
		UpdateFunc: func(_, obj any) { l.load(ctx, obj) },
	})
	if err != nil {
		return err
	}
	for {
		interval := caRecheckInterval
		if !l.cert.caInjected.Load() {
			interval = caRetryInterval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		var secret corev1.Secret
		if err := l.cache.Get(ctx, l.secret, &secret); err == nil {
			l.load(ctx, &secret)
		}
	}
}

// load serves the Secret's certificate and makes sure its CA is in the CRD; a failure is logged
// and tried again at the next look.
func (l *certificateLoader) load(ctx context.Context, obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok || secret.Name != l.secret.Name || secret.Namespace != l.secret.Namespace || len(secret.Data[certKey]) == 0 {
		return // not ours, or cert-controller has not filled it yet
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	logger := log.FromContext(ctx).WithValues("secret", l.secret)
	cert, err := tls.X509KeyPair(secret.Data[certKey], secret.Data[keyKey])
	if err != nil {
		logger.Error(err, "The Secret holds no valid key pair; serving the previous one")
		return
	}
	if previous := l.cert.current.Swap(&cert); previous == nil || !bytes.Equal(previous.Certificate[0], cert.Certificate[0]) {
		logger.Info("Serving the webhook certificate", "expires", cert.Leaf.NotAfter)
	}
	if err := l.writeFiles(secret); err != nil {
		logger.Error(err, "Cannot write the webhook certificate where cert-controller checks for it", "dir", l.dir)
		return
	}
	if err := l.injectCA(ctx, secret.Data[caKey]); err != nil {
		logger.Error(err, "Cannot inject the webhook's CA into the CRD; trying again")
		return
	}
	if err := l.injectValidatingCA(ctx, secret.Data[caKey]); err != nil {
		logger.Error(err, "Cannot inject the webhook's CA into the validating webhook configuration; trying again")
		return
	}
	l.cert.caInjected.Store(true)
}

// injectCA makes ca the CRD's conversion webhook's CA bundle.
func (l *certificateLoader) injectCA(ctx context.Context, ca []byte) error {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := l.crdReader.Get(ctx, types.NamespacedName{Name: CRDName}, crd); err != nil {
		return fmt.Errorf("reading the CRD to inject the webhook's CA: %w", err)
	}
	if strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy"); strategy != "Webhook" {
		return nil // nothing calls the webhook
	}
	want := base64.StdEncoding.EncodeToString(ca)
	if have, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle"); have == want {
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"conversion":{"webhook":{"clientConfig":{"caBundle":%q}}}}}`, want)
	if err := l.client.Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("cache-operator")); err != nil {
		return fmt.Errorf("injecting the webhook's CA into the CRD: %w", err)
	}
	log.FromContext(ctx).Info("Injected the webhook's CA into the CRD", "crd", CRDName)
	return nil
}

// ValidatingWebhookName is the install's ValidatingWebhookConfiguration, whose webhooks the same
// server answers with the same certificate (the admission of CacheBackups).
const ValidatingWebhookName = "cache-operator"

// injectValidatingCA makes ca the CA bundle of every webhook of ValidatingWebhookName. An install
// without it has nothing to inject.
func (l *certificateLoader) injectValidatingCA(ctx context.Context, ca []byte) error {
	config := &unstructured.Unstructured{}
	config.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"})
	if err := l.crdReader.Get(ctx, types.NamespacedName{Name: ValidatingWebhookName}, config); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading the validating webhook configuration to inject the webhook's CA: %w", err)
	}
	want := base64.StdEncoding.EncodeToString(ca)
	webhooks, _, _ := unstructured.NestedSlice(config.Object, "webhooks")
	var patch []map[string]any
	for i, w := range webhooks {
		if have, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "caBundle"); have != want {
			patch = append(patch, map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": want})
		}
	}
	if len(patch) == 0 {
		return nil
	}
	encoded, _ := json.Marshal(patch) // strings and numbers: cannot fail
	if err := l.client.Patch(ctx, config, client.RawPatch(types.JSONPatchType, encoded), client.FieldOwner("cache-operator")); err != nil {
		return fmt.Errorf("injecting the webhook's CA into the validating webhook configuration: %w", err)
	}
	log.FromContext(ctx).Info("Injected the webhook's CA into the validating webhook configuration", "name", ValidatingWebhookName)
	return nil
}

// writeFiles writes the certificate and key, each replaced in one rename so that no reader sees
// half a file.
func (l *certificateLoader) writeFiles(secret *corev1.Secret) error {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return err
	}
	for _, key := range []string{keyKey, certKey} {
		tmp := filepath.Join(l.dir, "."+key)
		if err := os.WriteFile(tmp, secret.Data[key], 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(l.dir, key)); err != nil {
			return err
		}
	}
	return nil
}
