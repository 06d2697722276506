package resources

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	cachev2 "example.com/cache-operator/api/v2"
)

// Issuing, parsing and checking the certificates of a Cache with TLS (certificates.go says which
// it has and when they change), with crypto/x509.

// UsableCertificate is the certificate in the data of a TLS Secret the user names
// (spec.tls.secretName), or why the nodes cannot serve it: it must match its key, be signed by
// the CA beside it, be valid now, serve and authenticate (a node shows it to the others on the
// cluster bus), and name ServerName, which the operator verifies the nodes by.
func UsableCertificate(cache *cachev2.Cache, data map[string][]byte) (*x509.Certificate, error) {
	if _, err := tls.X509KeyPair(data[TLSCertKey], data[TLSKeyKey]); err != nil {
		return nil, fmt.Errorf("keys %s and %s: %w", TLSCertKey, TLSKeyKey, err)
	}
	cert, err := LeafCertificate(data)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[TLSCAKey]) {
		return nil, fmt.Errorf("no PEM CA certificate under %s", TLSCAKey)
	}
	for _, usage := range certificateUsages {
		opts := x509.VerifyOptions{Roots: roots, DNSName: ServerName(cache), KeyUsages: []x509.ExtKeyUsage{usage}}
		if _, err := cert.Verify(opts); err != nil {
			return nil, fmt.Errorf("the certificate in %s, for %s: %w", TLSCertKey, usageName[usage], err)
		}
	}
	return cert, nil
}

// usageName says what a use of a certificate is for, in a message.
var usageName = map[x509.ExtKeyUsage]string{
	x509.ExtKeyUsageServerAuth: "server authentication (clients of the nodes)",
	x509.ExtKeyUsageClientAuth: "client authentication (the cluster bus, replication)",
}

// LeafCertificate is the certificate the data of a TLS Secret holds, parsed.
func LeafCertificate(data map[string][]byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data[TLSCertKey])
	if block == nil {
		return nil, fmt.Errorf("no PEM certificate under %s", TLSCertKey)
	}
	return x509.ParseCertificate(block.Bytes)
}

// validCertificate is the certificate in data if it is signed by ca, matches its key, has the
// DNS names given and names every IP given, serves and authenticates, and is not yet due for
// renewal.
func validCertificate(names []string, ips []net.IP, ca *x509.Certificate, data map[string][]byte, now time.Time) (*x509.Certificate, error) {
	cert, err := servableCertificate(data, []*x509.Certificate{ca}, now)
	if err != nil {
		return nil, err
	}
	switch {
	case !slices.Equal(cert.DNSNames, names):
		return nil, errors.New("the certificate names other names than the Cache's")
	case slices.ContainsFunc(ips, func(ip net.IP) bool { return !slices.ContainsFunc(cert.IPAddresses, ip.Equal) }):
		return nil, errors.New("the certificate does not name the IP of every pod")
	case !now.Before(RenewalTime(cert)):
		return nil, errors.New("the certificate is due for renewal")
	}
	return cert, nil
}

// parseCA is the CA certificate and key in data.
func parseCA(data map[string][]byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.X509KeyPair(data[TLSCAKey], data[tlsCAKey])
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("the CA's key is not an ECDSA key")
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	if !ca.IsCA {
		return nil, nil, errors.New("the CA certificate is not a CA's")
	}
	return ca, key, nil
}

// issueCA makes a new CA for the Cache.
func issueCA(cache *cachev2.Cache, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cache.Namespace + "/" + cache.Name + " CA", Organization: []string{"cache-operator"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(template, nil, nil)
}

// issueCertificate makes a certificate for the Cache's nodes with the DNS names and IPs given,
// signed by its CA.
func issueCertificate(cache *cachev2.Cache, names []string, ips []net.IP, ca *x509.Certificate, caKey *ecdsa.PrivateKey, begin, end time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: ServerName(cache), Organization: []string{"cache-operator"}},
		DNSNames:    names,
		IPAddresses: ips,
		NotBefore:   begin,
		NotAfter:    end,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: certificateUsages,
	}
	return sign(template, ca, caKey)
}

// sign makes a key and a certificate of it from template, with a random serial number, signed by
// parent and its key, or by itself when parent is nil.
func sign(template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if template.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing a certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
