//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/testenv"
)

// installCertificateKind installs cert-manager's Certificate CRD, as its release has it
// (hack/toolchain.sh cert-manager-crds), unless it is there, and waits until it is served.
func installCertificateKind(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	manifest, err := os.ReadFile(filepath.Join(testenv.BinDir(), "cert-manager.io_certificates.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(manifest, &crd.Object); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "cert-manager's Certificate kind to be served", func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(resources.CertificateGVK.GroupVersion().WithKind("CertificateList"))
		if err := admin.List(ctx, list, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// TestACacheGetsItsCertificateFromTheIssuerItNames: a Cache whose spec.tls names a cert-manager
// issuer makes the Certificate that asks the issuer for its nodes' certificate, which
// cert-manager's own schema accepts, owned by the Cache. It makes no pod until the Secret is
// filled. The test then plays cert-manager's controller, which cannot run here (no build of it is
// available): it signs what the Certificate asks for with a CA of its own, and writes the Secret
// as cert-manager does. The node serves that certificate to a client that trusts the CA.
func TestACacheGetsItsCertificateFromTheIssuerItNames(t *testing.T) {
	runBeside(t, 1)
	installCertificateKind(t)
	startOperator(t, "a", "")
	ns := newNamespace(t)
	ctx := context.Background()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "by-issuer", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: valkeyVersion, Memory: resource.MustParse("64Mi"),
			Auth: &cachev2.Auth{}, TLS: &cachev2.TLS{IssuerRef: &cachev2.IssuerRef{Name: "shop-ca"}}},
	}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(c)
	certificate := &unstructured.Unstructured{}
	certificate.SetGroupVersionKind(resources.CertificateGVK)
	testenv.WaitFor(t, time.Minute, "the Cache's cert-manager Certificate", func() (bool, string) {
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.TLSSecretName()}, certificate); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	spec := func(path ...string) string {
		v, _, _ := unstructured.NestedString(certificate.Object, append([]string{"spec"}, path...)...)
		return v
	}
	if owner := metav1.GetControllerOf(certificate); owner == nil || owner.Kind != "Cache" || owner.Name != c.Name {
		t.Errorf("the Certificate's controller is %v, want the Cache", owner)
	}
	if spec("issuerRef", "name") != "shop-ca" || spec("issuerRef", "kind") != "Issuer" || spec("issuerRef", "group") != "cert-manager.io" {
		t.Errorf("the Certificate asks issuer %v, want the Issuer shop-ca", certificate.Object["spec"].(map[string]any)["issuerRef"])
	}
	if spec("secretName") != c.TLSSecretName() {
		t.Errorf("the Certificate fills Secret %q, want %s", spec("secretName"), c.TLSSecretName())
	}
	waitCertificateInvalid(t, key, "does not exist")
	if n := len(cachePods(t, key)); n != 0 {
		t.Fatalf("%d pods made before cert-manager filled the Secret", n)
	}

	// cert-manager's part: sign what the Certificate asks for, and fill the Secret.
	data := signAsCertManager(t, certificate)
	labels, _, _ := unstructured.NestedStringMap(certificate.Object, "spec", "secretTemplate", "labels")
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: spec("secretName"), Namespace: ns, Labels: labels,
			Annotations: map[string]string{"cert-manager.io/certificate-name": certificate.GetName()}},
		Type: corev1.SecretTypeTLS, Data: data,
	}
	if err := admin.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	config := publishedCA(t, c) // the issuer's CA, published for clients
	waitCertificateServed(t, c, config, serialIn(t, secret))
	app, err := connectOverTLS(t, cachePods(t, key)[0].Status.PodIP, cachev2.AppUser, string(appSecret(t, ns, c.AuthSecretName()).Data[resources.AppPasswordKey]), config)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Do(ctx, app.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatalf("SET over TLS: %v", err)
	}
}

// signAsCertManager signs what a cert-manager Certificate asks for with a new CA, as a CA Issuer
// would, and returns the data of the Secret it fills.
func signAsCertManager(t *testing.T, certificate *unstructured.Unstructured) map[string][]byte {
	t.Helper()
	names, _, _ := unstructured.NestedStringSlice(certificate.Object, "spec", "dnsNames")
	usages, _, _ := unstructured.NestedStringSlice(certificate.Object, "spec", "usages")
	durationText, _, _ := unstructured.NestedString(certificate.Object, "spec", "duration")
	duration, err := time.ParseDuration(durationText)
	if err != nil {
		t.Fatalf("the Certificate's duration %q: %v", durationText, err)
	}
	var extUsages []x509.ExtKeyUsage
	for usage, ext := range map[string]x509.ExtKeyUsage{"server auth": x509.ExtKeyUsageServerAuth, "client auth": x509.ExtKeyUsageClientAuth} {
		if slices.Contains(usages, usage) {
			extUsages = append(extUsages, ext)
		}
	}
	ca := testenv.NewCA(t, "shop-ca")
	certFile, keyFile := ca.IssueForNames(t, names, duration, extUsages...)
	data := map[string][]byte{}
	for key, file := range map[string]string{resources.TLSCAKey: ca.CertFile, resources.TLSCertKey: certFile, resources.TLSKeyKey: keyFile} {
		if data[key], err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
	}
	return data
}
