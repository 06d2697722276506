//go:build integration

package resources

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"example.com/cache-operator/test/harness/testenv"
)

// A Cluster node's readiness probe passes for a primary that serves slots, and for a replica
// only once its link to its primary is up: a node that has joined no cluster yet, a replica
// whose primary does not answer, and a server that does not answer are not ready. On real
// servers.
func TestTheClusterReadinessProbeWaitsForAReplicaInSync(t *testing.T) {
	ips := testenv.LoopbackIPs(11)[7:]
	node, primary, replica, nobody := ips[0], ips[1], ips[2], ips[3]
	testenv.StartValkey(t, node, 6379, "--cluster-enabled", "yes")
	testenv.StartValkey(t, primary, 6379, "--repl-diskless-sync-delay", "0")
	// A replica of an address where nothing listens: its link stays down.
	testenv.StartValkey(t, replica, 6379, "--replicaof", "127.0.0.1", "1")
	probe := func(ip string) error {
		cli := fmt.Sprintf("%s -h %s -p %d", filepath.Join(testenv.BinDir(), "valkey-cli"), ip, Port)
		command := replicaInSync(cli)
		return exec.Command(command[0], command[1:]...).Run()
	}
	if err := probe(node); err == nil {
		t.Error("a cluster node with no slot and no primary is ready")
	}
	c := testenv.Valkey(t, node, 6379)
	if err := c.Do(t.Context(), c.B().ClusterAddslotsrange().StartSlotEndSlot().StartSlotEndSlot(0, 16383).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := probe(node); err != nil {
		t.Errorf("a primary that serves slots is not ready: %v", err)
	}
	if err := probe(replica); err == nil {
		t.Error("a replica with its link down is ready")
	}
	c = testenv.Valkey(t, replica, 6379)
	if err := c.Do(t.Context(), c.B().Replicaof().Host(primary).Port(6379).Build()).Error(); err != nil {
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

// A readiness probe of a server that no longer answers (stopped here, as a hung or swapping server
// would be) ends by itself, failed, with every process it started: containerd waits for every
// writer of a probe's output, so a valkey-cli left waiting would keep the pod ready for minutes.
// On a real server.
func TestAProbeOfAServerThatHangsEndsFailed(t *testing.T) {
	ip := testenv.LoopbackIPs(16)[15]
	server := testenv.StartValkey(t, ip, 6379, "--cluster-enabled", "yes")
	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Signal(syscall.SIGCONT) })
	cli := fmt.Sprintf("%s -h %s -p %d", filepath.Join(testenv.BinDir(), "valkey-cli"), ip, Port)
	for name, command := range map[string][]string{
		"a Cluster node's":              boundedProbe(replicaInSync(cli)...),
		"a Standalone node's with auth": boundedProbe(answersPong(cli)...),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, command[0], command[1:]...)
			// Its output through a pipe, as containerd reads it: Wait returns once every writer
			// has closed it, or WaitDelay after the context's kill.
			run.Stdout = &bytes.Buffer{}
			run.WaitDelay = time.Second
			err := run.Run()
			if ctx.Err() != nil {
				t.Fatalf("the probe of a stopped server still ran a minute later: %v", err)
			}
			if err == nil {
				t.Error("the probe of a stopped server passed")
			}
		})
	}
}
