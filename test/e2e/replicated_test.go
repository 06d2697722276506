//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// newReplicatedCache creates a Replicated Cache of one primary and the replicas given, on the
// newest release, with what more edit sets (nil: nothing).
func newReplicatedCache(t *testing.T, namespace, name string, replicas int32, edit func(*cachev2.CacheSpec)) client.ObjectKey {
	t.Helper()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeReplicated, Shards: 1, ReplicasPerShard: &replicas,
			Version: valkeyVersion, Memory: resource.MustParse("64Mi")},
	}
	if edit != nil {
		edit(&c.Spec)
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(c)
}

// access is how the tests reach a Cache's servers as its application does: without credentials,
// or with the application user's and the Cache's CA.
type access struct {
	password string
	tls      *tls.Config
}

// accessTo is the application's access to the Cache, once its Secrets are made.
func accessTo(t *testing.T, key client.ObjectKey) access {
	t.Helper()
	c, err := getCache(t, key)
	if err != nil {
		t.Fatal(err)
	}
	var a access
	if c.Spec.Auth != nil {
		a.password = string(appSecret(t, key.Namespace, c.AuthSecretName()).Data[resources.AppPasswordKey])
	}
	if c.Spec.TLS != nil {
		a.tls = publishedCA(t, c)
	}
	return a
}

// client connects to the pod's server as the application.
func (a access) client(t *testing.T, pod *corev1.Pod) valkeygo.Client {
	t.Helper()
	if a == (access{}) {
		return node(t, pod)
	}
	user := ""
	if a.password != "" {
		user = cachev2.AppUser
	}
	c, err := connectOverTLS(t, pod.Status.PodIP, user, a.password, a.tls)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitPrimaryServed waits until the Cache is ReplicationReady with a primary other than not, the
// primary's pod alone carries the primary's label, the Service <name>-primary sends clients to it
// alone, and <name>-replicas to every other pod; it returns the primary's pod.
func waitPrimaryServed(t *testing.T, key client.ObjectKey, not string) *corev1.Pod {
	t.Helper()
	var primary *corev1.Pod
	testenv.WaitFor(t, 3*time.Minute, "a primary behind its Service, every replica in sync", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		if ok, why := settled(c); !ok || ready.Reason != cachev2.ReasonReplicationReady || c.Status.Primary == not {
			return false, fmt.Sprintf("primary %q; %s", c.Status.Primary, why)
		}
		for _, pod := range cachePods(t, key) {
			labelled := pod.Labels[resources.LabelRole] == "primary"
			if labelled != (pod.Name == c.Status.Primary) {
				return false, fmt.Sprintf("%s labelled %q with %s the primary", pod.Name, pod.Labels[resources.LabelRole], c.Status.Primary)
			}
			if labelled {
				primary = &pod
			}
		}
		named := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
		served := endpointsOf(t, key.Namespace, resources.PrimaryServiceName(named))
		if primary == nil || len(served) != 1 || served[0] != primary.Status.PodIP {
			return false, fmt.Sprintf("the primary's Service sends clients to %v", served)
		}
		replicas := endpointsOf(t, key.Namespace, resources.ReplicasServiceName(named))
		if len(replicas) != len(c.Status.Nodes)-1 || slices.Contains(replicas, primary.Status.PodIP) {
			return false, fmt.Sprintf("the replicas' Service sends clients to %v", replicas)
		}
		return true, ""
	})
	return primary
}

// endpointsOf are the ready addresses behind the Service.
func endpointsOf(t *testing.T, namespace, service string) []string {
	t.Helper()
	var slices discoveryv1.EndpointSliceList
	if err := admin.List(context.Background(), &slices, client.InNamespace(namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
		t.Fatal(err)
	}
	var addresses []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				addresses = append(addresses, e.Addresses...)
			}
		}
	}
	return addresses
}

// A Replicated Cache forms: one primary, behind its Service; every replica in sync and refusing
// writes. Its primary's server killed (restarted in place, empty), the replica furthest into its
// writes takes over, the Service follows, and an application that writes through the Service by
// its DNS name, from a pod, keeps every write that a replica acknowledged (WAIT 1); the restarted
// server comes back as a replica of the new primary. Then the new primary's pod is deleted: it
// hands over first, and the same holds. Then the operator is SIGKILLed and the primary's server
// killed while none runs: the next operator fails it over, and the same holds.
func TestAReplicatedCacheFailsOverWhenItsPrimaryIsLost(t *testing.T) {
	runBeside(t, 1)
	first := startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newReplicatedCache(t, ns, "sessions", 2, nil)
	primary := waitPrimaryServed(t, key, "")
	c, err := getCache(t, key)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Shards != 1 || c.Status.ReadyShards != 1 || len(c.Status.Nodes) != 3 {
		t.Errorf("status: %d shards, %d ready, %d nodes; want 1, 1, 3", c.Status.Shards, c.Status.ReadyShards, len(c.Status.Nodes))
	}
	for _, n := range c.Status.Nodes {
		if want := (cachev2.ClusterNode{Pod: n.Pod, Role: cachev2.RoleReplica, PrimaryPod: primary.Name}); n.Pod != primary.Name && n != want {
			t.Errorf("status of %s: %+v, want a replica of %s", n.Pod, n, primary.Name)
		}
	}
	for _, pod := range cachePods(t, key) {
		if pod.Name == primary.Name {
			continue
		}
		// A replica refuses writes.
		v := node(t, &pod)
		if err := v.Do(context.Background(), v.B().Set().Key("x").Value("1").Build()).Error(); err == nil || !strings.Contains(err.Error(), "READONLY") {
			t.Errorf("SET on the replica %s: %v, want READONLY", pod.Name, err)
		}
	}

	// The primary's server killed, restarted in place, empty.
	second := failOver(t, key, access{}, primary, "the primary's server killed", func() {
		if err := crashServer(ns, primary.Name); err != nil {
			t.Fatal(err)
		}
	})
	waitEvents(t, key, cachev2.ReasonPrimaryLost+"/Failover")
	// The operator counts the failover and names the new primary.
	testenv.WaitFor(t, time.Minute, "the failover in the operator's metrics", func() (bool, string) {
		families := first.Metrics(t)
		failovers := testenv.Sum(families, "cache_operator_failovers_total", map[string]string{"namespace": ns, "name": key.Name})
		primary := testenv.Sum(families, "cache_operator_cache_primary", map[string]string{"namespace": ns, "name": key.Name, "pod": second.Name})
		return failovers == 1 && primary == 1, fmt.Sprintf("%v failovers, %s primary %v", failovers, second.Name, primary)
	})
	// Its pod deleted: it hands over to a replica in sync in its preStop hook (FAILOVER).
	third := failOver(t, key, access{}, second, "the primary's pod deleted", func() {
		if err := admin.Delete(context.Background(), second); err != nil {
			t.Fatal(err)
		}
	})
	// The operator SIGKILLed, and the primary's server killed while none runs: the next operator
	// finds the servers as they are, with no memory of the last.
	failOver(t, key, access{}, third, "the operator killed before the failover", func() {
		first.Stop(t, syscall.SIGKILL)
		if err := crashServer(ns, third.Name); err != nil {
			t.Fatal(err)
		}
		startOperator(t, "b", "", clusterCheckInterval)
	})
}

// A Replicated Cache with auth and TLS: its servers refuse a client without the password, serve
// the application over TLS by the name of the primary's Service, and replicate over TLS as the
// replication user. Its primary's pod deleted, the preStop hook, as the node user through the
// server's socket, hands over to the replica, and an application that writes through the Service
// over TLS with the password keeps every write the replica acknowledged.
func TestAReplicatedCacheWithAuthAndTLSFailsOverBehindItsService(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newReplicatedCache(t, ns, "secure", 1, func(s *cachev2.CacheSpec) { s.Auth, s.TLS = &cachev2.Auth{}, &cachev2.TLS{} })
	primary := waitPrimaryServed(t, key, "")
	app := accessTo(t, key)
	stranger, err := connectOverTLS(t, primary.Status.PodIP, "", "", app.tls)
	if err == nil {
		err = stranger.Do(context.Background(), stranger.B().Get().Key("greeting").Build()).Error()
	}
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("GET over TLS without a password: %v, want NOAUTH", err)
	}
	byService := app.tls.Clone()
	byService.ServerName = resources.PrimaryServiceName(&cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}) + "." + ns + ".svc"
	v, err := connectOverTLS(t, primary.Status.PodIP, cachev2.AppUser, app.password, byService)
	if err == nil {
		err = v.Do(context.Background(), v.B().Set().Key("greeting").Value("hello").Build()).Error()
	}
	if err != nil {
		t.Errorf("SET over TLS, the server checked by the name %s: %v", byService.ServerName, err)
	}
	failOver(t, key, app, primary, "the primary's pod deleted, with auth and TLS", func() {
		if err := admin.Delete(context.Background(), primary); err != nil {
			t.Fatal(err)
		}
	})
}

// A Replicated Cache upgraded across releases (8.1 to 9.1) restarts each pod once, its replica
// first and its primary last, which hands over to the updated replica in its preStop hook: an
// application writing through the primary's Service keeps every write a replica acknowledged,
// and every server then runs the new release. A change back to the older release, which cannot
// read the newer one's data, waits, Ready False with the reason, and restarts no pod until the
// version is set back. Its replica removed then (replicasPerShard 0), the primary, on the pod
// that goes, hands over to the one that stays first, which counts as no failover, and the
// application keeps writing.
func TestAReplicatedCacheUpgradesItsPrimaryLastAndScalesInOffIt(t *testing.T) {
	runBeside(t, 1)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	older := valkeys[len(valkeys)-2].Version
	key := newReplicatedCache(t, ns, "jobs", 1, func(s *cachev2.CacheSpec) { s.Version = older })
	primary := waitPrimaryServed(t, key, "")
	old := podUIDs(t, key)
	writer := startServiceWriter(t, key)
	writer.waitAcked(t, 20)
	began := time.Now()
	patchCache(t, key, fmt.Sprintf(`{"spec":{"version":%q}}`, valkeyVersion))
	waitPodsReplaced(t, key, old, 2)
	next := waitPrimaryServed(t, key, "")
	took := time.Since(began)
	writer.waitAcked(t, writer.acked(t)+20)
	report := writer.stop(t)
	t.Logf("upgrade %s → %s: %s; every pod replaced and the Cache ready after %s", older, valkeyVersion, report, took.Round(10*time.Millisecond))
	assertKeysOn(t, node(t, next), next.Name, report.ackedKeys)
	// The primary's pod restarted last: no pod was made after it.
	pods := cachePods(t, key)
	last := pods[slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == primary.Name })]
	for _, pod := range pods {
		if pod.CreationTimestamp.After(last.CreationTimestamp.Time) {
			t.Errorf("%s, the primary before the upgrade, restarted at %s, before %s at %s", last.Name, last.CreationTimestamp, pod.Name, pod.CreationTimestamp)
		}
	}
	for pod, version := range serverVersions(t, key) {
		if version != valkeyVersion {
			t.Errorf("after the upgrade, %s runs Valkey %s", pod, version)
		}
	}

	// Back to the older release: held, with a replica that would otherwise restart first, and no
	// pod restarted until the version is set back.
	if valkey.RDBFormat(older) < valkey.RDBFormat(valkeyVersion) {
		upgraded := podUIDs(t, key)
		patchCache(t, key, fmt.Sprintf(`{"spec":{"version":%q}}`, older))
		waitReadyAs(t, key, metav1.ConditionFalse, cachev2.ReasonDowngradeRefused, time.Minute)
		patchCache(t, key, fmt.Sprintf(`{"spec":{"version":%q}}`, valkeyVersion))
		waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonReplicationReady, time.Minute)
		for _, pod := range cachePods(t, key) {
			if !upgraded[string(pod.UID)] {
				t.Errorf("%s restarted after the change back to %s", pod.Name, older)
			}
		}
	}

	// One replica fewer removes jobs-1. The first primary is whichever server ran first, and the
	// upgrade moved the role to the other: if that is jobs-0, its pod deleted hands it to jobs-1.
	if next.Name != key.Name+"-1" {
		if err := admin.Delete(context.Background(), next); err != nil {
			t.Fatal(err)
		}
		next = waitPrimaryServed(t, key, next.Name)
	}
	writer = startServiceWriter(t, key)
	writer.waitAcked(t, 20)
	failovers := func() float64 {
		return testenv.Sum(operator.Metrics(t), "cache_operator_failovers_total", map[string]string{"namespace": ns, "name": key.Name})
	}
	before := failovers()
	began = time.Now()
	patchCache(t, key, `{"spec":{"replicasPerShard":0}}`)
	stays := waitPrimaryServed(t, key, next.Name)
	testenv.WaitFor(t, 2*time.Minute, "one pod left", func() (bool, string) {
		n := len(cachePods(t, key))
		return n == 1, fmt.Sprintf("%d pods", n)
	})
	took = time.Since(began)
	writer.waitWritten(t, writer.read(t).written()+10)
	report = writer.stop(t)
	t.Logf("one replica fewer, the primary's pod removed: %s; one pod left after %s", report, took.Round(10*time.Millisecond))
	assertKeysOn(t, node(t, stays), stays.Name, report.ackedKeys)
	if n := failovers() - before; n != 0 {
		t.Errorf("%v failovers counted in the scale-in, which only hands over", n)
	}
}

// podUIDs are the UIDs of the Cache's pods, as waitPodsReplaced takes them.
func podUIDs(t *testing.T, key client.ObjectKey) map[string]bool {
	t.Helper()
	uids := map[string]bool{}
	for _, pod := range cachePods(t, key) {
		uids[string(pod.UID)] = true
	}
	return uids
}

// failOver loses the primary by lose while an application writes through the Cache's primary
// Service, and returns the primary that takes over: every write a replica acknowledged is on
// it, as the application reads it with its access, and the lost one comes back as its replica.
func failOver(t *testing.T, key client.ObjectKey, app access, primary *corev1.Pod, what string, lose func()) *corev1.Pod {
	t.Helper()
	writer := startServiceWriter(t, key)
	writer.waitAcked(t, 20)
	began := time.Now()
	lose()
	next := waitPrimaryServed(t, key, primary.Name)
	served := time.Since(began)
	writer.waitAcked(t, writer.acked(t)+20)
	report := writer.stop(t)
	t.Logf("%s: %s; Ready again, the new primary behind the Service and every replica in sync, after %s", what, report, served.Round(10*time.Millisecond))
	assertKeysOn(t, app.client(t, next), next.Name, report.ackedKeys)
	waitReplicaOf(t, key, primary.Name, next.Name)
	return next
}

// assertKeysOn checks that every key is on the server of the pod named, with its number as
// value.
func assertKeysOn(t *testing.T, v valkeygo.Client, pod string, keys []string) {
	t.Helper()
	for _, k := range keys {
		if got, err := v.Do(context.Background(), v.B().Get().Key(k).Build()).ToString(); err != nil || got != strings.TrimPrefix(k, "k") {
			t.Errorf("GET %s on %s = %q, %v: an acknowledged write was lost", k, pod, got, err)
		}
	}
}

// waitReplicaOf waits until the Cache is ready with the pod a replica of the primary's pod.
func waitReplicaOf(t *testing.T, key client.ObjectKey, pod, primary string) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, pod+" a replica of "+primary, func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ok, why := settled(c)
		for _, n := range c.Status.Nodes {
			if n.Pod == pod {
				return ok && n.Role == cachev2.RoleReplica && n.PrimaryPod == primary, fmt.Sprintf("%s: %+v; %s", n.Pod, n, why)
			}
		}
		return false, "not in the status"
	})
}

// serviceWriter is an application in a pod of the cluster: it writes k1, k2, … through the
// Service <cache>-primary, by its DNS name, each on a new connection, and after each asks WAIT 1
// (a replica has it); it prints one line per write. To a Cache with auth it speaks as the
// application user, with the password of the Cache's Secret; to one with TLS, over TLS, trusting
// the CA that the Cache's ConfigMap publishes, as docs/tls.md tells clients to.
type serviceWriter struct {
	namespace, pod string
}

// writerScript prints "<n> <milliseconds since the epoch> <replies>" for write n, the replies
// "OK 1" when a replica acknowledged it.
const writerScript = `i=0
while :; do
  i=$((i+1))
  out=$(printf 'SET k%d %d\nWAIT 1 1000\n' "$i" "$i" | timeout 3 valkey-cli $ACCESS -h "$SERVICE" 2>&1 | tr '\n' ' ')
  echo "$i $(date +%s%3N) $out"
done`

func startServiceWriter(t *testing.T, key client.ObjectKey) *serviceWriter {
	t.Helper()
	c, err := getCache(t, key)
	if err != nil {
		t.Fatal(err)
	}
	env := []corev1.EnvVar{{Name: "SERVICE", Value: resources.PrimaryServiceName(c)}}
	var options []string
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	if c.Spec.Auth != nil {
		options = append(options, "--user", cachev2.AppUser)
		env = append(env, corev1.EnvVar{Name: "REDISCLI_AUTH", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: c.AuthSecretName()}, Key: resources.AppPasswordKey}}})
	}
	if c.Spec.TLS != nil {
		options = append(options, "--tls", "--cacert", "/ca/"+resources.TLSCAKey)
		volumes = []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: c.CAConfigMapName()}}}}}
		mounts = []corev1.VolumeMount{{Name: "ca", MountPath: "/ca", ReadOnly: true}}
	}
	env = append(env, corev1.EnvVar{Name: "ACCESS", Value: strings.Join(options, " ")})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: key.Name + "-writer-", Namespace: key.Namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](999),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name:         "writer",
				Image:        resources.DefaultImages.ValkeyRepository + ":" + valkeyVersion,
				Command:      []string{"sh", "-c", writerScript},
				Env:          env,
				VolumeMounts: mounts,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
				},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
			Volumes: volumes,
		},
	}
	if err := admin.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), pod) })
	return &serviceWriter{namespace: key.Namespace, pod: pod.Name}
}

// writerReport is what the writer's lines say: the writes, those a replica acknowledged, those
// that failed, and the longest time from the end of a write that succeeded to the end of the next
// one that did, with failures between.
type writerReport struct {
	writes, failed int
	longestFailing time.Duration
	ackedKeys      []string
}

func (r writerReport) String() string {
	return fmt.Sprintf("%d writes, %d acknowledged by a replica, %d failed, the longest failing stretch %s",
		r.writes, len(r.ackedKeys), r.failed, r.longestFailing)
}

// read reads the writer's log so far.
func (w *serviceWriter) read(t *testing.T) writerReport {
	t.Helper()
	out, err := cluster.KubectlOutput(context.Background(), "logs", "-n", w.namespace, w.pod)
	if err != nil {
		return writerReport{}
	}
	var r writerReport
	var lastGood int64
	failing := false
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		if _, err := strconv.Atoi(fields[0]); err != nil {
			continue
		}
		at, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		r.writes++
		replies := fields[2:]
		if len(replies) == 0 || replies[0] != "OK" {
			r.failed++
			failing = true
			continue
		}
		if len(replies) == 2 && replies[1] != "0" {
			r.ackedKeys = append(r.ackedKeys, "k"+fields[0])
		}
		if failing && lastGood > 0 {
			r.longestFailing = max(r.longestFailing, time.Duration(at-lastGood)*time.Millisecond)
		}
		lastGood, failing = at, false
	}
	return r
}

func (w *serviceWriter) acked(t *testing.T) int { return len(w.read(t).ackedKeys) }

// written is how many writes succeeded, acknowledged by a replica or not.
func (r writerReport) written() int { return r.writes - r.failed }

// waitWritten waits until n of the writer's writes have succeeded.
func (w *serviceWriter) waitWritten(t *testing.T, n int) {
	t.Helper()
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d writes through the Service", n), func() (bool, string) {
		r := w.read(t)
		return r.written() >= n, r.String()
	})
}

// waitAcked waits until the writer has had n writes acknowledged by a replica.
func (w *serviceWriter) waitAcked(t *testing.T, n int) {
	t.Helper()
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d writes acknowledged through the Service", n), func() (bool, string) {
		r := w.read(t)
		return len(r.ackedKeys) >= n, r.String()
	})
}

// stop stops the writer and returns what it did.
func (w *serviceWriter) stop(t *testing.T) writerReport {
	t.Helper()
	r := w.read(t)
	_ = admin.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: w.pod, Namespace: w.namespace}})
	return r
}

// A Replicated Cache's primary's node drained (`kubectl drain`, as an administrator runs it before
// maintenance): the eviction API lets the primary's pod go within the Cache's budget, its preStop
// hook hands over to the replica in sync, the Service follows, and the pod runs again on another
// node as a replica. An application writing through the Service keeps every write a replica
// acknowledged. It drains a whole node, so it runs on the isolated nodes.
func TestAReplicatedCacheKeepsItsWritesThroughADrainOfItsPrimarysNode(t *testing.T) {
	runOnIsolatedNodes(t)
	startOperator(t, "a", "", clusterCheckInterval)
	key := newReplicatedCache(t, newNamespace(t), "drained", 1, func(s *cachev2.CacheSpec) {
		placed := &cachev2.Cache{Spec: *s}
		onIsolatedNodes(placed)
		*s = placed.Spec
	})
	primary := waitPrimaryServed(t, key, "")
	node := primary.Spec.NodeName
	t.Cleanup(func() { _ = cluster.Kubectl(context.Background(), "uncordon", node) })
	failOver(t, key, access{}, primary, "the primary's node drained", func() {
		// As an administrator runs it: kubectl retries an eviction the budget refuses every 5 s.
		if out, err := cluster.KubectlOutput(context.Background(), "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m"); err != nil {
			t.Fatalf("kubectl drain %s: %v\n%s", node, err, out)
		}
	})
	if _, there := readyPods(t, key, node); there != 0 {
		t.Errorf("%d of the Cache's pods are on the drained node %s", there, node)
	}
}

// The operator SIGKILLed in the middle of a failover: the primary's server is killed, and the
// operator is killed the moment it logs the promotion of a replica, before or after the server
// took it, and before the label moved or as it moves. The next operator, with no memory of the
// last, finds the servers as they are and finishes: one primary, the label on its pod alone, the
// other replicas following it, and an application writing through the Service keeps every write
// a replica acknowledged.
func TestAReplicatedCacheFailsOverThoughItsOperatorIsKilledMidway(t *testing.T) {
	runBeside(t, 1)
	first := startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newReplicatedCache(t, ns, "midway", 2, nil)
	primary := waitPrimaryServed(t, key, "")
	failOver(t, key, access{}, primary, "the operator killed as it promotes a replica", func() {
		const promotion = "REPLICAOF NO ONE"
		before := strings.Count(first.Logs(t), promotion) // the Cache's formation
		if err := crashServer(ns, primary.Name); err != nil {
			t.Fatal(err)
		}
		// Looked for every 20 ms rather than at WaitFor's slowing pace: the label moves half a
		// second after the promotion, and the kill is meant to land before it.
		deadline := time.Now().Add(time.Minute)
		for strings.Count(first.Logs(t), promotion) == before {
			if time.Now().After(deadline) {
				t.Fatal("the operator promoted no replica within a minute of the primary's server killed")
			}
			<-time.After(20 * time.Millisecond)
		}
		first.Stop(t, syscall.SIGKILL)
		var labelled []string
		for _, pod := range cachePods(t, key) {
			if pod.Labels[resources.LabelRole] == "primary" {
				labelled = append(labelled, pod.Name)
			}
		}
		t.Logf("the operator killed with the primary's label on %v (the lost primary: %s)", labelled, primary.Name)
		startOperator(t, "b", "", clusterCheckInterval)
	})
}

// A primary that the operator still reaches but that its replicas cannot (the replication user
// turned off on it, and their connections cut, so that each replica's link drops and cannot come
// back) keeps its role: the operator promotes no replica, since the primary may still take its
// clients' writes, and two primaries would split them; the Cache is not Ready, and the replicas'
// Service is empty. Once the replicas can connect again, they resume
// from the same primary and the Cache is Ready.
func TestAReplicatedPrimaryCutOffFromItsReplicasOnlyKeepsItsRole(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newReplicatedCache(t, ns, "cutoff", 1, func(s *cachev2.CacheSpec) {
		s.Auth = &cachev2.Auth{}
		s.Replication = &cachev2.Replication{FailoverAfter: &metav1.Duration{Duration: time.Second}}
	})
	primary := waitPrimaryServed(t, key, "")
	ctx := context.Background()
	named := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
	password := string(appSecret(t, ns, resources.ACLSecretName(named)).Data[resources.OperatorUser])
	primaryServer, err := connectAs(t, primary.Status.PodIP, resources.OperatorUser, password)
	if err != nil {
		t.Fatal(err)
	}
	cut := func(on bool) {
		t.Helper()
		state := map[bool]string{true: "off", false: "on"}[on]
		if err := primaryServer.Do(ctx, primaryServer.B().AclSetuser().Username(resources.ReplicationUser).Rule(state).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if on {
			if err := primaryServer.Do(ctx, primaryServer.B().ClientKill().TypeReplica().Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cut(true)
	var replica corev1.Pod
	for _, pod := range cachePods(t, key) {
		if pod.Name != primary.Name {
			replica = pod
		}
	}
	replicaServer, err := connectAs(t, replica.Status.PodIP, resources.OperatorUser, password)
	if err != nil {
		t.Fatal(err)
	}
	// Well past the failover timeout for every replica; the Cache says so, and the replica is out
	// of the replicas' Service once its readiness probe has failed.
	testenv.WaitFor(t, time.Minute, "the replica cut off from its primary for 3 s, out of its Service, and the Cache not Ready for it", func() (bool, string) {
		down, _ := strconv.Atoi(testenv.ValkeyInfo(t, replicaServer, "replication", "master_link_down_since_seconds"))
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		served := endpointsOf(t, ns, resources.ReplicasServiceName(named))
		return down >= 3 && ready != nil && ready.Status == metav1.ConditionFalse && len(served) == 0,
			fmt.Sprintf("link down for %d s; replicas served: %v; Ready %+v", down, served, ready)
	})
	c, err := getCache(t, key)
	if err != nil {
		t.Fatal(err)
	}
	if role := testenv.ValkeyInfo(t, replicaServer, "replication", "role"); c.Status.Primary != primary.Name || role != "slave" {
		t.Errorf("cut off from its replica, the primary is %s and the replica's role %s; want %s kept and the replica a replica", c.Status.Primary, role, primary.Name)
	}
	if reasons := eventReasons(t, key); slices.Contains(reasons, cachev2.ReasonPrimaryLost+"/Failover") {
		t.Errorf("a failover while the operator reached the primary: events %v", reasons)
	}
	cut(false)
	if again := waitPrimaryServed(t, key, ""); again.Name != primary.Name {
		t.Errorf("the primary after the cut is %s, want %s", again.Name, primary.Name)
	}
}
