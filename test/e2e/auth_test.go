//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/testenv"
)

// connectAs connects to one server as the user given (none: no credentials), and says why it
// cannot: a connection refused at its handshake.
func connectAs(t *testing.T, ip, user, password string) (valkeygo.Client, error) {
	t.Helper()
	return connectOverTLS(t, ip, user, password, nil)
}

// connectOverTLS is connectAs speaking TLS as config says (nil: plain text).
func connectOverTLS(t *testing.T, ip, user, password string, config *tls.Config) (valkeygo.Client, error) {
	t.Helper()
	c, err := valkeygo.NewClient(valkeygo.ClientOption{
		InitAddress: []string{net.JoinHostPort(ip, fmt.Sprint(resources.Port))}, Username: user, Password: password,
		TLSConfig:         config,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true,
		Dialer: net.Dialer{Timeout: 5 * time.Second}, ConnWriteTimeout: 5 * time.Second,
	})
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

// refused reports whether a GET as the user given is refused on the pod's server, and what the
// server said.
func refused(t *testing.T, pod *corev1.Pod, user, password string) (bool, string) {
	t.Helper()
	c, err := connectAs(t, pod.Status.PodIP, user, password)
	if err == nil {
		err = c.Do(context.Background(), c.B().Get().Key("k").Build()).Error()
		if valkeygo.IsValkeyNil(err) {
			err = nil
		}
	}
	if err == nil {
		return false, "served"
	}
	s := err.Error()
	return strings.Contains(s, "NOAUTH") || strings.Contains(s, "WRONGPASS"), s
}

// appSecret reads the Cache's application credentials.
func appSecret(t *testing.T, namespace, name string) *corev1.Secret {
	t.Helper()
	secret := &corev1.Secret{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		t.Fatal(err)
	}
	return secret
}

// waitCredentials waits until the Cache's CredentialsCurrent condition has the reason given.
func waitCredentials(t *testing.T, key client.ObjectKey, reason string) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("%s CredentialsCurrent %s", key, reason), func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionCredentialsCurrent)
		if cond == nil {
			return false, "no CredentialsCurrent condition"
		}
		return cond.Reason == reason, cond.Reason + ": " + cond.Message
	})
}

// evict asks the API server to evict the pod, as a node drain does.
func evict(pod *corev1.Pod) error {
	return admin.SubResource("eviction").Create(context.Background(), pod,
		&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})
}

// waitOneDisruptionAllowed waits until the Cache's PodDisruptionBudget allows a disruption, as
// the disruption controller counts them for the Cache's pods as they are: every pod ready.
func waitOneDisruptionAllowed(t *testing.T, key client.ObjectKey) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("%s's PodDisruptionBudget to allow a disruption", key), func() (bool, string) {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := admin.Get(context.Background(), key, pdb); err != nil {
			return false, err.Error()
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == 1, fmt.Sprintf("%+v", pdb.Status)
	})
}

// TestAClusterWithAuthRefusesStrangersAndRotatesItsPassword: a Cluster with auth forms, its
// replicas sync as the replication user and its probes pass, while a client without credentials,
// or with a wrong password, is refused on every node and the application user may not run an
// administrative command. A new password in the Secret works on every node at once, the old one
// for the grace period only; a session authenticated with the old one stays up throughout, and
// a client that moves to the new one when the Cache says so has no request refused. A
// primary's pod evicted after the rotation, as a node drain does, hands its shard over as the
// node user, and its replacement loads the users as they are now; meanwhile the Cache's
// PodDisruptionBudget refuses to evict another of its pods, until every one is back and in sync.
func TestAClusterWithAuthRefusesStrangersAndRotatesItsPassword(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	replicas := int32(1)
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "secure", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3, ReplicasPerShard: &replicas,
			Version: valkeyVersion, Memory: resource.MustParse("64Mi"),
			Auth: &cachev2.Auth{RotationGracePeriod: &metav1.Duration{Duration: 20 * time.Second}}},
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(c)
	c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	waitCredentials(t, key, cachev2.ReasonCredentialsApplied)

	secret := appSecret(t, ns, "secure-auth")
	if user := string(secret.Data[resources.AppUsernameKey]); user != cachev2.AppUser {
		t.Fatalf("the Secret names user %q, want %q", user, cachev2.AppUser)
	}
	oldPassword := string(secret.Data[resources.AppPasswordKey])
	pods := cachePods(t, key)
	for _, pod := range pods {
		for _, who := range []struct{ user, password string }{{"", ""}, {cachev2.AppUser, "not-the-password"}, {resources.OperatorUser, oldPassword}} {
			if ok, said := refused(t, &pod, who.user, who.password); !ok {
				t.Errorf("%s served %q with password %q: %s", pod.Name, who.user, who.password, said)
			}
		}
	}
	app := appClusterClient(t, key, oldPassword)
	for i := range 100 {
		if err := app.Do(context.Background(), app.B().Set().Key(fmt.Sprint("key-", i)).Value("v").Build()).Error(); err != nil {
			t.Fatalf("SET as the application user: %v", err)
		}
	}
	if err := app.Do(context.Background(), app.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build()).Error(); err == nil ||
		!strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("CONFIG SET as the application user: %v, want NOPERM", err)
	}
	session, err := connectAs(t, pods[0].Status.PodIP, cachev2.AppUser, oldPassword)
	if err != nil {
		t.Fatal(err)
	}
	// A client that, as the steps below say, takes the new password once the Cache reports it
	// valid on every node.
	var password atomic.Pointer[string]
	password.Store(&oldPassword)
	load, stopLoad := startLoad(t, clusterClientWithPassword(t, key, cachev2.AppUser, password.Load))

	newPassword := "rotated-" + oldPassword
	secret.Data[resources.AppPasswordKey] = []byte(newPassword)
	if err := admin.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	waitCredentials(t, key, cachev2.ReasonPreviousPasswordValid)
	password.Store(&newPassword)
	for _, pod := range pods {
		for _, password := range []string{newPassword, oldPassword} {
			if ok, said := refused(t, &pod, cachev2.AppUser, password); ok {
				t.Errorf("%s refused a password in force during the grace period: %s", pod.Name, said)
			}
		}
	}
	waitCredentials(t, key, cachev2.ReasonCredentialsApplied)
	for _, pod := range pods {
		if ok, said := refused(t, &pod, cachev2.AppUser, oldPassword); !ok {
			t.Errorf("%s took the previous password after the grace period: %s", pod.Name, said)
		}
		if ok, said := refused(t, &pod, cachev2.AppUser, newPassword); ok {
			t.Errorf("%s refused the new password: %s", pod.Name, said)
		}
	}
	if err := session.Do(context.Background(), session.B().Ping().Build()).Error(); err != nil {
		t.Errorf("the session authenticated with the previous password was dropped: %v", err)
	}
	lost, acked := stopLoad()
	t.Logf("rotation applied %s after the Secret changed; a client through it: %d requests, %d failed (%s), %d of %d acknowledged writes lost",
		time.Since(rotated).Round(time.Second), load.requests, load.failures, load.errorKinds(), lost, acked)
	if refused := load.refused(); refused > 0 || lost > 0 {
		t.Errorf("a client through the rotation saw %d requests refused and %d acknowledged writes lost", refused, lost)
	}

	primaryPod, primary := podOfRole(t, c, cachev2.RolePrimary)
	replicaPod := replicaOf(t, c, primaryPod.Name)
	waitOneDisruptionAllowed(t, key)
	if err := evict(primaryPod); err != nil {
		t.Fatal(err)
	}
	for _, pod := range cachePods(t, key) {
		if pod.Name != primaryPod.Name && pod.Name != replicaPod.Name {
			if err := evict(&pod); !apierrors.IsTooManyRequests(err) {
				t.Errorf("evicting %s while %s is away: %v, want it refused by the Cache's PodDisruptionBudget", pod.Name, primaryPod.Name, err)
			}
			break
		}
	}
	operator := func() valkeygo.Client {
		acl := appSecret(t, ns, resources.ACLSecretName(c))
		v, err := connectAs(t, replicaPod.Status.PodIP, resources.OperatorUser, string(acl.Data[resources.OperatorUser]))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}()
	testenv.WaitFor(t, time.Minute, "the deleted primary's replica took over by a handover", func() (bool, string) {
		info, err := operator.Do(context.Background(), operator.B().ClusterInfo().Build()).ToString()
		if err != nil {
			return false, err.Error()
		}
		sent := clusterInfoField(info, "cluster_stats_messages_mfstart_sent")
		return sent > 0, fmt.Sprintf("MFSTART sent %d times", sent)
	})
	waitReadyWithNewNodes(t, key, 6, map[string]bool{primary.ID: true})
	waitOneDisruptionAllowed(t, key)
	for _, pod := range cachePods(t, key) {
		if pod.Name != primaryPod.Name {
			continue
		}
		if ok, said := refused(t, &pod, cachev2.AppUser, oldPassword); !ok {
			t.Errorf("the replacement %s took the previous password: %s", pod.Name, said)
		}
	}
	app = appClusterClient(t, key, newPassword)
	for i := range 100 {
		if got, err := app.Do(context.Background(), app.B().Get().Key(fmt.Sprint("key-", i)).Build()).ToString(); err != nil || got != "v" {
			t.Fatalf("GET key-%d with the new password: %q, %v", i, got, err)
		}
	}
}

// TestAStandaloneCacheWaitsForTheSecretItNames: a Cache with auth whose spec names a Secret makes
// no pod while the Secret is missing or unlabelled, and says so; once it is usable, its node
// takes the password in it, and a new password there replaces it on the running node.
func TestAStandaloneCacheWaitsForTheSecretItNames(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "")
	ns := newNamespace(t)
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "named", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: valkeyVersion, Memory: resource.MustParse("64Mi"),
			Auth: &cachev2.Auth{SecretName: "app-credentials", RotationGracePeriod: &metav1.Duration{}}},
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(c)
	waitCredentials(t, key, cachev2.ReasonCredentialsInvalid)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "app-credentials", Namespace: ns},
		StringData: map[string]string{resources.AppPasswordKey: "a-password-of-the-users-own"},
	}
	if err := admin.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the Cache to say the Secret lacks its label", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionCredentialsCurrent)
		return cond != nil && strings.Contains(cond.Message, cachev2.LabelCredentialsOf), fmt.Sprint(cond)
	})
	if n := len(cachePods(t, key)); n != 0 {
		t.Fatalf("%d pods made before the credentials were usable", n)
	}
	secret.Labels = map[string]string{cachev2.LabelCredentialsOf: "named"}
	if err := admin.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	waitCredentials(t, key, cachev2.ReasonCredentialsApplied)
	pod := cachePods(t, key)[0]
	if ok, said := refused(t, &pod, cachev2.AppUser, "a-password-of-the-users-own"); ok {
		t.Fatalf("the node refused the Secret's password: %s", said)
	}
	if ok, said := refused(t, &pod, "", ""); !ok {
		t.Errorf("the node served a client without credentials: %s", said)
	}

	secret.StringData = map[string]string{resources.AppPasswordKey: "the-users-next-password"}
	if err := admin.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the node to take the new password only", func() (bool, string) {
		oldRefused, said := refused(t, &pod, cachev2.AppUser, "a-password-of-the-users-own")
		newRefused, saidNew := refused(t, &pod, cachev2.AppUser, "the-users-next-password")
		return oldRefused && !newRefused, "old: " + said + "; new: " + saidNew
	})
	waitCredentials(t, key, cachev2.ReasonCredentialsApplied)
}

// clusterClientWithPassword is a cluster client of the Cache as the user, with the password
// that password returns whenever it opens a connection.
func clusterClientWithPassword(t *testing.T, key client.ObjectKey, user string, password func() *string) valkeygo.Client {
	t.Helper()
	pods := cachePods(t, key)
	c, err := valkeygo.NewClient(valkeygo.ClientOption{
		InitAddress: []string{net.JoinHostPort(pods[len(pods)-1].Status.PodIP, fmt.Sprint(resources.Port))},
		AuthCredentialsFn: func(valkeygo.AuthCredentialsContext) (valkeygo.AuthCredentials, error) {
			return valkeygo.AuthCredentials{Username: user, Password: *password()}, nil
		},
		DisableCache: true, Dialer: net.Dialer{Timeout: 5 * time.Second}, ConnWriteTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// appClusterClient is clusterClient authenticating as the application user.
func appClusterClient(t *testing.T, key client.ObjectKey, password string) valkeygo.Client {
	t.Helper()
	return clusterClientWithPassword(t, key, cachev2.AppUser, func() *string { return &password })
}
