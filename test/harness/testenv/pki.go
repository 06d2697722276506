package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority of a test's own, which issues certificates for servers on
// loopback and for their clients, written as PEM files in the test's directory.
type CA struct {
	// CertFile is the CA's certificate, what a peer trusts.
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

// NewCA makes a CA named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	ca := &CA{dir: t.TempDir()}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	ca.cert, ca.key, ca.CertFile = ca.sign(t, "ca", template, nil, nil)
	return ca
}

// Issue issues a certificate for cn, valid for the given loopback IPs (none for a client), for
// the uses given, and returns its certificate and key files.
func (ca *CA) Issue(t testing.TB, cn string, ips []string, uses ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: uses,
	}
	for _, ip := range ips {
		template.IPAddresses = append(template.IPAddresses, net.ParseIP(ip))
	}
	return ca.issue(t, cn, template)
}

// IssueForNames issues a certificate for the DNS names given (at least one), valid for validity
// from now, for the uses given, as a CA Issuer of cert-manager does, and returns its certificate
// and key files.
func (ca *CA) IssueForNames(t testing.TB, names []string, validity time.Duration, uses ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), DNSNames: names,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: uses,
	}
	return ca.issue(t, names[0], template)
}

// issue signs template with the CA, and writes the certificate and its key as name.crt and
// name.key.
func (ca *CA) issue(t testing.TB, name string, template *x509.Certificate) (certFile, keyFile string) {
	t.Helper()
	_, key, certFile := ca.sign(t, name, template, ca.cert, ca.key)
	return certFile, writeKey(t, filepath.Join(ca.dir, name+".key"), key)
}

// sign makes a key and a certificate of template, signed by parent (itself when nil), and writes
// the certificate as name.crt.
func (ca *CA) sign(t testing.TB, name string, template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(ca.dir, name+".crt")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key, file
}

func writeKey(t testing.TB, file string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
