package resources

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	cachev2 "example.com/cache-operator/api/v2"
)

// standInCLI is a valkey-cli for the preStop hook to run: a primary with one replica in sync,
// at the address CLUSTER REPLICAS prints, which takes over when asked; it logs the arguments of
// every call.
const standInCLI = `#!/bin/sh
echo "$*" >> "$LOG"
case "$*" in
*ROLE*) if [ -e "$TOOK_OVER" ]; then echo slave; else echo master; fi ;;
*"INFO replication"*) printf 'role:master\nconnected_slaves:1\nslave0:ip=x,port=6379,state=online,offset=1,lag=0\n' ;;
*"CLUSTER MYID"*) echo 07c37dfeb235213a872192d90877d0cd55635b91 ;;
*"CLUSTER REPLICAS"*) echo "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f $REPLICA_ADDR slave 07c37dfeb235213a872192d90877d0cd55635b91 0 1 1 connected" ;;
*"CLUSTER FAILOVER"*) touch "$TOOK_OVER"; echo OK ;;
esac
`

// The preStop hook asks its replica to take over at the replica's address as Valkey prints it,
// an IPv6 one without brackets included, and returns once its server is a replica.
func TestHandOverAsksTheReplicaAtTheAddressValkeyPrints(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	for _, tc := range []struct{ printed, asked string }{
		{"198.18.1.2:6379@16379", "-h 198.18.1.2 -p 6379 CLUSTER FAILOVER"},
		{"198.18.1.2:6379@16379,sessions-1", "-h 198.18.1.2 -p 6379 CLUSTER FAILOVER"},
		{"2001:db8::2:6380@16380", "-h 2001:db8::2 -p 6380 CLUSTER FAILOVER"},
	} {
		t.Run(tc.printed, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "valkey-cli"), []byte(standInCLI), 0o755); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "calls")
			script := handOverScript(nodeCLI{local: "valkey-cli -p 6379"})
			cmd := exec.Command(sh, script[1:]...)
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "LOG="+log,
				"TOOK_OVER="+filepath.Join(dir, "took-over"), "REPLICA_ADDR="+tc.printed)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the hook failed: %v\n%s", err, out)
			}
			calls, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(calls), tc.asked) {
				t.Errorf("the hook did not run valkey-cli %q; it ran:\n%s", tc.asked, calls)
			}
			if _, err := os.Stat(filepath.Join(dir, "took-over")); err != nil {
				t.Errorf("no replica was asked to take over: %v", err)
			}
		})
	}
}

// A Cluster primary whose pod goes of itself hands its shard over in its preStop hook, and since
// Valkey 9.0 the server hands over on SIGTERM too, should the hook not have.
func TestAClusterNodeHandsOverInItsHookAndSince9OnSIGTERMToo(t *testing.T) {
	for version, native := range map[string]bool{"8.0.1": false, "8.1.1": false, "9.0.0": true, "9.1.2": true} {
		cache := testCache()
		cache.Spec.Mode, cache.Spec.Version = cachev2.ModeCluster, version
		c := StatefulSet(cache, DefaultImages).Spec.Template.Spec.Containers[0]
		flag := strings.Contains(strings.Join(c.Args, " "), "--shutdown-on-sigterm failover")
		hook := c.Lifecycle != nil && c.Lifecycle.PreStop != nil
		if flag != native || !hook {
			t.Errorf("Valkey %s: --shutdown-on-sigterm failover %t, preStop hook %t; want the hook, and the flag %t", version, flag, hook, native)
		}
	}
}
