//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A server forks for a backup's snapshot and for a replica's full resync, and the pages its
// child copies as writes land, with the writes it buffers for a syncing replica, count against
// its container's memory limit as much as its data does. With the Cache filled past maxmemory
// (eviction on) and a client writing new keys steadily (steadyWrites), a backup takes its
// snapshot from one replica while the other, restarted empty, takes a full resync from the
// primary: the backup completes, the replica rejoins, and the kernel kills no server, at the
// smallest memory the API allows and at a larger one. The resynced replica loaded the sync with
// no file on its data volume. Each subtest logs each server's peak memory against its limit, and
// the full resync's copy-on-write against what the primary held before it forked.
func TestASnapshotAndAFullResyncUnderEvictionStayInsideTheMemoryLimit(t *testing.T) {
	runBeside(t, 2)
	startOperator(t, "a", "", clusterCheckInterval)
	for _, memory := range []string{"64Mi", "256Mi"} {
		t.Run(memory, func(t *testing.T) {
			ns := newNamespace(t)
			store := newBackupStore(t, ns)
			limit := resource.MustParse(memory)
			cache := &cachev2.Cache{
				ObjectMeta: metav1.ObjectMeta{Name: "filled", Namespace: ns},
				Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 1, ReplicasPerShard: ptr.To[int32](2),
					Version: valkeyVersion, Memory: limit},
			}
			if err := admin.Create(context.Background(), cache); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(cache)
			cache = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			primary, _ := podOfRole(t, cache, cachev2.RolePrimary)
			var resynced cachev2.ClusterNode
			t.Cleanup(func() { reportMemory(t, key, resynced.Pod, limit) })

			fill := startFilling(t, key, 0, 2)
			// One connection, asked again on every look: a server this busy may keep a new one
			// waiting past its timeout on a busy machine.
			primaryClient := node(t, primary)
			testenv.WaitFor(t, 2*time.Minute, "the primary evicting", func() (bool, string) {
				info, err := primaryClient.Do(context.Background(), primaryClient.B().Info().Section("stats").Build()).ToString()
				if err != nil {
					return false, err.Error()
				}
				evicted := valkey.InfoField(info, "evicted_keys")
				return evicted != "" && evicted != "0", fmt.Sprintf("%d keys written, evicted_keys:%s", fill.written.Load(), evicted)
			})
			fill.stop()
			// What the primary holds, filled: its data, the allocator's fragmentation under
			// eviction, its code and buffers. A fork's copies come on top.
			held, _ := strconv.ParseFloat(testenv.ValkeyInfo(t, primaryClient, "memory", "used_memory_rss"), 64)
			rate := steadyWrites(limit)
			steady := startFilling(t, key, rate, 0)

			backup := newBackup(t, ns, "under-load", key.Name, store.location)
			source := waitBackup(t, backup, cachev1alpha1.BackupRunning, time.Minute).Status.Shards[0].Source
			for _, n := range cache.Status.Nodes {
				if n.Role == cachev2.RoleReplica && n.Pod != source {
					resynced = n
				}
			}
			if err := crashServer(ns, resynced.Pod); err != nil {
				t.Fatal(err)
			}
			waitBackup(t, backup, cachev1alpha1.BackupCompleted, 3*time.Minute)
			waitNewReplicaOn(t, key, resynced.Pod, resynced.ID, 3)
			written, failed := steady.stop()
			t.Logf("%d keys written at %d/s meanwhile, %d writes failed (%s)", written, rate, failed.n, failed.kinds())
			// The full sync's fork's copy-on-write, against what the primary held before it
			// forked. The snapshot's is not known: its server kills the child once the backup
			// has read the whole RDB, before the child reports what it copied.
			cow, _ := strconv.ParseFloat(testenv.ValkeyInfo(t, node(t, primary), "persistence", "rdb_last_cow_size"), 64)
			t.Logf("the full resync forked on %s: %.1f MiB copied on write; it held %.1f MiB before, of a %s limit",
				primary.Name, cow/(1<<20), held/(1<<20), limit.String())
			// The resync went straight into the replica's memory: no RDB on its data volume.
			files, err := cluster.KubectlOutput(context.Background(), "exec", "--namespace", ns, resynced.Pod, "-c", resources.ContainerName, "--", "ls", "-A", "/data")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(files, ".rdb") {
				t.Errorf("%s's data volume after its full resync holds %q, want no RDB", resynced.Pod, files)
			}
		})
	}
}

// steadyWrites is the rate of the steady writer for a Cache of the given memory: a heavy stream
// of fills, 1,000 new keys of 1 KiB a second at 256Mi, and as many for each MiB at other sizes
// (250 at 64Mi). The same writes copy as many pages in each second of a fork whatever the size,
// and a filled node of 64Mi keeps 8 to 10 MiB for them (docs/placement.md, "What the other
// quarter is for"): at 1,000 writes a second its forks copied 4 to 7 MiB in the half second they
// took, and one that took longer, on a machine running the whole tier, met the OOM killer.
func steadyWrites(limit resource.Quantity) int {
	return int(1000 * limit.Value() / (256 << 20))
}

// reportMemory checks that no server of the Cache was OOMKilled, and that none restarted but
// the one the test killed (resynced), and logs each server's peak memory against the limit.
func reportMemory(t *testing.T, key client.ObjectKey, resynced string, limit resource.Quantity) {
	t.Helper()
	for _, pod := range cachePods(t, key) {
		server := pod.Spec.Containers[0].Name
		for _, status := range pod.Status.ContainerStatuses {
			if last := status.LastTerminationState.Terminated; last != nil && last.Reason == "OOMKilled" {
				t.Errorf("%s's %s was OOMKilled at %s", pod.Name, status.Name, last.FinishedAt)
			}
			want := int32(0)
			if pod.Name == resynced {
				want = 1
			}
			if status.Name == server && status.RestartCount != want {
				t.Errorf("%s's server restarted %d times, want %d", pod.Name, status.RestartCount, want)
			}
		}
		if peak, err := serverMemoryPeak(key.Namespace, pod.Name); err != nil {
			t.Logf("%s: %v", pod.Name, err)
		} else {
			t.Logf("%s: peak %.1f MiB of a %s limit (maxmemory %.1f MiB)", pod.Name, float64(peak)/(1<<20), limit.String(),
				float64(resources.MaxMemory(limit))/(1<<20))
		}
	}
}

// A client that asks for a large value's copy again and again and never reads the replies makes
// its server buffer them all (Valkey bounds no normal client's output by default), past the
// container's memory limit: the kernel kills the server, the kubelet reports it OOMKilled and
// restarts it in its pod, empty, and the Cache heals as from any restart in place: the replica
// takes over, the restarted server comes back as its replica, and every write the replica had
// acknowledged is still there. Eviction is off (noeviction), so that no acknowledged key is
// evicted on the way.
func TestAServerPastItsMemoryLimitIsOOMKilledAndNoAcknowledgedWriteIsLost(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	cache := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "slow-reader", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 1, ReplicasPerShard: ptr.To[int32](1),
			Version: valkeyVersion, Memory: resource.MustParse("64Mi"), Config: &cachev2.ValkeyConfig{MaxmemoryPolicy: "noeviction"}},
	}
	if err := admin.Create(context.Background(), cache); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cache)
	cache = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	primaryPod, primary := podOfRole(t, cache, cachev2.RolePrimary)
	acked := writeAcknowledgedByAReplica(t, primaryPod, primary.ID, key)
	c := node(t, primaryPod)
	const big = 1 << 20
	if err := c.Do(context.Background(), c.B().Set().Key("big").Value(strings.Repeat("b", big)).Build()).Error(); err != nil {
		t.Fatal(err)
	}

	// 256 MiB of replies for a 64 MiB container, to a connection that reads none of them.
	// GETRANGE, not GET: Valkey 9 replies to GET of a large value with a reference to the value
	// rather than a copy (measured: 64 GETs of 1 MiB unread grow used_memory by 0 MiB on 9.1.2,
	// 64 GETRANGEs of it by 62 MiB).
	conn, err := net.Dial("tcp", net.JoinHostPort(primaryPod.Status.PodIP, fmt.Sprint(resources.Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(strings.Repeat("GETRANGE big 0 -1\r\n", 256))); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, primaryPod.Name+"'s server OOMKilled and restarted", func() (bool, string) {
		pod := &corev1.Pod{}
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(primaryPod), pod); err != nil {
			return false, err.Error()
		}
		for _, status := range pod.Status.ContainerStatuses {
			if last := status.LastTerminationState.Terminated; status.Name == primaryPod.Spec.Containers[0].Name && last != nil {
				if pod.UID != primaryPod.UID {
					t.Fatalf("%s was replaced, want its server restarted in place", pod.Name)
				}
				return last.Reason == "OOMKilled", fmt.Sprintf("restarted %d times, the last ended by %s", status.RestartCount, last.Reason)
			}
		}
		return false, "not restarted"
	})
	waitNewReplicaOn(t, key, primaryPod.Name, primary.ID, 2)
	assertAcknowledgedKeys(t, key, acked, "after the OOM kill")
}

// filling writes new keys of 1 KiB through a cluster client, from several connections at once,
// at a steady rate or as fast as the Cache takes them, until stopped.
type filling struct {
	written atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	failed  writeFailures
}

// writeFailures counts failed writes by their error's text.
type writeFailures struct {
	n      int
	byText map[string]int
}

func (f writeFailures) kinds() string {
	if f.n == 0 {
		return "none"
	}
	var kinds []string
	for text, n := range f.byText {
		kinds = append(kinds, fmt.Sprintf("%d× %s", n, text))
	}
	return strings.Join(kinds, "; ")
}

// startFilling starts filling the Cache with perSecond writes a second, or as many as it takes
// if 0, then in pipelines of fillBatch (a 256Mi Cache takes some 160,000 keys to fill, and one
// write per round trip took more than two minutes on a busy machine), each followed by a WAIT for
// inSync replicas: a fill that outran the replicas of a busy machine would have them dropped and
// resynced in full while it floods, which is not what a test filling a Cache means to show. The
// test stops it (filling.stop) or its end does.
func startFilling(t *testing.T, key client.ObjectKey, perSecond int, inSync int64) *filling {
	t.Helper()
	c := clusterClient(t, key)
	ctx, cancel := context.WithCancel(context.Background())
	f := &filling{cancel: cancel}
	value := strings.Repeat("v", 1024)
	var next atomic.Int64
	// A pipeline with a WAIT goes whole to one node over one connection, whose writes WAIT then
	// waits for, only if its keys share a slot: a hash tag.
	keyFormat := "fill-%d"
	if perSecond == 0 && inSync > 0 {
		keyFormat = "{fill}-%d"
	}
	// Each write takes a turn, which a ticker hands out at the rate asked for.
	turns := make(chan struct{})
	if perSecond > 0 {
		f.wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(perSecond))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					select {
					case turns <- struct{}{}:
					case <-ctx.Done():
						return
					default: // every writer busy: the turn is lost, not queued
					}
				}
			}
		})
	} else {
		close(turns)
	}
	for range 8 {
		f.wg.Go(func() {
			for ctx.Err() == nil {
				select {
				case <-turns:
				case <-ctx.Done():
					return
				}
				batch := 1
				if perSecond == 0 {
					batch = fillBatch
				}
				cmds := make(valkeygo.Commands, 0, batch+1)
				for range batch {
					cmds = append(cmds, c.B().Set().Key(fmt.Sprintf(keyFormat, next.Add(1))).Value(value).Build())
				}
				if perSecond == 0 && inSync > 0 {
					cmds = append(cmds, c.B().Wait().Numreplicas(inSync).Timeout(2000).Build())
				}
				opCtx, done := context.WithTimeout(ctx, 5*time.Second)
				results := c.DoMulti(opCtx, cmds...)
				done()
				for _, res := range results[:batch] {
					switch err := res.Error(); {
					case ctx.Err() != nil:
					case err != nil:
						f.mu.Lock()
						f.failed.n++
						if f.failed.byText == nil {
							f.failed.byText = map[string]int{}
						}
						f.failed.byText[err.Error()]++
						f.mu.Unlock()
					default:
						f.written.Add(1)
					}
				}
			}
		})
	}
	t.Cleanup(func() { f.stop() })
	return f
}

// fillBatch is how many writes a filler as fast as it can sends at once.
const fillBatch = 32

// stop stops the writers and returns how many writes succeeded and which failed.
func (f *filling) stop() (written int64, failed writeFailures) {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written.Load(), f.failed
}

// serverMemoryPeak is the most memory the named pod's server container has used since it
// started, as its memory cgroup counts it against its limit.
func serverMemoryPeak(namespace, name string) (int64, error) {
	id, err := serverContainerID(namespace, name)
	if err != nil {
		return 0, err
	}
	return cluster.ContainerMemoryPeak(id)
}
