//go:build integration

package resources

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	"k8s.io/apimachinery/pkg/api/resource"

	"example.com/cache-operator/test/harness/testenv"
)

// A filled primary at the smallest memory the API allows, taking writes faster than one of its
// replicas takes them, drops that replica once it is twice ReplicationBacklog behind rather than
// buffer the stream past its container's memory limit (Valkey's own default lets a replica fall 64 MiB
// behind for a minute, all of it beyond maxmemory): its memory stays within maxmemory and a
// backlog, and the replica, once it runs again, is back in sync. On every release, from the
// container's own arguments. The replica is stopped (SIGSTOP), as one starved of CPU on a busy
// node is.
func TestAPrimaryDropsAReplicaFallingBehindBeforeItsBufferReachesTheMemoryLimit(t *testing.T) {
	ips := testenv.LoopbackIPs(30)[28:]
	limit := resource.MustParse("64Mi")
	for _, release := range testenv.ValkeyReleases(t) {
		t.Run(release.Version, func(t *testing.T) {
			cache := testCache()
			cache.Spec.Version, cache.Spec.Memory = release.Version, limit
			args := StatefulSet(cache, DefaultImages).Spec.Template.Spec.Containers[0].Args
			args = args[slices.Index(args, "--maxmemory"):]
			testenv.StartValkeyRelease(t, release, ips[0], Port, args...)
			stopped := testenv.StartValkeyRelease(t, release, ips[1], Port, args...)
			primary, replica := testenv.Valkey(t, ips[0], Port), testenv.Valkey(t, ips[1], Port)
			if err := replica.Do(t.Context(), replica.B().Replicaof().Host(ips[0]).Port(Port).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			waitInSync(t, replica)
			// Filled to maxmemory with the replica following, then as much again with it stopped.
			fill(t, primary, "in-sync", MaxMemory(limit), 1)
			if err := stopped.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stopped.Signal(syscall.SIGCONT) })
			fill(t, primary, "stopped", MaxMemory(limit), 0)

			peak, _ := strconv.ParseInt(testenv.ValkeyInfo(t, primary, "memory", "used_memory_peak"), 10, 64)
			bound := MaxMemory(limit) + ReplicationBacklog(limit) + serverBaseline/2
			t.Logf("the primary peaked at %.1f MiB: maxmemory %.1f MiB, backlog %.1f MiB, memory limit %s",
				mib(peak), mib(MaxMemory(limit)), mib(ReplicationBacklog(limit)), limit.String())
			if peak > bound {
				t.Errorf("the primary's used_memory_peak is %.1f MiB, want at most %.1f MiB (maxmemory, a backlog and half the server's baseline)",
					mib(peak), mib(bound))
			}
			if dropped := testenv.ValkeyInfo(t, primary, "stats", "client_output_buffer_limit_disconnections"); dropped == "0" {
				t.Errorf("the primary dropped no client for its output buffer, want the stopped replica dropped")
			}
			if err := stopped.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			waitInSync(t, replica)
		})
	}
}

// fill writes bytes of new keys of 1 KiB to the primary as fast as it takes them, in pipelines,
// each followed by a WAIT for the given number of replicas.
func fill(t *testing.T, primary valkeygo.Client, prefix string, bytes int64, replicas int64) {
	t.Helper()
	value := strings.Repeat("v", 1024)
	const batch = 512
	for n := range bytes/1024/batch + 1 {
		cmds := make(valkeygo.Commands, 0, batch+1)
		for i := range batch {
			cmds = append(cmds, primary.B().Set().Key(fmt.Sprintf("%s-%d-%d", prefix, n, i)).Value(value).Build())
		}
		if replicas > 0 {
			cmds = append(cmds, primary.B().Wait().Numreplicas(replicas).Timeout(10000).Build())
		}
		for _, res := range primary.DoMulti(t.Context(), cmds...) {
			if err := res.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitInSync waits until the replica's link to its primary is up.
func waitInSync(t *testing.T, replica valkeygo.Client) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, "the replica in sync", func() (bool, string) {
		link := testenv.ValkeyInfo(t, replica, "replication", "master_link_status")
		return link == "up", "master_link_status:" + link
	})
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
