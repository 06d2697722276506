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
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
