//go:build integration

package resources

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"example.com/cache-operator/test/harness/testenv"
)

// A Cluster node's readiness probe passes for a primary, and for a replica only once its link to
// its primary is up: a replica whose primary does not answer is not ready. On real servers.
func TestTheClusterReadinessProbeWaitsForAReplicaInSync(t *testing.T) {
	ips := testenv.LoopbackIPs(10)[7:]
	primary, replica, nobody := ips[0], ips[1], ips[2]
	testenv.StartValkey(t, primary, 6379, "--repl-diskless-sync-delay", "0")
	// A replica of an address where nothing listens: its link stays down.
	testenv.StartValkey(t, replica, 6379, "--replicaof", "127.0.0.1", "1")
	probe := func(ip string) error {
		cli := fmt.Sprintf("%s -h %s -p %d", filepath.Join(testenv.BinDir(), "valkey-cli"), ip, Port)
		command := replicaInSync(cli)
		return exec.Command(command[0], command[1:]...).Run()
	}
	if err := probe(primary); err != nil {
		t.Errorf("a primary is not ready: %v", err)
	}
	if err := probe(replica); err == nil {
		t.Error("a replica with its link down is ready")
	}
	client := testenv.Valkey(t, replica, 6379)
	if err := client.Do(t.Context(), client.B().Replicaof().Host(primary).Port(6379).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the replica in sync to be ready", func() (bool, string) {
		err := probe(replica)
		return err == nil, fmt.Sprint(err)
	})
	if err := probe(nobody); err == nil {
		t.Error("a server that does not answer is ready")
	}
}
