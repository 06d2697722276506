package conversionwebhook

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
)

// The Secret the operator creates holds what cert-controller's own check takes for a valid CA
// and serving certificate, so that its rotation, at start, leaves it as it is.
func TestTheIssuedSecretIsOneCertControllerKeeps(t *testing.T) {
	certs := &rotator.CertRotator{
		CAName: "test-ca", CAOrganization: "test", DNSName: "webhook.ns.svc",
		CaCertDuration: 24 * time.Hour, ServerCertDuration: time.Hour, LookaheadInterval: 10 * time.Minute,
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	now := time.Now()
	secret, err := issuedSecret(types.NamespacedName{Namespace: "ns", Name: "cert"}, certs, now)
	if err != nil {
		t.Fatal(err)
	}
	if secret.Namespace != "ns" || secret.Name != "cert" {
		t.Errorf("the Secret is %s/%s, want ns/cert", secret.Namespace, secret.Name)
	}
	at := now.Add(certs.LookaheadInterval)
	d := secret.Data
	if ok, err := rotator.ValidCert(d[caKey], d[caKey], d[caKeyKey], certs.CAName, nil, at); !ok {
		t.Errorf("cert-controller would issue a new CA: %v", err)
	}
	if ok, err := rotator.ValidCert(d[caKey], d[certKey], d[keyKey], certs.DNSName, certs.ExtKeyUsages, at); !ok {
		t.Errorf("cert-controller would issue a new serving certificate: %v", err)
	}
	if ok, _ := rotator.ValidCert(d[caKey], d[certKey], d[keyKey], certs.DNSName, certs.ExtKeyUsages, now.Add(2*time.Hour)); ok {
		t.Error("the serving certificate is valid past ServerCertDuration")
	}
}
