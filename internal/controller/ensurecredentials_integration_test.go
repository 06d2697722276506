//go:build integration

package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A ready node that holds another application password than the ACL Secret, though the Secret
// says its passwords were applied (a pod whose container loaded the file just before the
// Secret's last write, from a kubelet's copy not yet updated, and was not running to be given
// them), is given the current one by the next pass. On a real server.
func TestANodeThatLoadedAnEarlierPasswordIsGivenTheCurrentOne(t *testing.T) {
	ctx := context.Background()
	namespace := newNamespace(t)
	cache := newCacheWith(t, namespace, func(spec *cachev2.CacheSpec) { spec.Shards = 1; spec.Auth = &cachev2.Auth{} })
	r := newReconciler(k8s, nil)
	// The first pass makes the application's Secret and the ACL Secret, with no pod yet.
	if _, err := r.ensureCredentials(ctx, cache, nil); err != nil {
		t.Fatal(err)
	}
	stored := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: resources.ACLSecretName(cache)}, stored); err != nil {
		t.Fatal(err)
	}
	acl := resources.ReadACL(stored)
	if acl.Applied != acl.Digest(cache) {
		t.Fatalf("the ACL Secret made before any pod does not count as applied")
	}

	// The pod's server, started from the ACL file, then holding an earlier application password.
	ip := testenv.LoopbackIPs(3)[2]
	file := filepath.Join(t.TempDir(), resources.ACLFileKey)
	if err := os.WriteFile(file, stored.Data[resources.ACLFileKey], 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.StartValkey(t, ip, resources.Port, "--aclfile", file)
	server, err := valkey.Connect(ip, resources.Port, operatorAuth(cache, acl, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	earlier := sha256.Sum256([]byte("an-earlier-password-of-the-app"))
	if err := server.SetUsers(ctx, map[string]valkey.User{cachev2.AppUser: {Hashes: []string{hex.EncodeToString(earlier[:])}}}); err != nil {
		t.Fatal(err)
	}
	readyPod(t, cache, ip)

	if _, err := r.ensureCredentials(ctx, cache, nil); err != nil {
		t.Fatal(err)
	}
	appSecret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cache.AuthSecretName()}, appSecret); err != nil {
		t.Fatal(err)
	}
	password, err := resources.AppPassword(appSecret)
	if err != nil {
		t.Fatal(err)
	}
	app, err := valkeygo.NewClient(valkeygo.ClientOption{InitAddress: []string{net.JoinHostPort(ip, strconv.Itoa(resources.Port))},
		Username: cachev2.AppUser, Password: password, ForceSingleClient: true, DisableCache: true})
	if err == nil {
		defer app.Close()
		err = app.Do(ctx, app.B().Ping().Build()).Error()
	}
	if err != nil {
		t.Errorf("the application's current password, after a pass: %v", err)
	}
}

// readyPod makes a pod of the Cache, running and ready at ip, as a kubelet would report it.
func readyPod(t *testing.T, cache *cachev2.Cache, ip string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cache.Name + "-0", Namespace: cache.Namespace, Labels: resources.SelectorLabels(cache)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: resources.ContainerName, Image: "valkey"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := k8s.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}
