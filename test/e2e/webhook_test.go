//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "example.com/cache-operator/api/v1"
	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/testenv"
)

// readThroughV1 reads a Cache through v1, which takes the conversion webhook.
func readThroughV1(key client.ObjectKey) error {
	return admin.Get(context.Background(), key, &cachev1.Cache{})
}

// servingCert is the certificate an operator's webhook presents.
func servingCert(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	// What is checked here is which certificate is served; the API server checks the chain.
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
	if err != nil {
		t.Fatalf("connecting to the webhook at %s: %v", addr, err)
	}
	defer conn.Close() //nolint:errcheck
	return conn.ConnectionState().PeerCertificates[0]
}

func waitWebhookServes(t *testing.T, operators ...*testenv.Operator) {
	t.Helper()
	for _, o := range operators {
		testenv.WaitFor(t, time.Minute, "operator "+o.Name+" to serve its webhook", func() (bool, string) {
			return o.Ready(), "not ready"
		})
	}
}

// Every replica serves the conversion webhook, the standby too: v1 reads go on whichever replica
// is left.
func TestEveryReplicaServesTheConversionWebhook(t *testing.T) {
	a := startOperator(t, "a", "")
	b := startOperator(t, "b", "")
	waitWebhookServes(t, a, b)
	ns := newNamespace(t)
	key := client.ObjectKeyFromObject(newOneNodeCache(t, ns, "orders-cache"))
	// Replicas that start together settle on one CA between them within moments. A read through
	// the balancer reaches one replica or the other, so a read alone does not show that the
	// standby, the one left below, serves a certificate the API server trusts: both must serve
	// the same one, and a read then pass.
	testenv.WaitFor(t, time.Minute, "both replicas to serve one certificate, and a read through v1", func() (bool, string) {
		if !bytes.Equal(servingCert(t, a.WebhookAddr).Raw, servingCert(t, b.WebhookAddr).Raw) {
			return false, "the replicas serve different certificates"
		}
		err := readThroughV1(key)
		return err == nil, fmt.Sprint(err)
	})

	leader, standby := a, b
	if !isLeader(t, a) {
		leader, standby = b, a
	}
	leader.Stop(t, syscall.SIGKILL)
	// A connection that the API server kept open to the killed replica, through the balancer,
	// fails the request it carries at the kill (unexpected EOF), as one through a Service would:
	// that is the API server's connection, not the standby's serving. The standby serves the next.
	testenv.WaitFor(t, 30*time.Second, "a read through v1 with only the standby left", func() (bool, string) {
		err := readThroughV1(key)
		return err == nil, fmt.Sprint(err)
	})
	for i := range 20 { // the balancer picks a replica at random for each connection
		if err := readThroughV1(key); err != nil {
			t.Fatalf("read %d through v1 with only the standby %s left: %v", i, standby.Name, err)
		}
	}
}

// An operator that finds no Secret for its certificate, as on a new install, issues the first
// one and logs no error doing it: nothing has gone wrong.
func TestTheFirstCertificateIsIssuedWithoutAnErrorLogged(t *testing.T) {
	o := startOperator(t, "a", "", "--webhook-cert-secret=first-cert-test-webhook-cert")
	t.Cleanup(func() {
		_ = cluster.Kubectl(context.Background(), "delete", "secret", "first-cert-test-webhook-cert", "--namespace", localcluster.OperatorNamespace)
	})
	waitWebhookServes(t, o)
	noErrorLogged(t, o, "while issuing the first certificate")
}

// The serving certificate is replaced before it expires, and the webhook goes on serving: the
// operator here issues certificates valid for 30 s and renews them 20 s before they expire. Its
// Secret is its own, so that it starts from a certificate it issued.
func TestWebhookCertificateIsRotatedBeforeItExpires(t *testing.T) {
	o := startOperator(t, "a", "", "--webhook-cert-secret=rotation-test-webhook-cert",
		"--webhook-cert-validity=30s", "--webhook-cert-renew-before=20s", "--webhook-cert-check-interval=1s")
	t.Cleanup(func() {
		_ = cluster.Kubectl(context.Background(), "delete", "secret", "rotation-test-webhook-cert", "--namespace", localcluster.OperatorNamespace)
	})
	waitWebhookServes(t, o)
	ns := newNamespace(t)
	key := client.ObjectKeyFromObject(newOneNodeCache(t, ns, "orders-cache"))
	first := servingCert(t, o.WebhookAddr)

	testenv.WaitFor(t, time.Minute, "a new serving certificate", func() (bool, string) {
		now := servingCert(t, o.WebhookAddr)
		return !bytes.Equal(now.Raw, first.Raw), fmt.Sprintf("still the one expiring %s", now.NotAfter)
	})
	rotated := servingCert(t, o.WebhookAddr)
	if !rotated.NotAfter.After(first.NotAfter) {
		t.Errorf("the new certificate expires %s, not after the old one's %s", rotated.NotAfter, first.NotAfter)
	}
	if time.Until(first.NotAfter) < 0 {
		t.Errorf("the first certificate expired (%s) before it was replaced", first.NotAfter)
	}
	testenv.WaitFor(t, time.Minute, "a read through v1 after the rotation", func() (bool, string) {
		err := readThroughV1(key)
		return err == nil, fmt.Sprint(err)
	})
}
