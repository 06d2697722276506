package resources

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	cachev2 "example.com/cache-operator/api/v2"
)

// This file is the certificates of a Cache with TLS: a CA of the Cache's own and one certificate
// its nodes share. The nodes' certificate and key and the CA's certificate are kept in the Secret
// cache.TLSSecretName() (TLSSecret), which the pods mount; the CA's key apart, in the Secret
// cache.CASecretName() (CASecret), which only the operator reads, so that what a pod or a backup
// Job can read does not let anyone sign a certificate. NextCertificates decides from what the two
// hold (Certificates) and the clock whether anything is to be issued; the operator writes what
// it returns, and the nodes are told to read their files again (see the controller's
// ensurecertificates.go). The CA's certificate is published for clients in the ConfigMap
// cache.CAConfigMapName() (CAConfigMap).
//
// The certificates are issued with crypto/x509 rather than cert-controller, which the conversion
// webhook uses: cert-controller gives every certificate the serial number 1, and a client tells a
// renewed certificate from the one before by its serial.

// Keys of the TLS Secret, the CA's Secret and the published CA: the CA's certificate is in all
// three, the nodes' certificate and key only in the TLS Secret, the CA's key only in the CA's
// Secret (and in the TLS Secret of a Cache made before it had one, until the operator moves it).
const (
	TLSCAKey   = "ca.crt"
	TLSCertKey = corev1.TLSCertKey
	TLSKeyKey  = corev1.TLSPrivateKeyKey
	tlsCAKey   = "ca.key"
)

// caValidity is how long a Cache's CA is valid. Clients trust it, so it is not renewed: a CA
// that is missing or no longer valid for a certificate's whole validity is replaced, and clients
// must then trust the new one (docs/tls.md).
const caValidity = 10 * 365 * 24 * time.Hour

// backdate is how long before its issue a certificate is valid from, for clocks that are behind.
const backdate = time.Hour

// CertificateNames are the DNS names in a Cache's certificate: its Service's, which lists every
// node, and each node's under it (<pod>.<service>), in each form a client in a cluster of the
// given DNS domain may dial; a Replicated Cache's Services of its primary and of its replicas
// (RoleServices), which clients dial rather than a node; and localhost, for a port-forward. The
// certificate also names the IPs of the Cache's pods, to which a Cluster sends its clients
// (NextCertificates).
func CertificateNames(cache *cachev2.Cache, clusterDomain string) []string {
	service := cache.Name + "." + cache.Namespace
	names := []string{
		cache.Name, service, service + ".svc", "*." + service + ".svc",
		service + ".svc." + clusterDomain, "*." + service + ".svc." + clusterDomain,
	}
	if cache.Spec.Mode == cachev2.ModeReplicated {
		for _, name := range []string{PrimaryServiceName(cache), ReplicasServiceName(cache)} {
			role := name + "." + cache.Namespace
			names = append(names, name, role, role+".svc", role+".svc."+clusterDomain)
		}
	}
	return append(names, "localhost")
}

// ServerName is the name by which the operator, and a client that dials a node whose IP the
// certificate does not name yet, verifies its certificate: the Service's, which every
// certificate of the Cache names.
func ServerName(cache *cachev2.Cache) string { return cache.Name + "." + cache.Namespace + ".svc" }

// certificateUsages are the uses of a node's certificate: it serves clients, and it is the client
// certificate a node shows when it connects to another, on the cluster bus and for replication.
var certificateUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// Certificates are what a Cache's two Secrets hold (nil for one that does not exist): TLS, the
// TLS Secret's, which the pods mount (the CAs the nodes trust, their certificate and key), and CA,
// the CA's Secret's (its certificate and key).
type Certificates struct {
	TLS, CA map[string][]byte
	// Probe, in what NextCertificates returns, is a client certificate of the CA that the next
	// certificate is to be signed by, while the nodes are still to be found to trust it: a node
	// that accepts it in a TLS handshake trusts the CA (the nodes check a client's certificate
	// when one is shown). Nil otherwise.
	Probe *tls.Certificate
}

// NodesReport is what the nodes of a Cache report that a change of its CA waits on.
type NodesReport struct {
	// TrustCA: every node accepts Probe, so trusts the CA the next certificate is signed by.
	TrustCA bool
	// ServedSerial is the serial of the certificate every node serves (status.certificateSerial).
	// It is compared with the certificate of the data NextCertificates is given, which may be
	// fresher than what the caller read.
	ServedSerial string
}

// NextCertificates is what a Cache's Secrets are to hold in a cluster of the given DNS domain,
// given the IPs of the Cache's pods, what the Secrets hold, what the nodes report, and the time:
// the same data while the CA and the certificate are valid, and new ones where not.
//
// A certificate is renewed once a third of its validity is left, or when it is missing, does not
// match its key or the CA, names other DNS names, or lacks the IP of a pod. A pod that starts
// with a new IP so brings a new certificate, and one that is gone does not: its IP goes at the
// next renewal. The second result is when the certificate it returns is due for renewal.
//
// A CA that is missing, broken or no longer valid for a certificate's whole validity is replaced,
// in three steps, so that no node ever shows a certificate that another does not trust (each
// reloads its files at its own time, as the kubelet updates them): the nodes are given the new CA
// beside the old ones and keep their certificate, until every one trusts the new CA (Probe); then
// they get a certificate of the new CA; once every node serves that one, the old CAs go.
func NextCertificates(cache *cachev2.Cache, clusterDomain string, podIPs []net.IP, held Certificates, nodes NodesReport, now time.Time) (Certificates, time.Time, error) {
	validity := certificateValidity(cache)
	next := Certificates{CA: map[string][]byte{}, TLS: map[string][]byte{}}
	ca, caKey, err := currentCA(held)
	if err == nil && !now.Before(ca.NotBefore) && !now.Add(validity).After(ca.NotAfter) {
		next.CA[TLSCAKey], next.CA[tlsCAKey] = pemCert(ca.Raw), nil
		if next.CA[tlsCAKey], err = pemKey(caKey); err != nil {
			return Certificates{}, time.Time{}, err
		}
	} else {
		if ca, caKey, err = issueCA(cache, now); err != nil {
			return Certificates{}, time.Time{}, err
		}
		next.CA[TLSCAKey] = pemCert(ca.Raw)
		if next.CA[tlsCAKey], err = pemKey(caKey); err != nil {
			return Certificates{}, time.Time{}, err
		}
	}

	names := CertificateNames(cache, clusterDomain)
	trusted := trustedCAs(held.TLS[TLSCAKey], now)
	leaf, err := servableCertificate(held.TLS, trusted, now)
	servable := err == nil
	fromCA := servable && leaf.CheckSignatureFrom(ca) == nil
	keep := false
	switch {
	case len(trusted) == 0 || !servable:
		// A new Cache, or nothing its nodes can serve: no node is to be kept in step.
		trusted = []*x509.Certificate{ca}
	case !slices.ContainsFunc(trusted, ca.Equal):
		// A new CA: the nodes trust it beside the old ones first, and keep their certificate.
		trusted, keep = append(trusted, ca), true
	case !fromCA && !nodes.TrustCA:
		// Not every node trusts the new CA yet: they keep the certificate of an old one.
		keep = true
	case fromCA && len(trusted) > 1 && leaf.SerialNumber.String() == nodes.ServedSerial:
		// Every node serves the new CA's certificate: the old CAs go.
		trusted = []*x509.Certificate{ca}
	}
	next.TLS[TLSCAKey] = caBundle(trusted)
	if !keep && fromCA {
		_, err := validCertificate(names, podIPs, ca, held.TLS, now)
		keep = err == nil
	}
	if keep {
		next.TLS[TLSCertKey], next.TLS[TLSKeyKey] = held.TLS[TLSCertKey], held.TLS[TLSKeyKey]
		if !fromCA {
			if next.Probe, err = probeCertificate(cache, ca, caKey, now); err != nil {
				return Certificates{}, time.Time{}, err
			}
		}
		return next, RenewalTime(leaf), nil
	}
	cert, key, err := issueCertificate(cache, names, podIPs, ca, caKey, now.Add(-backdate), now.Add(validity))
	if err != nil {
		return Certificates{}, time.Time{}, err
	}
	next.TLS[TLSCertKey] = pemCert(cert.Raw)
	if next.TLS[TLSKeyKey], err = pemKey(key); err != nil {
		return Certificates{}, time.Time{}, err
	}
	return next, RenewalTime(cert), nil
}

// currentCA is the CA of the CA's Secret, or, for a Cache made before it had one, of its TLS
// Secret.
func currentCA(held Certificates) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if len(held.CA[tlsCAKey]) > 0 {
		return parseCA(held.CA)
	}
	return parseCA(held.TLS)
}

// trustedCAs are the CA certificates of a PEM bundle that are valid at now.
func trustedCAs(bundle []byte, now time.Time) []*x509.Certificate {
	return slices.DeleteFunc(certificatesIn(bundle), func(ca *x509.Certificate) bool {
		return !ca.IsCA || now.Before(ca.NotBefore) || !now.Before(ca.NotAfter)
	})
}

// TrustBundle is the PEM bundle of the certificates of the PEM bundles given that are valid at
// now, each once, in their order. They are roots to trust, whatever they are: a user's issuer
// may give a self-signed certificate that is not marked a CA, which Go and OpenSSL trust as a
// root all the same.
func TrustBundle(now time.Time, bundles ...[]byte) []byte {
	var roots []*x509.Certificate
	for _, bundle := range bundles {
		for _, root := range certificatesIn(bundle) {
			if !now.Before(root.NotBefore) && now.Before(root.NotAfter) && !slices.ContainsFunc(roots, root.Equal) {
				roots = append(roots, root)
			}
		}
	}
	return caBundle(roots)
}

// certificatesIn are the certificates of a PEM bundle.
func certificatesIn(bundle []byte) []*x509.Certificate {
	var certs []*x509.Certificate
	for block, rest := pem.Decode(bundle); block != nil; block, rest = pem.Decode(rest) {
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
			certs = append(certs, cert)
		}
	}
	return certs
}

// caBundle is the PEM bundle of the CA certificates given, in their order.
func caBundle(cas []*x509.Certificate) []byte {
	var bundle []byte
	for _, ca := range cas {
		bundle = append(bundle, pemCert(ca.Raw)...)
	}
	return bundle
}

// servableCertificate is the certificate of the data of a TLS Secret, if the nodes can serve it
// now: it matches its key, is valid at now, serves and authenticates, and is signed by one of the
// CAs given.
func servableCertificate(data map[string][]byte, cas []*x509.Certificate, now time.Time) (*x509.Certificate, error) {
	if _, err := tls.X509KeyPair(data[TLSCertKey], data[TLSKeyKey]); err != nil {
		return nil, err
	}
	cert, err := LeafCertificate(data)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: certificateUsages}); err != nil {
		return nil, err
	}
	return cert, nil
}

// probeValidity is how long a probe's client certificate is valid: it is made afresh each pass.
const probeValidity = time.Hour

// probeCertificate is a client certificate of the CA given, which a node accepts only if it
// trusts that CA.
func probeCertificate(cache *cachev2.Cache, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) (*tls.Certificate, error) {
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "cache-operator trust probe of " + ServerName(cache), Organization: []string{"cache-operator"}},
		NotBefore:   now.Add(-backdate),
		NotAfter:    now.Add(probeValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	cert, key, err := sign(template, ca, caKey)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// certificateValidity is the validity of the certificates the spec asks for, the schema's default
// when unset.
func certificateValidity(cache *cachev2.Cache) time.Duration {
	if v := cache.Spec.TLS.CertificateValidity; v != nil && v.Duration > 0 {
		return v.Duration
	}
	return 90 * 24 * time.Hour
}

// RenewalTime is when a certificate is renewed: once a third of its validity is left.
func RenewalTime(cert *x509.Certificate) time.Time {
	return cert.NotAfter.Add(-cert.NotAfter.Sub(cert.NotBefore) / 3)
}
