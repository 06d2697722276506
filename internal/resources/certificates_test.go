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
	data, renewAt, err := NextCertificates(cache, "cluster.local", nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := data[tlsCAKey]; !ok || len(data) != 4 {
		t.Fatalf("keys %v, want the CA's certificate and key, and the nodes' certificate and key", slices.Sorted(maps.Keys(data)))
	}
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

// What the Secret holds stays while it is valid; the certificate is renewed, by the same CA
// and with a new serial, once it is due, when it was taken away, or when it names another
// Cache; the CA is replaced only when it is gone or broken.
func TestCertificatesAreRenewedWhenDueAndTheCAStays(t *testing.T) {
	cache := tlsCache(3 * time.Hour)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	first, renewAt, err := NextCertificates(cache, "cluster.local", nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	same, sameRenewAt, err := NextCertificates(cache, "cluster.local", nil, first, renewAt.Add(-time.Second))
	if err != nil || !maps.EqualFunc(same, first, bytesEqual) || !sameRenewAt.Equal(renewAt) {
		t.Fatalf("before renewal: changed %v, renewal %v, %v", !maps.EqualFunc(same, first, bytesEqual), sameRenewAt, err)
	}
	serial := func(data map[string][]byte) string {
		cert, err := LeafCertificate(data)
		if err != nil {
			t.Fatal(err)
		}
		return cert.SerialNumber.String()
	}
	withoutCert := maps.Clone(first)
	delete(withoutCert, TLSCertKey)
	for name, tc := range map[string]struct {
		data map[string][]byte
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
		next, _, err := NextCertificates(c, "cluster.local", nil, tc.data, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if !bytesEqual(next[TLSCAKey], first[TLSCAKey]) || !bytesEqual(next[tlsCAKey], first[tlsCAKey]) {
			t.Errorf("%s: the CA changed", name)
		}
		if serial(next) == serial(first) || bytesEqual(next[TLSKeyKey], first[TLSKeyKey]) {
			t.Errorf("%s: the certificate was not renewed with a new serial and key", name)
		}
	}
	broken := maps.Clone(first)
	broken[tlsCAKey] = []byte("not a key")
	next, _, err := NextCertificates(cache, "cluster.local", nil, broken, now)
	if err != nil {
		t.Fatal(err)
	}
	if bytesEqual(next[TLSCAKey], first[TLSCAKey]) || serial(next) == serial(first) {
		t.Error("a CA whose key is broken was kept")
	}
}

// The certificate names the pods' IPs, to which a Cluster sends its clients: a client that
// verifies by the IP it dials accepts it. A pod with a new IP brings a new certificate, which
// names only the IPs of the pods there are; a pod that is gone brings none.
func TestTheCertificateNamesThePodsIPsAndANewIPBringsANewOne(t *testing.T) {
	cache := tlsCache(24 * time.Hour)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	a, b, c := net.ParseIP("127.0.0.11"), net.ParseIP("127.0.0.12"), net.ParseIP("127.0.0.13")
	first, _, err := NextCertificates(cache, "cluster.local", []net.IP{a, b}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := LeafCertificate(first)
	if err != nil {
		t.Fatal(err)
	}
	config, err := TLSClientConfig(cache, first[TLSCAKey])
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

	fewer, _, err := NextCertificates(cache, "cluster.local", []net.IP{b}, first, now)
	if err != nil || !maps.EqualFunc(fewer, first, bytesEqual) {
		t.Fatalf("a pod gone: the certificate changed (%v)", err)
	}
	more, _, err := NextCertificates(cache, "cluster.local", []net.IP{b, c}, first, now)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := LeafCertificate(more)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(renewed.IPAddresses); got != fmt.Sprint([]net.IP{b, c}) || renewed.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Errorf("a pod with a new IP: the certificate names %s, serial %s (was %s); want the pods' IPs, a new serial", got, renewed.SerialNumber, cert.SerialNumber)
	}
	if !bytesEqual(more[TLSCAKey], first[TLSCAKey]) {
		t.Error("a pod with a new IP: the CA changed")
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// A Secret the user names is usable when its certificate is signed by its CA, serves and
// authenticates, and names the Service; otherwise the reason says what is wrong.
func TestAUsersCertificateMustServeAuthenticateAndNameTheService(t *testing.T) {
	cache := tlsCache(24 * time.Hour)
	now := time.Now()
	good, _, err := NextCertificates(cache, "cluster.local", nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := UsableCertificate(cache, good); err != nil {
		t.Errorf("a certificate as the operator issues it: %v", err)
	}
	other, _, err := NextCertificates(cache, "cluster.local", nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	ca, caKey, err := parseCA(good)
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
	data, _, err := NextCertificates(cache, "cluster.local", nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsSecret, caSecret, published := TLSSecret(cache, data), CASecret(cache, data), CAConfigMap(cache, data[TLSCAKey])
	if got := slices.Sorted(maps.Keys(tlsSecret.Data)); !slices.Equal(got, []string{TLSCAKey, TLSCertKey, TLSKeyKey}) {
		t.Errorf("TLS Secret %s holds %v", tlsSecret.Name, got)
	}
	if got := slices.Sorted(maps.Keys(caSecret.Data)); !slices.Equal(got, []string{TLSCAKey, tlsCAKey}) || caSecret.Name == tlsSecret.Name {
		t.Errorf("CA Secret %s holds %v", caSecret.Name, got)
	}
	if got := slices.Sorted(maps.Keys(published.Data)); !slices.Equal(got, []string{TLSCAKey}) || published.Data[TLSCAKey] != string(data[TLSCAKey]) {
		t.Errorf("ConfigMap %s holds %v", published.Name, got)
	}
	if !bytesEqual(CertificateData(tlsSecret.Data, caSecret.Data)[tlsCAKey], data[tlsCAKey]) {
		t.Error("the two Secrets together do not give back the CA's key")
	}
}

// A TLS Secret written before the CA's Secret existed holds the CA's key: the CA is taken from it,
// not replaced (clients trust it), it moves to the CA's Secret, and the TLS Secret written next
// no longer holds it. Once the CA's Secret holds a CA, that one is the CA.
func TestACAKeptInTheTLSSecretMovesToTheCAsSecret(t *testing.T) {
	cache := tlsCache(90 * 24 * time.Hour)
	now := time.Now()
	before, _, err := NextCertificates(cache, "cluster.local", nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := NextCertificates(cache, "cluster.local", nil, CertificateData(before, nil), now)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(next, before, bytesEqual) {
		t.Error("the certificates of a TLS Secret that holds the CA's key were issued again")
	}
	caSecret := CASecret(cache, next)
	if !bytesEqual(caSecret.Data[tlsCAKey], before[tlsCAKey]) {
		t.Error("the CA's Secret does not take the CA's key from the TLS Secret")
	}
	if _, ok := TLSSecret(cache, next).Data[tlsCAKey]; ok {
		t.Error("the TLS Secret written next still holds the CA's key")
	}

	other, _, err := NextCertificates(cache, "cluster.local", nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := CertificateData(before, CASecret(cache, other).Data); !bytesEqual(got[tlsCAKey], other[tlsCAKey]) || !bytesEqual(got[TLSCAKey], other[TLSCAKey]) {
		t.Error("the CA is not the CA's Secret's when it holds one")
	}
}
