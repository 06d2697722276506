//go:build integration

package podrunner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// These tests run the operator's pod template on real valkey-server processes, without a
// cluster: the command line, the memory settings and the readiness probe as a real container
// runtime would meet them.

// cachePod is the pod that the operator's StatefulSet for a Cache of the given mode and 64Mi of
// memory makes, started on a loopback IP of the test's own.
func cachePod(mode cachev2.Mode) *corev1.Pod {
	cache := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: "default"},
		Spec:       cachev2.CacheSpec{Mode: mode, Shards: 1, Version: "8.1.1", Memory: resource.MustParse("64Mi")},
	}
	template := resources.StatefulSet(cache, resources.DefaultImages).Spec.Template
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-cache-0", Namespace: "default", UID: "uid-0", Labels: template.Labels},
		Spec:       template.Spec,
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: testenv.LoopbackIPs(1)[0]},
	}
}

// serverContainer prepares the pod's sandbox as the runner would, and returns its server's
// container.
func serverContainer(t *testing.T, r *Runner, pod *corev1.Pod) *container {
	t.Helper()
	c := r.newSandbox(pod, nil).serverContainer()
	if c.refusal != "" {
		t.Fatal(c.refusal)
	}
	return c
}

// startServer starts the pod's server container as the runner would and stops it when the test
// ends.
func startServer(t *testing.T, pod *corev1.Pod) (*container, *process) {
	t.Helper()
	r := &Runner{BinDir: testenv.BinDir(), Workdir: t.TempDir(), Log: testr.New(t)}
	c := serverContainer(t, r, pod)
	p, err := c.launch(&r.work)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill(); <-p.exited })
	return c, p
}

func TestCachePodServesWithItsMemorySettingsAndPassesItsProbe(t *testing.T) {
	pod := cachePod(cachev2.ModeStandalone)
	s, p := startServer(t, pod)
	r := &Runner{BinDir: testenv.BinDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.waitAccepting(ctx, p)
	if ok, err := r.probe(ctx, s, pod.Spec.Containers[0].ReadinessProbe); !ok {
		t.Fatalf("the pod's readiness probe fails against its running server: %v", err)
	}

	client := testenv.Valkey(t, s.ip, int(s.port))
	if got, want := testenv.ValkeyConfig(t, client, "maxmemory"), strconv.FormatInt(48<<20, 10); got != want {
		t.Errorf("maxmemory is %s, want %s (3/4 of 64Mi)", got, want)
	}
	if got := testenv.ValkeyConfig(t, client, "maxmemory-policy"); got != resources.EvictionPolicy {
		t.Errorf("maxmemory-policy is %s, want %s", got, resources.EvictionPolicy)
	}
	if err := client.Do(ctx, client.B().Set().Key("greeting").Value("hello").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := client.Do(ctx, client.B().Get().Key("greeting").Build()).ToString(); err != nil || got != "hello" {
		t.Errorf("GET greeting = %q, %v; want hello", got, err)
	}
}

// A cache must evict rather than refuse writes: writing half as much again as maxmemory holds
// evicts keys, and every write succeeds.
func TestCachePodEvictsInsteadOfRefusingWrites(t *testing.T) {
	s, p := startServer(t, cachePod(cachev2.ModeStandalone))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.waitAccepting(ctx, p)
	client := testenv.Valkey(t, s.ip, int(s.port))

	value := strings.Repeat("x", 64<<10)
	const writes = 48 << 20 / (64 << 10) * 3 / 2
	for i := range writes {
		if err := client.Do(ctx, client.B().Set().Key(fmt.Sprintf("key-%d", i)).Value(value).Build()).Error(); err != nil {
			t.Fatalf("write %d of %d was refused: %v", i, writes, err)
		}
	}
	if evicted, _ := strconv.Atoi(testenv.ValkeyInfo(t, client, "stats", "evicted_keys")); evicted == 0 {
		t.Errorf("writing %d MiB into a cache of 48 MiB evicted no key", writes*64>>10)
	}
}

// A command line that a real server rejects must fail the pod, not pass unnoticed.
func TestServerRejectsABadCommandLine(t *testing.T) {
	pod := cachePod(cachev2.ModeStandalone)
	c := &pod.Spec.Containers[0]
	c.Args = append(c.Args, "--maxmemory-policy", "allkeys-lur")
	_, p := startServer(t, pod)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("valkey-server runs with maxmemory-policy allkeys-lur")
	}
	if code := exitCode(p.exitErr); code == 0 {
		t.Errorf("valkey-server exited with status 0 on a bad argument")
	}
}

// A Cluster node's container that restarts in place, in the same pod directory as the kubelet
// keeps an emptyDir, comes back as a new node that serves no slot, rather than as the crashed
// node with its slots and none of their keys; and it starts fenced, refusing a replica's
// resynchronisation.
func TestClusterNodeRestartedInPlaceIsANewFencedNode(t *testing.T) {
	pod := cachePod(cachev2.ModeCluster)
	r := &Runner{BinDir: testenv.BinDir(), Workdir: t.TempDir(), Log: testr.New(t)}
	s := serverContainer(t, r, pod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// run starts a run of the container and returns its node, with a connection to it.
	run := func() (self valkey.ClusterNode, admin *valkey.Server) {
		t.Helper()
		p, err := s.launch(&r.work)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.kill(); <-p.exited })
		s.waitAccepting(ctx, p)
		admin, err = valkey.Connect(s.ip, int(s.port), valkey.Auth{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(admin.Close)
		if fenced, err := admin.Fenced(ctx); err != nil || !fenced {
			t.Errorf("a node that has just started serves replicas (fenced %v, %v)", fenced, err)
		}
		nodes, err := admin.ClusterNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		self, _ = valkey.Myself(nodes)
		return self, admin
	}

	first, admin := run()
	if err := admin.AddSlots(ctx, []valkey.SlotRange{{Start: 0, End: valkey.SlotCount - 1}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Unfence(ctx); err != nil {
		t.Fatal(err)
	}
	if fenced, err := admin.Fenced(ctx); err != nil || fenced {
		t.Errorf("Unfence left the node fenced (%v)", err)
	}
	s.proc.kill()
	<-s.proc.exited

	second, _ := run()
	if second.ID == first.ID {
		t.Errorf("the container restarted in place came back as node %s, the crashed node", first.ID)
	}
	if second.SlotsServed() != 0 {
		t.Errorf("the restarted node serves %d slots with none of their keys", second.SlotsServed())
	}
}

// A Cache pod with TLS runs on the files of its Secret volume: its server serves the Secret's
// certificate over TLS, its readiness probe passes through the server's socket, and when the
// Secret changes, the files change in place (the kubelet's atomic writer), so that the server,
// told to read them again, serves the renewed certificate without a restart.
func TestTLSCachePodServesItsSecretVolumeAndItsUpdates(t *testing.T) {
	pod := cachePod(cachev2.ModeStandalone)
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: "default"},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: "8.1.1", Memory: resource.MustParse("64Mi"), TLS: &cachev2.TLS{}}}
	pod.Spec = resources.StatefulSet(cache, resources.DefaultImages).Spec.Template.Spec
	data, _, err := resources.NextCertificates(cache, "cluster.local", nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := func(data map[string][]byte) map[string]string {
		out := map[string]string{}
		for k, v := range data {
			out[k] = string(v)
		}
		return out
	}
	r := &Runner{BinDir: testenv.BinDir(), Workdir: t.TempDir(), Log: testr.New(t)}
	if c := r.newSandbox(pod, nil).serverContainer(); !strings.Contains(c.configError, `secret "orders-cache-tls" not found`) {
		t.Errorf("without its Secret the container is %q %q, want it waiting for the Secret", c.configError, c.refusal)
	}
	b := r.newSandbox(pod, envSources{"Secret/orders-cache-tls": secret(data)})
	s := b.serverContainer()
	if s.refusal != "" || s.configError != "" {
		t.Fatal(s.refusal, s.configError)
	}
	p, err := s.launch(&r.work)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill(); <-p.exited })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.waitAccepting(ctx, p)
	if ok, err := r.probe(ctx, s, pod.Spec.Containers[0].ReadinessProbe); !ok {
		t.Fatalf("the readiness probe fails: %v", err)
	}
	config, err := resources.TLSClientConfig(cache, data[resources.TLSCAKey])
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		cert, err := valkey.ServedCertificate(ctx, s.ip, int(s.port), config)
		if err != nil {
			t.Fatal(err)
		}
		return cert.SerialNumber.String()
	}
	first := serial()

	delete(data, resources.TLSCertKey)
	renewed, _, err := resources.NextCertificates(cache, "cluster.local", nil, data, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.secrets[0].write(secret(renewed), true); err != nil {
		t.Fatal(err)
	}
	admin, err := valkey.Connect(s.ip, int(s.port), valkey.Auth{TLS: config})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.ReloadCertificates(ctx); err != nil {
		t.Fatal(err)
	}
	cert, err := resources.LeafCertificate(renewed)
	if err != nil {
		t.Fatal(err)
	}
	if got := serial(); got == first || got != cert.SerialNumber.String() {
		t.Errorf("after the Secret's update the server serves serial %s, want the renewed %s (first %s)", got, cert.SerialNumber, first)
	}
	if !p.running() {
		t.Error("the server stopped")
	}
}
