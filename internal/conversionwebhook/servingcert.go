package conversionwebhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// This file is the webhook's certificate as served: what the server presents (ServingCert), and
// the loader that keeps it, and the CA in the CRD and the validating webhook configuration,
// current with the Secret that webhook.go's rotator writes.

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
