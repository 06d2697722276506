//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// exportsRunning are the atomic slot migration jobs that the Cache's primaries run as sources,
// by the source's pod. A pod whose server does not answer yet (a new one starting) has none.
func exportsRunning(t *testing.T, key client.ObjectKey) map[string]valkey.SlotMigration {
	t.Helper()
	running := map[string]valkey.SlotMigration{}
	for _, pod := range cachePods(t, key) {
		if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
			continue
		}
		s, err := valkey.Connect(pod.Status.PodIP, resources.Port, valkey.Auth{})
		if err != nil {
			continue
		}
		jobs, err := s.SlotMigrations(context.Background())
		s.Close()
		for _, job := range jobs {
			if err == nil && job.Export && job.Running() {
				running[pod.Name] = job
			}
		}
	}
	return running
}

// slotMigrations is the log of the pod's server (CLUSTER GETSLOTMIGRATIONS), newest first.
func slotMigrations(t *testing.T, pod *corev1.Pod) []valkey.SlotMigration {
	t.Helper()
	s, err := valkey.Connect(pod.Status.PodIP, resources.Port, valkey.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	jobs, err := s.SlotMigrations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// pauseWrites holds the writes of the pod's server for a minute (CLIENT PAUSE WRITE): it still
// answers the operator and its probes, but an atomic slot migration towards it stays running,
// waiting for the target, until unpauseWrites. So a test holds a job mid-way, as a large one
// would be.
func pauseWrites(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	do(t, pod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClientPause().Timeout(60000).Write().Build() })
}

func unpauseWrites(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	do(t, pod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClientUnpause().Build() })
}

// scaledOutWithJobsHeld forms a 3-shard Cluster Cache of that name with the replicas given, writes
// keys, scales it out to 4 shards, and holds the new shard's primary's writes as soon as its
// server answers (pauseWrites), so that the operator's atomic jobs towards it stay running. It
// returns once every source runs one, with the new primary's pod.
func scaledOutWithJobsHeld(t *testing.T, name string, replicas int32, keys int) (*testenv.Operator, client.ObjectKey, *corev1.Pod) {
	t.Helper()
	operator := startOperator(t, "a", "", clusterCheckInterval)
	key := newClusterCache(t, newNamespace(t), name, 3, replicas)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	writeKeys(t, key, keys)
	patchCache(t, key, `{"spec":{"shards":4}}`)
	newPrimary := fmt.Sprintf("%s-%d", name, 3*(1+replicas))
	var target *corev1.Pod
	testenv.WaitFor(t, 3*time.Minute, newPrimary+"'s server answering, its writes held", func() (bool, string) {
		for _, pod := range cachePods(t, key) {
			if pod.Name == newPrimary && pod.Status.PodIP != "" {
				if s, err := valkey.Connect(pod.Status.PodIP, resources.Port, valkey.Auth{}); err == nil {
					s.Close()
					pauseWrites(t, &pod)
					target = &pod
					return true, ""
				}
			}
		}
		return false, "not yet"
	})
	testenv.WaitFor(t, 3*time.Minute, "every source running an atomic job towards "+newPrimary, func() (bool, string) {
		running := exportsRunning(t, key)
		return len(running) == 3, fmt.Sprintf("running: %v", running)
	})
	return operator, key, target
}

// Atomic slot migration (Valkey 9) under what can go wrong mid-job: the operator killed with
// SIGKILL, the scale-out taken back, the source's or the target's primary failing over. Each
// case holds the jobs running (scaledOutWithJobsHeld), and checks that every key is still there
// and the cluster ends balanced, on the shards the spec asks for, with no slot on two nodes.
func TestAtomicSlotMigrationThroughItsFailures(t *testing.T) {
	t.Parallel() // and each case beside the others, with a scope of its own
	const keys = 3000

	t.Run("the operator killed", func(t *testing.T) {
		runBeside(t, 1)
		first, key, target := scaledOutWithJobsHeld(t, "killed", 0, keys)
		before := exportsRunning(t, key)
		first.Stop(t, syscall.SIGKILL)
		startOperator(t, "b", "", clusterCheckInterval)
		// The new operator finds the jobs in the sources' logs and waits for them: it starts no
		// other, and cancels none.
		testenv.WaitFor(t, time.Minute, "the new operator to report the jobs it waits for", func() (bool, string) {
			c, err := getCache(t, key)
			if err != nil {
				return false, err.Error()
			}
			_, why := settled(c)
			return strings.Contains(why, "atomic slot migrations to end"), why
		})
		if after := exportsRunning(t, key); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("the jobs running changed under the new operator:\nbefore %v\nafter  %v", before, after)
		}
		unpauseWrites(t, target)
		waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
		assertShape(t, key, 4, 0)
		assertKeysRead(t, key, keys)
		for _, v := range primaries(clusterViews(t, key)) {
			if job, ok := before[v.pod.Name]; ok && !hasJob(slotMigrations(t, &v.pod), job.Name, valkey.MigrationSucceeded) {
				t.Errorf("%s's job %s, running when the operator was killed, did not succeed: %+v", v.pod.Name, job.Name, slotMigrations(t, &v.pod))
			}
		}
	})

	t.Run("the scale-out taken back", func(t *testing.T) {
		runBeside(t, 1)
		_, key, target := scaledOutWithJobsHeld(t, "takenback", 0, keys)
		before := exportsRunning(t, key)
		patchCache(t, key, `{"spec":{"shards":3}}`)
		testenv.WaitFor(t, time.Minute, "the jobs cancelled", func() (bool, string) {
			for _, v := range primaries(clusterViews(t, key)) {
				if job, ok := before[v.pod.Name]; ok && !hasJob(slotMigrations(t, &v.pod), job.Name, valkey.MigrationCancelled) {
					return false, v.pod.Name + "'s job is not cancelled"
				}
			}
			return true, ""
		})
		unpauseWrites(t, target)
		waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
		assertShape(t, key, 3, 0)
		assertKeysRead(t, key, keys)
	})

	for _, fails := range []string{"source", "target"} {
		t.Run("the "+fails+" failing over", func(t *testing.T) {
			runBeside(t, 1)
			_, key, target := scaledOutWithJobsHeld(t, fails+"-fails", 1, keys)
			// Every write is on a replica before the crash.
			for _, v := range primaries(clusterViews(t, key)) {
				if n, err := do(t, &v.pod, func(b valkeygo.Builder) valkeygo.Completed {
					return b.Wait().Numreplicas(1).Timeout(5000).Build()
				}).AsInt64(); err != nil || n < 1 {
					t.Fatalf("WAIT 1 on %s: %d, %v", v.pod.Name, n, err)
				}
			}
			crashed := target
			if fails == "source" {
				for pod := range exportsRunning(t, key) {
					crashed = podNamed(t, key, pod)
					break
				}
			}
			c, err := getCache(t, key)
			if err != nil {
				t.Fatal(err)
			}
			oldID := nodeIDOf(c, crashed.Name)
			if err := crashServer(key.Namespace, crashed.Name); err != nil {
				t.Fatal(err)
			}
			if fails == "source" {
				unpauseWrites(t, target)
			}
			// The source's replica takes its slots over, and the jobs start again from it; the
			// target, with no slot yet, is not failed over but replaced by the new node at its
			// address, and the jobs start again towards the new shard's primary.
			testenv.WaitFor(t, 4*time.Minute, crashed.Name+"'s node replaced and the cluster ready", func() (bool, string) {
				c, err := getCache(t, key)
				if err != nil {
					return false, err.Error()
				}
				ok, why := settled(c)
				if id := nodeIDOf(c, crashed.Name); id == "" || id == oldID {
					return false, crashed.Name + " is still its old node; " + why
				}
				return ok && len(c.Status.Nodes) == 8, fmt.Sprintf("%d nodes; %s", len(c.Status.Nodes), why)
			})
			assertShape(t, key, 4, 1)
			assertKeysRead(t, key, keys)
		})
	}
}

// hasJob reports whether the log holds the job of that name in that state.
func hasJob(jobs []valkey.SlotMigration, name, state string) bool {
	for _, job := range jobs {
		if job.Name == name {
			return job.State == state
		}
	}
	return false
}

// podNamed is the Cache's pod of that name.
func podNamed(t *testing.T, key client.ObjectKey, name string) *corev1.Pod {
	t.Helper()
	for _, pod := range cachePods(t, key) {
		if pod.Name == name {
			return &pod
		}
	}
	t.Fatalf("no pod %s", name)
	return nil
}

// nodeIDOf is the node ID the Cache's status gives the pod's server.
func nodeIDOf(c *cachev2.Cache, pod string) string {
	for _, n := range c.Status.Nodes {
		if n.Pod == pod {
			return n.ID
		}
	}
	return ""
}

// A Cluster with auth scales out and in with atomic slot migration: each target is let import
// as the replication user, which the source authenticates as, and every key is read back as the
// application user.
func TestAClusterWithAuthScalesAtomically(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	replicas := int32(0)
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "secure", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3, ReplicasPerShard: &replicas,
			Version: valkeyVersion, Memory: resource.MustParse("64Mi"), Auth: &cachev2.Auth{}},
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(c)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	password := string(appSecret(t, ns, "secure-auth").Data[resources.AppPasswordKey])
	const keys = 2000
	app := appClusterClient(t, key, password)
	for i := range keys {
		if err := app.Do(context.Background(), app.B().Set().Key(fmt.Sprint("key-", i)).Value(fmt.Sprint(i)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func() {
		t.Helper()
		app := appClusterClient(t, key, password)
		for i := range keys {
			if got, err := app.Do(context.Background(), app.B().Get().Key(fmt.Sprint("key-", i)).Build()).ToString(); err != nil || got != fmt.Sprint(i) {
				t.Fatalf("GET key-%d = %q, %v", i, got, err)
			}
		}
	}
	for _, shards := range []int32{4, 3} {
		patchCache(t, key, fmt.Sprintf(`{"spec":{"shards":%d}}`, shards))
		testenv.WaitFor(t, 4*time.Minute, fmt.Sprintf("%d shards, Ready", shards), func() (bool, string) {
			c, err := getCache(t, key)
			if err != nil {
				return false, err.Error()
			}
			ok, why := settled(c)
			return ok && c.Status.Shards == shards && c.Status.SlotsToMove == 0 && len(c.Status.Nodes) == int(shards), why
		})
		readAll()
	}
	acl := appSecret(t, ns, resources.ACLSecretName(c))
	operator := valkey.Auth{User: resources.OperatorUser, Password: string(acl.Data[resources.OperatorUser])}
	succeeded := 0
	for _, pod := range cachePods(t, key) {
		s, err := valkey.Connect(pod.Status.PodIP, resources.Port, operator)
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := s.SlotMigrations(context.Background())
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, job := range jobs {
			if job.Export && job.State == valkey.MigrationSucceeded {
				succeeded++
			}
		}
	}
	if succeeded == 0 {
		t.Error("no server's log has an atomic slot migration that succeeded: the slots moved some other way")
	}
}
