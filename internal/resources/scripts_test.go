package resources

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	cachev2 "example.com/cache-operator/api/v2"
)

// runScript runs command, a pod's script command (scriptCommand), under the machine's sh in dir,
// with env added to the test's environment, and returns its combined output.
func runScript(t *testing.T, command []string, dir string, env ...string) (string, error) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	if len(command) < 4 || command[0] != "sh" || command[1] != "-c" {
		t.Fatalf("%q is no script command", command)
	}
	cmd := exec.Command(sh, command[1:]...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// standInServer is the server's command line in the start script's tests: it says what the
// data directory holds when it starts.
var standInServer = []string{"sh", "-c", `echo started; ls`}

// startIn runs the Valkey container's command of cache in dir as the kubelet would, with the
// stand-in server and the ACL Secret's file in envACL, and returns its output.
func startIn(t *testing.T, cache *cachev2.Cache, dir string) (string, error) {
	t.Helper()
	c := StatefulSet(cache, DefaultImages).Spec.Template.Spec.Containers[0]
	if c.Command == nil {
		t.Fatalf("the Valkey container of a %s Cache has no command of its own", cache.Spec.Mode)
	}
	return runScript(t, slices.Concat(c.Command, standInServer), dir, envACL+"=user default on nopass ~* +@all")
}

// files writes each name: content into dir.
func files(t *testing.T, dir string, contents map[string]string) {
	t.Helper()
	for name, content := range contents {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// content is what dir's file name holds, or "(none)".
func content(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if os.IsNotExist(err) {
		return "(none)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A Cluster node's start, with auth, writes the ACL file, forgets the node it was and the data of
// its last sync, makes a restore's RDB the one the server loads, and starts the server; the next
// start, a restart in place, finds no RDB left to load. A Standalone or Replicated node restored
// from a backup loads the backup at its first start only. A Standalone node without auth starts
// as the image starts it.
func TestTheStartScriptPreparesTheDataDirectoryThenRunsTheServer(t *testing.T) {
	cluster := authCache(cachev2.ModeCluster, 0)
	restored := testCache()
	restored.Spec.RestoreFrom = &cachev2.RestoreSource{Backup: "nightly"}
	replicated := restored.DeepCopy()
	replicated.Spec.Mode, replicated.Spec.Shards = cachev2.ModeReplicated, 1
	for _, tc := range []struct {
		cache *cachev2.Cache
		acl   string
	}{{cluster, "user default on nopass ~* +@all\n"}, {restored, "(none)"}, {replicated, "(none)"}} {
		t.Run(string(tc.cache.Spec.Mode), func(t *testing.T) {
			dir := t.TempDir()
			files(t, dir, map[string]string{ClusterConfigFile: "the node it was", startRDB: "its last sync", "restore.rdb": "the backup"})
			out, err := startIn(t, tc.cache, dir)
			if err != nil || !strings.HasPrefix(out, "started\n") {
				t.Fatalf("the server did not start: %v\n%s", err, out)
			}
			wantNodes := map[cachev2.Mode]string{cachev2.ModeCluster: "(none)", cachev2.ModeStandalone: "the node it was", cachev2.ModeReplicated: "the node it was"}[tc.cache.Spec.Mode]
			if got := content(t, dir, ClusterConfigFile); got != wantNodes {
				t.Errorf("%s holds %q, want %q", ClusterConfigFile, got, wantNodes)
			}
			if got := content(t, dir, startRDB); got != "the backup" {
				t.Errorf("the server starts with %q in %s, want the backup", got, startRDB)
			}
			if got := content(t, dir, aclFile); got != tc.acl {
				t.Errorf("the ACL file holds %q, want %q", got, tc.acl)
			}
			if out, err := startIn(t, tc.cache, dir); err != nil || content(t, dir, startRDB) != "(none)" {
				t.Errorf("a restart in place: %v, and %s holds %q, want none\n%s", err, startRDB, content(t, dir, startRDB), out)
			}
		})
	}
	if c := StatefulSet(testCache(), DefaultImages).Spec.Template.Spec.Containers[0]; c.Command != nil {
		t.Errorf("a Standalone node without auth runs %q, want the image's entrypoint", c.Command)
	}
}

// A step that fails, or that the script does not know, fails the start: the server does not run.
func TestTheStartScriptRunsNoServerAfterAStepFailed(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, aclFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := startIn(t, authCache(cachev2.ModeStandalone, 0), dir); err == nil || strings.Contains(out, "started") {
		t.Errorf("the ACL file could not be written, and the start gave %v:\n%s", err, out)
	}
	unknown := scriptCommand(startScript, "start.sh", "--format-disk", "/", "--")
	if out, err := runScript(t, slices.Concat(unknown, standInServer), t.TempDir()); err == nil || !strings.Contains(out, "unknown step --format-disk") || strings.Contains(out, "started") {
		t.Errorf("an unknown step gave %v:\n%s", err, out)
	}
}

// standInCLI is a valkey-cli for the preStop hook to run: by default a primary with one replica in
// sync, at the address CLUSTER REPLICAS prints, which takes over when asked; ROLE, REPLICA_STATE,
// REFUSES and NEVER_TAKES_OVER in its environment make it otherwise. It logs the arguments of
// every call.
const standInCLI = `#!/bin/sh
echo "$*" >> "$LOG"
case "$*" in
*ROLE*) if [ -e "$TOOK_OVER" ]; then echo slave; else echo "${ROLE:-master}"; fi ;;
*"INFO replication"*) printf 'role:master\nconnected_slaves:1\nslave0:ip=x,port=6379,state=%s,offset=1,lag=0\n' "${REPLICA_STATE:-online}" ;;
*"CLUSTER MYID"*) echo 07c37dfeb235213a872192d90877d0cd55635b91 ;;
*"CLUSTER REPLICAS"*) echo "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f $REPLICA_ADDR slave 07c37dfeb235213a872192d90877d0cd55635b91 0 1 1 connected" ;;
*FAILOVER*)
	if [ -n "${REFUSES:-}" ]; then echo "ERR Master is down or failed, please use CLUSTER FAILOVER FORCE"; exit 0; fi
	[ -n "${NEVER_TAKES_OVER:-}" ] || touch "$TOOK_OVER"
	echo OK ;;
esac
`

// standInSleep stands in for sleep, so that a hook waiting its whole bound takes no time.
const standInSleep = "#!/bin/sh\nexit 0\n"

// runHandOver runs hook, a Cluster node's preStop hook, against standInCLI with a replica printed
// at replicaAddr and env added; it returns the arguments of each valkey-cli call, whether the
// replica was asked to take over and took it, and the hook's error.
func runHandOver(t *testing.T, hook []string, replicaAddr string, env ...string) (calls []string, tookOver bool, err error) {
	t.Helper()
	dir := t.TempDir()
	for name, script := range map[string]string{"valkey-cli": standInCLI, "sleep": standInSleep} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(dir, "calls")
	out, err := runScript(t, hook, dir, slices.Concat([]string{"PATH=" + dir + ":" + os.Getenv("PATH"), "LOG=" + log,
		"TOOK_OVER=" + filepath.Join(dir, "took-over"), "REPLICA_ADDR=" + replicaAddr}, env)...)
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, out)
	}
	_, statErr := os.Stat(filepath.Join(dir, "took-over"))
	return strings.Split(strings.TrimSpace(content(t, dir, "calls")), "\n"), statErr == nil, err
}

// handOver is runHandOver of a hand-over that goes well: it fails the test unless the hook ended
// well and the replica took over.
func handOver(t *testing.T, hook []string, replicaAddr string) []string {
	t.Helper()
	calls, tookOver, err := runHandOver(t, hook, replicaAddr)
	if err != nil {
		t.Fatalf("the hook failed: %v", err)
	}
	if !tookOver {
		t.Errorf("no replica was asked to take over")
	}
	return calls
}

// The preStop hooks, a Cluster node's and a Replicated node's, hand over only what they can, and
// never hold the pod's stop longer than their bound: a replica, or a primary whose replica is still
// syncing, asks nobody; a primary whose replica refuses stops at once; one whose replica never
// takes over asks its role 50 times (10 s of 0.2 s sleeps) and gives up. They exit 0 in every
// case: the server is stopped after them anyway, and a failed hook only delays that.
func TestHandOverAsksOnlyWhenItCanAndIsBounded(t *testing.T) {
	cli := nodeCLI{local: "valkey-cli -p 6379"}
	t.Run("Cluster", func(t *testing.T) {
		handOverIsBounded(t, handOverCommand(cli), "-p 6379 -h 198.18.1.2 -p 6379 CLUSTER FAILOVER")
	})
	t.Run("Replicated", func(t *testing.T) {
		var c corev1.Container
		replicatedNode(&c, cli)
		handOverIsBounded(t, c.Lifecycle.PreStop.Exec.Command, "-p 6379 FAILOVER TIMEOUT 5000")
	})
}

// handOverIsBounded is TestHandOverAsksOnlyWhenItCanAndIsBounded of one hook, which asks for a
// failover with the valkey-cli arguments given.
func handOverIsBounded(t *testing.T, hook []string, failover string) {
	for _, tc := range []struct {
		name      string
		env       []string
		asked     bool
		roleCalls int
	}{
		{"a replica", []string{"ROLE=slave"}, false, 1},
		{"a primary whose replica is still syncing", []string{"REPLICA_STATE=wait_bgsave"}, false, 1},
		{"a primary whose replica refuses", []string{"REFUSES=1"}, true, 1},
		{"a primary whose replica never takes over", []string{"NEVER_TAKES_OVER=1"}, true, 51},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, tookOver, err := runHandOver(t, hook, "198.18.1.2:6379@16379", tc.env...)
			if err != nil {
				t.Fatalf("the hook failed: %v", err)
			}
			roleCalls := 0
			for _, c := range calls {
				if strings.HasSuffix(c, " ROLE") {
					roleCalls++
				}
			}
			if asked := slices.Contains(calls, failover); asked != tc.asked || tookOver || roleCalls != tc.roleCalls {
				t.Errorf("asked for a failover %t, took over %t, asked its role %d times; want %t, false, %d; it ran:\n%s",
					asked, tookOver, roleCalls, tc.asked, tc.roleCalls, strings.Join(calls, "\n"))
			}
		})
	}
}

// The preStop hook asks its replica to take over at the replica's address as Valkey prints it,
// an IPv6 one without brackets included, and returns once its server is a replica.
func TestHandOverAsksTheReplicaAtTheAddressValkeyPrints(t *testing.T) {
	for _, tc := range []struct{ printed, asked string }{
		{"198.18.1.2:6379@16379", "-h 198.18.1.2 -p 6379 CLUSTER FAILOVER"},
		{"198.18.1.2:6379@16379,sessions-1", "-h 198.18.1.2 -p 6379 CLUSTER FAILOVER"},
		{"2001:db8::2:6380@16380", "-h 2001:db8::2 -p 6380 CLUSTER FAILOVER"},
	} {
		t.Run(tc.printed, func(t *testing.T) {
			calls := handOver(t, handOverCommand(nodeCLI{local: "valkey-cli -p 6379"}), tc.printed)
			if !slices.Contains(calls, "-p 6379 "+tc.asked) {
				t.Errorf("the hook did not run valkey-cli %q; it ran:\n%s", tc.asked, strings.Join(calls, "\n"))
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
