package resources

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
)

// next is NextCertificates with nodes that report every change done, as when a Cache has no pods.
func next(t *testing.T, cache *cachev2.Cache, ips []net.IP, held Certificates, now time.Time) (Certificates, time.Time) {
	t.Helper()
	certs, renewAt, err := NextCertificates(cache, "cluster.local", ips, held, NodesReport{TrustCA: true, ServedSerial: servedSerial(held)}, now)
	if err != nil {
		t.Fatal(err)
	}
	return certs, renewAt
}

// stepAt is NextCertificates at now for a Cache with no pods, with what its nodes report.
func stepAt(t *testing.T, cache *cachev2.Cache, held Certificates, nodes NodesReport, now time.Time) Certificates {
	t.Helper()
	certs, _, err := NextCertificates(cache, "cluster.local", nil, held, nodes, now)
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

// servedSerial is the serial of the certificate held, as if every node served it; empty for none.
func servedSerial(held Certificates) string {
	if cert, err := LeafCertificate(held.TLS); err == nil {
		return cert.SerialNumber.String()
	}
	return ""
}

func tlsCache(validity time.Duration) *cachev2.Cache {
	c := testCache()
	c.Spec.TLS = &cachev2.TLS{CertificateValidity: &metav1.Duration{Duration: validity}}
	return c
}

// A Cache's first certificates: a CA, and a certificate for its nodes that a client trusting
// the CA accepts by the Service's name, that serves and authenticates (the cluster bus asks a
// certificate of every node), and that is renewed once a third of its validity is left.
func TestTheFirstCertificatesServeAndAuthenticateByTheCachesNames(t *testing.T) {
	cache := tlsCache(90 * 24 * time.Hour)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	certs, renewAt := next(t, cache, nil, Certificates{}, now)
	data := certs.TLS
	if _, err := tls.X509KeyPair(data[TLSCertKey], data[TLSKeyKey]); err != nil {
		t.Fatal(err)
	}
	cert, err := LeafCertificate(data)
	if err != nil {
		t.Fatal(err)
	}
	config, err := TLSClientConfig(cache, data[TLSCAKey])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ServerName(cache), "orders-cache-0.orders-cache.shop.svc", "orders-cache.shop.svc.cluster.local", "localhost"} {
		for _, usage := range certificateUsages {
			if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: config.RootCAs, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("the certificate for %s, use %v: %v", name, usage, err)
			}
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "other-cache.shop.svc", Roots: config.RootCAs, CurrentTime: now}); err == nil {
		t.Error("the certificate is good for another Cache's name")
	}
	if want := now.Add(60 * 24 * time.Hour); renewAt.Sub(want).Abs() > time.Hour {
		t.Errorf("renewal at %v, want about %v (a third of 90 days left)", renewAt, want)
	}
}

// A Replicated Cache's clients dial the Services of its primary and of its replicas: its
// certificate names both, in each form, and the other modes' names neither.
func TestAReplicatedCachesCertificateNamesItsRoleServices(t *testing.T) {
	roleNames := []string{"orders-cache-primary", "orders-cache-primary.shop.svc", "orders-cache-replicas.shop.svc.cluster.local"}
	for _, mode := range []cachev2.Mode{cachev2.ModeReplicated, cachev2.ModeCluster} {
		cache := tlsCache(24 * time.Hour)
		cache.Spec.Mode = mode
		now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
		certs, _ := next(t, cache, nil, Certificates{}, now)
		cert, err := LeafCertificate(certs.TLS)
		if err != nil {
			t.Fatal(err)
		}
		config, err := TLSClientConfig(cache, certs.TLS[TLSCAKey])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range roleNames {
			_, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: config.RootCAs, CurrentTime: now})
			if (err == nil) != (mode == cachev2.ModeReplicated) {
				t.Errorf("%s: the certificate for %s: %v", mode, name, err)
			}
		}
	}
}

// What the Secret holds stays while it is valid; the certificate is renewed, by the same CA
// and with a new serial, once it is due, when it was taken away, or when it names another
// Cache; the CA is replaced only when it is gone or broken.
func TestCertificatesAreRenewedWhenDueAndTheCAStays(t *testing.T) {
	cache := tlsCache(3 * time.Hour)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	first, renewAt := next(t, cache, nil, Certificates{}, now)
	same, sameRenewAt := next(t, cache, nil, first, renewAt.Add(-time.Second))
	if !sameCertificates(same, first) || !sameRenewAt.Equal(renewAt) || same.Probe != nil {
		t.Fatalf("before renewal: changed %v, renewal %v", !sameCertificates(same, first), sameRenewAt)
	}
	withoutCert := Certificates{TLS: maps.Clone(first.TLS), CA: first.CA}
	delete(withoutCert.TLS, TLSCertKey)
	for name, tc := range map[string]struct {
		held Certificates
		at   time.Time
	}{
		"due":                 {first, renewAt},
		"certificate removed": {withoutCert, now},
		"another Cache's":     {first, now}, // below, by name
	} {
		c := cache
		if name == "another Cache's" {
			c = tlsCache(3 * time.Hour)
			c.Name = "other-cache"
		}
		renewed, _ := next(t, c, nil, tc.held, tc.at)
		if !maps.EqualFunc(renewed.CA, first.CA, bytesEqual) || !bytesEqual(renewed.TLS[TLSCAKey], first.TLS[TLSCAKey]) {
			t.Errorf("%s: the CA changed", name)
		}
		if serial(t, renewed.TLS) == serial(t, first.TLS) || bytesEqual(renewed.TLS[TLSKeyKey], first.TLS[TLSKeyKey]) {
			t.Errorf("%s: the certificate was not renewed with a new serial and key", name)
		}
	}
}

func serial(t *testing.T, data map[string][]byte) string {
	t.Helper()
	cert, err := LeafCertificate(data)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber.String()
}

func sameCertificates(a, b Certificates) bool {
	return maps.EqualFunc(a.TLS, b.TLS, bytesEqual) && maps.EqualFunc(a.CA, b.CA, bytesEqual)
}

// The certificate names the pods' IPs, to which a Cluster sends its clients: a client that
// verifies by the IP it dials accepts it. A pod with a new IP brings a new certificate, which
// names only the IPs of the pods there are; a pod that is gone brings none.
func TestTheCertificateNamesThePodsIPsAndANewIPBringsANewOne(t *testing.T) {
	cache := tlsCache(24 * time.Hour)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	a, b, c := net.ParseIP("127.0.0.11"), net.ParseIP("127.0.0.12"), net.ParseIP("127.0.0.13")
	first, _ := next(t, cache, []net.IP{a, b}, Certificates{}, now)
	cert, err := LeafCertificate(first.TLS)
	if err != nil {
		t.Fatal(err)
	}
	config, err := TLSClientConfig(cache, first.TLS[TLSCAKey])
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []net.IP{a, b} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: ip.String(), Roots: config.RootCAs, CurrentTime: now}); err != nil {
			t.Errorf("a client that dials %s: %v", ip, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: c.String(), Roots: config.RootCAs, CurrentTime: now}); err == nil {
		t.Errorf("the certificate is good for %s, which no pod has", c)
	}

	if fewer, _ := next(t, cache, []net.IP{b}, first, now); !sameCertificates(fewer, first) {
		t.Fatal("a pod gone: the certificate changed")
	}
	more, _ := next(t, cache, []net.IP{b, c}, first, now)
	renewed, err := LeafCertificate(more.TLS)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(renewed.IPAddresses); got != fmt.Sprint([]net.IP{b, c}) || renewed.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Errorf("a pod with a new IP: the certificate names %s, serial %s (was %s); want the pods' IPs, a new serial", got, renewed.SerialNumber, cert.SerialNumber)
	}
	if !bytesEqual(more.TLS[TLSCAKey], first.TLS[TLSCAKey]) {
		t.Error("a pod with a new IP: the CA changed")
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// A Secret the user names is usable when its certificate is signed by its CA, serves and
// authenticates, and names the Service; otherwise the reason says what is wrong.
func TestAUsersCertificateMustServeAuthenticateAndNameTheService(t *testing.T) {
	cache := tlsCache(24 * time.Hour)
	now := time.Now()
	issued, _ := next(t, cache, nil, Certificates{}, now)
	good := issued.TLS
	if _, err := UsableCertificate(cache, good); err != nil {
		t.Errorf("a certificate as the operator issues it: %v", err)
	}
	other := func() map[string][]byte { c, _ := next(t, cache, nil, Certificates{}, now); return c.TLS }()
	ca, caKey, err := parseCA(issued.CA)
	if err != nil {
		t.Fatal(err)
	}
	serverOnly := func() map[string][]byte {
		cert, key, err := sign(&x509.Certificate{DNSNames: CertificateNames(cache, "cluster.local"), NotBefore: now.Add(-time.Hour),
			NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
		if err != nil {
			t.Fatal(err)
		}
		pemKeyBytes, err := pemKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{TLSCAKey: good[TLSCAKey], TLSCertKey: pemCert(cert.Raw), TLSKeyKey: pemKeyBytes}
	}()
	otherCache := tlsCache(24 * time.Hour)
	otherCache.Name = "other-cache"
	for name, tc := range map[string]struct {
		cache *cachev2.Cache
		data  map[string][]byte
		want  string
	}{
		"another CA's":        {cache, map[string][]byte{TLSCAKey: other[TLSCAKey], TLSCertKey: good[TLSCertKey], TLSKeyKey: good[TLSKeyKey]}, "unknown authority"},
		"another key":         {cache, map[string][]byte{TLSCAKey: good[TLSCAKey], TLSCertKey: good[TLSCertKey], TLSKeyKey: other[TLSKeyKey]}, "tls.key"},
		"no CA":               {cache, map[string][]byte{TLSCertKey: good[TLSCertKey], TLSKeyKey: good[TLSKeyKey]}, "no PEM CA certificate"},
		"for servers only":    {cache, serverOnly, "client authentication"},
		"for another Service": {otherCache, good, "other-cache.shop.svc"},
	} {
		if _, err := UsableCertificate(tc.cache, tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error that says %q", name, err, tc.want)
		}
	}
}

// The CA's key is kept apart from what the pods mount and clients are pointed at: the TLS Secret
// holds the nodes' certificate and key and the CA's certificate, the CA's Secret the CA's
// certificate and key, and the published ConfigMap the CA's certificate only.
func TestTheCAsKeyIsOnlyInTheCAsSecret(t *testing.T) {
	cache := tlsCache(90 * 24 * time.Hour)
	certs, _ := next(t, cache, nil, Certificates{}, time.Now())
	tlsSecret, caSecret, published := TLSSecret(cache, certs.TLS), CASecret(cache, certs.CA), CAConfigMap(cache, certs.TLS[TLSCAKey])
	if got := slices.Sorted(maps.Keys(tlsSecret.Data)); !slices.Equal(got, []string{TLSCAKey, TLSCertKey, TLSKeyKey}) {
		t.Errorf("TLS Secret %s holds %v", tlsSecret.Name, got)
	}
	if got := slices.Sorted(maps.Keys(caSecret.Data)); !slices.Equal(got, []string{TLSCAKey, tlsCAKey}) || caSecret.Name == tlsSecret.Name {
		t.Errorf("CA Secret %s holds %v", caSecret.Name, got)
	}
	if !bytesEqual(caSecret.Data[TLSCAKey], tlsSecret.Data[TLSCAKey]) {
		t.Error("the nodes are not given the CA's certificate")
	}
	if got := slices.Sorted(maps.Keys(published.Data)); !slices.Equal(got, []string{TLSCAKey}) || published.Data[TLSCAKey] != string(certs.TLS[TLSCAKey]) {
		t.Errorf("ConfigMap %s holds %v", published.Name, got)
	}
}

// A TLS Secret written before the CA's Secret existed holds the CA's key: the CA is taken from it,
// not replaced (clients trust it), it moves to the CA's Secret, and the TLS Secret written next
// no longer holds it. Once the CA's Secret holds a CA, that one is the CA.
func TestACAKeptInTheTLSSecretMovesToTheCAsSecret(t *testing.T) {
	cache := tlsCache(90 * 24 * time.Hour)
	now := time.Now()
	current, _ := next(t, cache, nil, Certificates{}, now)
	legacy := maps.Clone(current.TLS)
	legacy[tlsCAKey] = current.CA[tlsCAKey]
	moved, _ := next(t, cache, nil, Certificates{TLS: legacy}, now)
	if !sameCertificates(moved, current) {
		t.Error("the certificates of a TLS Secret that holds the CA's key were not kept, or the TLS Secret keeps the CA's key")
	}
}

// A CA replaced (here: its Secret deleted) changes hands in three steps, none of which has a
// node show a certificate another does not trust: the nodes get the new CA beside the old and
// keep their certificate while any does not trust the new one (and a probe certificate of the
// new CA is made to find out); then a certificate of the new CA; then, once every node serves
// that, the new CA alone.
func TestANewCAIsTrustedBeforeItsCertificateIsServedAndTheOldOneGoesLast(t *testing.T) {
	cache := tlsCache(90 * 24 * time.Hour)
	now := time.Now()
	old, _ := next(t, cache, nil, Certificates{}, now)
	step := func(held Certificates, nodes NodesReport) Certificates { return stepAt(t, cache, held, nodes, now) }
	cas := func(bundle []byte) int { return len(trustedCAs(bundle, now)) }
	pool := func(bundle []byte) *x509.CertPool {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(bundle)
		return roots
	}

	// The CA's Secret is gone: a new CA, trusted beside the old one, the certificate kept.
	a := step(Certificates{TLS: old.TLS}, NodesReport{})
	if bytesEqual(a.CA[TLSCAKey], old.CA[TLSCAKey]) {
		t.Fatal("no new CA")
	}
	if cas(a.TLS[TLSCAKey]) != 2 || serial(t, a.TLS) != serial(t, old.TLS) || a.Probe == nil {
		t.Fatalf("first step: %d CAs given, certificate kept %v, probe %v; want both CAs, the certificate kept, a probe",
			cas(a.TLS[TLSCAKey]), serial(t, a.TLS) == serial(t, old.TLS), a.Probe != nil)
	}
	newCA := pool(a.CA[TLSCAKey])
	if _, err := a.Probe.Leaf.Verify(x509.VerifyOptions{Roots: newCA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the probe is no client certificate of the new CA: %v", err)
	}
	// Until every node trusts it, nothing moves, whatever else they report.
	held := Certificates{TLS: a.TLS, CA: a.CA}
	if waiting := step(held, NodesReport{ServedSerial: serial(t, held.TLS)}); !sameCertificates(waiting, a) || waiting.Probe == nil {
		t.Fatal("the certificate changed before every node trusts the new CA")
	}
	// Every node trusts it: a certificate of the new CA, both CAs still given.
	b := step(held, NodesReport{TrustCA: true})
	leaf, err := LeafCertificate(b.TLS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: newCA, KeyUsages: certificateUsages}); err != nil || cas(b.TLS[TLSCAKey]) != 2 || b.Probe != nil {
		t.Fatalf("second step: the certificate of the new CA %v, %d CAs given, probe %v", err, cas(b.TLS[TLSCAKey]), b.Probe != nil)
	}
	held = Certificates{TLS: b.TLS, CA: b.CA}
	if waiting := step(held, NodesReport{}); !sameCertificates(waiting, b) {
		t.Fatal("the old CA went before every node serves the new CA's certificate")
	}
	// Every node serves it: the new CA alone.
	c := step(held, NodesReport{ServedSerial: serial(t, held.TLS)})
	if !bytesEqual(c.TLS[TLSCAKey], c.CA[TLSCAKey]) || serial(t, c.TLS) != serial(t, b.TLS) {
		t.Fatal("third step: the old CA is still given, or the certificate changed")
	}
	if done := step(Certificates{TLS: c.TLS, CA: c.CA}, NodesReport{}); !sameCertificates(done, c) || done.Probe != nil {
		t.Fatal("the certificates changed once the new CA was all there is")
	}
}
