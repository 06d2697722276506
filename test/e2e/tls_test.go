//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// tlsSecret reads the Cache's TLS Secret, and how a client trusts what it holds. The Secret, which
// the pods mount, never holds the CA's key.
func tlsSecret(t *testing.T, c *cachev2.Cache) (*corev1.Secret, *tls.Config) {
	t.Helper()
	secret := appSecret(t, c.Namespace, c.TLSSecretName())
	if _, ok := secret.Data["ca.key"]; ok {
		t.Errorf("Secret %s, which the pods mount, holds the CA's key", secret.Name)
	}
	config, err := resources.TLSClientConfig(c, secret.Data[resources.TLSCAKey])
	if err != nil {
		t.Fatal(err)
	}
	return secret, config
}

// serialIn is the serial number of the certificate the TLS Secret holds.
func serialIn(t *testing.T, secret *corev1.Secret) string {
	t.Helper()
	cert, err := resources.LeafCertificate(secret.Data)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber.String()
}

// waitCertificateNamesThePods waits until the certificate in the Cache's TLS Secret names the IP
// of each of its pods, and returns the Secret and how a client trusts it.
func waitCertificateNamesThePods(t *testing.T, c *cachev2.Cache) (*corev1.Secret, *tls.Config) {
	t.Helper()
	var secret *corev1.Secret
	var config *tls.Config
	testenv.WaitFor(t, time.Minute, "the certificate to name every pod's IP", func() (bool, string) {
		secret, config = tlsSecret(t, c)
		cert, err := resources.LeafCertificate(secret.Data)
		if err != nil {
			return false, err.Error()
		}
		for _, pod := range cachePods(t, client.ObjectKeyFromObject(c)) {
			if err := cert.VerifyHostname(pod.Status.PodIP); err != nil {
				return false, fmt.Sprintf("%s: %v", pod.Name, err)
			}
		}
		return true, ""
	})
	return secret, config
}

// waitCertificateServed waits until every pod of the Cache serves the certificate with the
// serial given, and the Cache says so.
func waitCertificateServed(t *testing.T, c *cachev2.Cache, config *tls.Config, serial string) {
	t.Helper()
	key := client.ObjectKeyFromObject(c)
	// The kubelet updates a Secret's files at its next sync of the pod, 60 to 90 s after the
	// Secret changes; the operator looks again every 10 s.
	testenv.WaitFor(t, 3*time.Minute, "every node to serve the certificate with serial "+serial, func() (bool, string) {
		for _, pod := range cachePods(t, key) {
			cert, err := valkey.ServedCertificate(context.Background(), pod.Status.PodIP, resources.Port, config)
			if err != nil {
				return false, err.Error()
			}
			if got := cert.SerialNumber.String(); got != serial {
				return false, fmt.Sprintf("%s serves serial %s", pod.Name, got)
			}
		}
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionCertificateServed)
		if cond == nil {
			return false, "no CertificateServed condition"
		}
		return cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, serial), cond.Reason + ": " + cond.Message
	})
}

// publishedCA waits until the ConfigMap that publishes the Cache's CA for clients holds the CA
// the nodes are given, and returns how a client that reads it, as docs/tls.md says, trusts
// the nodes.
func publishedCA(t *testing.T, c *cachev2.Cache) *tls.Config {
	t.Helper()
	var config *tls.Config
	testenv.WaitFor(t, time.Minute, "ConfigMap "+c.CAConfigMapName()+" to publish the nodes' CA", func() (bool, string) {
		cm := &corev1.ConfigMap{}
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: c.CAConfigMapName()}, cm); err != nil {
			return false, err.Error()
		}
		if given := appSecret(t, c.Namespace, c.TLSSecretName()).Data[resources.TLSCAKey]; cm.Data[resources.TLSCAKey] != string(given) {
			return false, "it holds another CA than the nodes'"
		}
		var err error
		config, err = resources.TLSClientConfig(c, []byte(cm.Data[resources.TLSCAKey]))
		return err == nil, fmt.Sprint(err)
	})
	return config
}

// restarts are the Cache's pods by name, each with its UID and its containers' restarts.
func restarts(t *testing.T, key client.ObjectKey) map[string]string {
	t.Helper()
	pods := map[string]string{}
	for _, pod := range cachePods(t, key) {
		var counts []string
		for _, s := range pod.Status.ContainerStatuses {
			counts = append(counts, fmt.Sprintf("%s:%d", s.Name, s.RestartCount))
		}
		pods[pod.Name] = string(pod.UID) + " " + strings.Join(counts, ",")
	}
	return pods
}

// TestAClusterWithTLSServesOnlyTLSAndRenewsItsCertificateWithoutARestart: a Cluster with TLS,
// auth and metrics forms over a TLS bus, its replica syncs over TLS, and its pods (restricted,
// as the Pod Security Standard says) pass their probes and export their metrics through the
// server's socket. Every node refuses a client in plain text and serves one that trusts the
// Cache's CA, by the Service's name or by the IP it dials, which the certificate names. A
// backup's Job speaks TLS to the nodes. A certificate renewed in the Secret is served by every
// node once the kubelet has updated the pods' files, and the Cache says so, with no pod
// restarted, a session opened before still up and no request of a client refused. An evicted
// primary hands its shard over to its replica over TLS, and loses no key; the new pod's IP
// brings a new certificate.
func TestAClusterWithTLSServesOnlyTLSAndRenewsItsCertificateWithoutARestart(t *testing.T) {
	runBesideFirst(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newRestrictedNamespace(t)
	ctx := context.Background()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "sealed", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 1, ReplicasPerShard: new(int32(1)),
			Version: valkeyVersion, Memory: resource.MustParse("64Mi"),
			Auth: &cachev2.Auth{}, Metrics: &cachev2.Metrics{Enabled: true}, TLS: &cachev2.TLS{}},
	}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(c)
	c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	secret, config := waitCertificateNamesThePods(t, c)
	first := serialIn(t, secret)
	waitCertificateServed(t, c, config, first)
	if caKey := appSecret(t, ns, c.CASecretName()).Data["ca.key"]; len(caKey) == 0 {
		t.Errorf("Secret %s holds no CA key", c.CASecretName())
	}

	password := string(appSecret(t, ns, "sealed-auth").Data[resources.AppPasswordKey])
	for _, pod := range cachePods(t, key) {
		if plain, err := connectAs(t, pod.Status.PodIP, cachev2.AppUser, password); err == nil {
			if err := plain.Do(ctx, plain.B().Ping().Build()).Error(); err == nil {
				t.Errorf("%s served a client in plain text", pod.Name)
			}
		}
	}
	// A client that sets no server name verifies each node by the IP it dials, which the
	// cluster gives it (CLUSTER SLOTS).
	byIP := publishedCA(t, c).Clone()
	byIP.ServerName = ""
	app := tlsClusterClient(t, key, byIP, password)
	const keys = 100
	for i := range keys {
		if err := app.Do(ctx, app.B().Set().Key(fmt.Sprint("sealed-", i)).Value(fmt.Sprint(i)).Build()).Error(); err != nil {
			t.Fatalf("SET over TLS: %v", err)
		}
	}
	testenv.WaitFor(t, time.Minute, "every exporter to read its server through the socket, and the replica linked", func() (bool, string) {
		var linked float64
		for _, pod := range cachePods(t, key) {
			families, err := scrapeExporter(&pod)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", pod.Name, err)
			}
			if up, errs := testenv.Sum(families, "redis_up", nil), testenv.Sum(families, "redis_exporter_last_scrape_error", nil); up != 1 || errs != 0 {
				return false, fmt.Sprintf("%s: redis_up %v, scrape errors %v", pod.Name, up, errs)
			}
			linked += testenv.Sum(families, "redis_master_link_up", nil)
		}
		return linked == 1, fmt.Sprintf("%v replicas linked", linked)
	})

	store := newBackupStore(t, ns)
	b := waitBackup(t, newBackup(t, ns, "sealed-nightly", key.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
	if b.Status.Keys != keys {
		t.Errorf("the backup over TLS holds %d keys, want %d", b.Status.Keys, keys)
	}
	waitJobGone(t, b)

	session := tlsClusterClient(t, key, config, password)
	before := restarts(t, key)
	load, stopLoad := startLoad(t, tlsClusterClient(t, key, config, password))
	// A Secret of type kubernetes.io/tls keeps the key; an empty certificate is issued anew.
	secret.Data[resources.TLSCertKey] = nil
	if err := admin.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	emptied := time.Now()
	var renewed string
	testenv.WaitFor(t, time.Minute, "a new certificate in the Secret", func() (bool, string) {
		secret, _ = tlsSecret(t, c)
		if len(secret.Data[resources.TLSCertKey]) == 0 {
			return false, "no certificate yet"
		}
		renewed = serialIn(t, secret)
		return renewed != first, "serial " + renewed
	})
	waitCertificateServed(t, c, config, renewed)
	sawNothing(t, "every node served the renewed certificate", emptied, load, stopLoad, key, before)
	for i := range keys {
		if v, err := session.Do(ctx, session.B().Get().Key(fmt.Sprint("sealed-", i)).Build()).ToString(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("sealed-%d through the session opened before the renewal: %q, %v", i, v, err)
		}
	}

	// The CA replaced, as a user rotates it (its Secret deleted), under a client: the nodes are
	// given the new CA beside the old before any serves a certificate of it, and the old goes once
	// every node does. No request is refused, no pod restarts, and the bus and the replica's link
	// hold throughout (the Cache stays Ready).
	config = rotateCA(t, c, password)

	// A primary's pod evicted, as a node drain does, hands its shard to its replica over TLS
	// first (the preStop hook, with the nodes' certificate), and its replacement joins.
	primaryPod, primary := podOfRole(t, c, cachev2.RolePrimary)
	replicaPod := replicaOf(t, c, primaryPod.Name)
	acl := appSecret(t, ns, resources.ACLSecretName(c))
	operator, err := connectOverTLS(t, replicaPod.Status.PodIP, resources.OperatorUser, string(acl.Data[resources.OperatorUser]), config)
	if err != nil {
		t.Fatal(err)
	}
	waitOneDisruptionAllowed(t, key)
	if err := evict(primaryPod); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the evicted primary's replica to take over by a handover", func() (bool, string) {
		info, err := operator.Do(ctx, operator.B().ClusterInfo().Build()).ToString()
		if err != nil {
			return false, err.Error()
		}
		sent := clusterInfoField(info, "cluster_stats_messages_mfstart_sent")
		return sent > 0, fmt.Sprintf("MFSTART sent %d times", sent)
	})
	waitReadyWithNewNodes(t, key, 2, map[string]bool{primary.ID: true})
	// The new pod's IP brings a new certificate, which every node serves, the old ones without
	// a restart.
	secret, _ = waitCertificateNamesThePods(t, c)
	waitCertificateServed(t, c, config, serialIn(t, secret))
	byIP = config.Clone()
	byIP.ServerName = ""
	app = tlsClusterClient(t, key, byIP, password)
	for i := range keys {
		if v, err := app.Do(ctx, app.B().Get().Key(fmt.Sprint("sealed-", i)).Build()).ToString(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("sealed-%d after the handover: %q, %v", i, v, err)
		}
	}
}

// rotateCA deletes the Secret of the Cache's CA, which has the operator replace the CA, under a
// client that trusts what is published, and checks each step of the change (see
// resources.NextCertificates) and that the client, a session opened before and the Cache saw
// nothing of it. It returns how a client that reads the CA published now trusts the nodes.
func rotateCA(t *testing.T, c *cachev2.Cache, password string) *tls.Config {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKeyFromObject(c)
	cas := func(bundle []byte) int { return strings.Count(string(bundle), "BEGIN CERTIFICATE") }
	before, oldCA := restarts(t, key), appSecret(t, c.Namespace, c.TLSSecretName()).Data[resources.TLSCAKey]
	oldSerial := serialIn(t, appSecret(t, c.Namespace, c.TLSSecretName()))
	load, stopLoad := startLoad(t, tlsClusterClient(t, key, followingPublishedCA(c), password))
	began := time.Now()
	if err := admin.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.CASecretName()}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the nodes to be given a new CA beside the old, their certificate kept", func() (bool, string) {
		secret := appSecret(t, c.Namespace, c.TLSSecretName())
		given := secret.Data[resources.TLSCAKey]
		if serialIn(t, secret) != oldSerial {
			t.Fatal("a certificate of the new CA before the nodes trust it")
		}
		return cas(given) == 2 && strings.Contains(string(given), string(oldCA)), fmt.Sprintf("%d CAs given", cas(given))
	})
	both := publishedCA(t, c)
	var newSerial string
	testenv.WaitFor(t, 4*time.Minute, "a certificate of the new CA, once every node trusts it", func() (bool, string) {
		newSerial = serialIn(t, appSecret(t, c.Namespace, c.TLSSecretName()))
		return newSerial != oldSerial, "serial " + newSerial
	})
	waitCertificateServed(t, c, both, newSerial)
	testenv.WaitFor(t, time.Minute, "the old CA to go once every node serves the new one's certificate", func() (bool, string) {
		given := appSecret(t, c.Namespace, c.TLSSecretName()).Data[resources.TLSCAKey]
		return cas(given) == 1 && !strings.Contains(string(given), string(oldCA)), fmt.Sprintf("%d CAs given", cas(given))
	})
	renewed := publishedCA(t, c)
	sawNothing(t, "the CA was replaced", began, load, stopLoad, key, before)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
	app := tlsClusterClient(t, key, renewed, password)
	if err := app.Do(ctx, app.B().Set().Key("rotated").Value("yes").Build()).Error(); err != nil {
		t.Errorf("a client that trusts the new CA alone: %v", err)
	}
	return renewed
}

// sawNothing stops the load and checks that its client, through what happened since began, had
// no request refused and no acknowledged write lost, and that no pod of the Cache restarted
// (before: restarts, when began).
func sawNothing(t *testing.T, what string, began time.Time, load *upgradeLoad, stopLoad func() (int, int), key client.ObjectKey, before map[string]string) {
	t.Helper()
	lost, acked := stopLoad()
	t.Logf("%s in %s; a client through it: %d requests, %d failed (%s), %d of %d acknowledged writes lost",
		what, time.Since(began).Round(time.Second), load.requests, load.failures, load.errorKinds(), lost, acked)
	if refused := load.refused(); refused > 0 || lost > 0 {
		t.Errorf("%s: a client through it saw %d requests refused and %d acknowledged writes lost", what, refused, lost)
	}
	if after := restarts(t, key); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("%s: pods restarted: before %v, after %v", what, before, after)
	}
}

// followingPublishedCA is how a client that reads the CAs the Cache publishes afresh for each
// connection, as one that mounts the ConfigMap does, trusts the nodes.
func followingPublishedCA(c *cachev2.Cache) *tls.Config {
	return &tls.Config{
		ServerName: resources.ServerName(c),
		MinVersion: tls.VersionTLS12,
		// Verified below, against the CAs published at the time of the handshake.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(state tls.ConnectionState) error {
			cm := &corev1.ConfigMap{}
			if err := admin.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: c.CAConfigMapName()}, cm); err != nil {
				return err
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM([]byte(cm.Data[resources.TLSCAKey])) {
				return errors.New("no CA published")
			}
			intermediates := x509.NewCertPool()
			for _, cert := range state.PeerCertificates[1:] {
				intermediates.AddCert(cert)
			}
			_, err := state.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, DNSName: resources.ServerName(c)})
			return err
		},
	}
}

// tlsClusterClient is a cluster client of the Cache as the application user, over TLS as config
// says.
func tlsClusterClient(t *testing.T, key client.ObjectKey, config *tls.Config, password string) valkeygo.Client {
	t.Helper()
	pods := cachePods(t, key)
	c, err := valkeygo.NewClient(valkeygo.ClientOption{
		InitAddress: []string{net.JoinHostPort(pods[0].Status.PodIP, fmt.Sprint(resources.Port))},
		Username:    cachev2.AppUser, Password: password, TLSConfig: config,
		DisableCache: true, Dialer: net.Dialer{Timeout: 5 * time.Second}, ConnWriteTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// issueAsUsers issues certificates for the Cache from what held holds, as an issuer of the
// user's would: the TLS Secret's data is what a cert-manager Certificate fills (tls.crt, tls.key
// and ca.crt, no CA key).
func issueAsUsers(t *testing.T, c *cachev2.Cache, held resources.Certificates) resources.Certificates {
	t.Helper()
	certs, _, err := resources.NextCertificates(c, "cluster.local", nil, held, resources.NodesReport{TrustCA: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

// waitCertificateInvalid waits until the Cache's CertificateServed condition says the
// certificate cannot be served, and its message says what is given.
func waitCertificateInvalid(t *testing.T, key client.ObjectKey, says string) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("%s CertificateServed %s saying %q", key, cachev2.ReasonCertificateInvalid, says), func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionCertificateServed)
		if cond == nil {
			return false, "no CertificateServed condition"
		}
		return cond.Reason == cachev2.ReasonCertificateInvalid && strings.Contains(cond.Message, says), cond.Reason + ": " + cond.Message
	})
}

// TestACacheServesTheCertificatesOfASecretItNames: a Cache whose spec.tls names a Secret of the
// user's, as a cert-manager Certificate fills one (tls.crt, tls.key and ca.crt, no CA key), makes
// no pod while the Secret is missing or unlabelled, and says so; once it is usable, its node
// serves its certificate to clients that trust its CA, which the operator publishes. A renewed certificate in the Secret is
// served without a restart; one that does not name the Cache is refused, and the node keeps
// serving the one before.
func TestACacheServesTheCertificatesOfASecretItNames(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "")
	ns := newNamespace(t)
	ctx := context.Background()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "issued", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: valkeyVersion, Memory: resource.MustParse("64Mi"),
			Auth: &cachev2.Auth{}, TLS: &cachev2.TLS{SecretName: "issued-by-mine"}},
	}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(c)
	waitCertificateInvalid(t, key, "does not exist")

	// The user's own CA and certificate, as an Issuer of theirs would make them.
	issued := issueAsUsers(t, c, resources.Certificates{})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "issued-by-mine", Namespace: ns}, Type: corev1.SecretTypeTLS, Data: issued.TLS}
	if err := admin.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitCertificateInvalid(t, key, "lacks the label")
	if n := len(cachePods(t, key)); n != 0 {
		t.Fatalf("%d pods made before the Secret was usable", n)
	}
	secret.Labels = map[string]string{cachev2.LabelCredentialsOf: "issued"}
	if err := admin.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	// The user's CA is published for clients like the operator's own.
	config := publishedCA(t, c)
	first := serialIn(t, secret)
	waitCertificateServed(t, c, config, first)
	pod := cachePods(t, key)[0]
	app, err := connectOverTLS(t, pod.Status.PodIP, cachev2.AppUser, string(appSecret(t, ns, "issued-auth").Data[resources.AppPasswordKey]), config)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Do(ctx, app.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatalf("SET over TLS: %v", err)
	}

	// The issuer renews the certificate.
	before := restarts(t, key)
	withoutCert := maps.Clone(issued.TLS)
	withoutCert[resources.TLSCertKey] = nil
	renewed := issueAsUsers(t, c, resources.Certificates{TLS: withoutCert, CA: issued.CA})
	secret = appSecret(t, ns, "issued-by-mine")
	secret.Data = renewed.TLS
	if err := admin.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	second := serialIn(t, secret)
	waitCertificateServed(t, c, config, second)
	if after := restarts(t, key); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the pod restarted with the renewed certificate: before %v, after %v", before, after)
	}

	// A certificate for another Cache's names is refused, and the node keeps the one it serves.
	other := c.DeepCopy()
	other.Name = "not-issued"
	wrong := issueAsUsers(t, other, renewed)
	secret = appSecret(t, ns, "issued-by-mine")
	secret.Data = wrong.TLS
	if err := admin.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitCertificateInvalid(t, key, "not-issued")
	cert, err := valkey.ServedCertificate(ctx, pod.Status.PodIP, resources.Port, config)
	if err != nil || cert.SerialNumber.String() != second {
		t.Errorf("with a certificate it cannot serve in the Secret, the node serves %v (%v), want the one before, %s", cert.SerialNumber, err, second)
	}
	if err := app.Do(ctx, app.B().Get().Key("k").Build()).Error(); err != nil {
		t.Errorf("GET over TLS: %v", err)
	}
}
