//go:build integration

package resources

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// The exporter's user reads what the server reports and nothing that shows a key, a value or a
// setting: not masterauth, the replication user's password (whose user may SYNC the whole
// dataset), not a key, not the slow log's commands with their arguments. A server that started
// with an earlier release's rights, which let the exporter read masterauth, gets the new ones from
// the operator (valkey.SetUsers), an exporter's session opened before included. On a real server.
func TestTheExportersUserReadsNoKeyAndNoSecret(t *testing.T) {
	ip := testenv.LoopbackIPs(13)[12]
	cache := testCache()
	cache.Spec.Auth = &cachev2.Auth{}
	acl, _ := NextACL(cache, ACL{}, "the-application-password", time.Now())
	earlier := strings.Replace(acl.File(cache), userRules[ExporterUser],
		"+info +ping +config|get +client|list +client|setname +slowlog +latency +cluster|info +cluster|slots +select +dbsize +memory|usage +latency|histogram", 1)
	file := filepath.Join(t.TempDir(), ACLFileKey)
	if err := os.WriteFile(file, []byte(earlier), 0o600); err != nil {
		t.Fatal(err)
	}
	const masterauth = "the-replication-password"
	testenv.StartValkey(t, ip, Port, "--aclfile", file, "--masteruser", ReplicationUser, "--masterauth", masterauth)
	connect := func(user, password string) valkeygo.Client {
		c, err := valkeygo.NewClient(valkeygo.ClientOption{
			InitAddress: []string{net.JoinHostPort(ip, strconv.Itoa(Port))}, Username: user, Password: password,
			ForceSingleClient: true, DisableCache: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	app, exporter := connect(cachev2.AppUser, "the-application-password"), connect(ExporterUser, acl.Passwords[ExporterUser])
	if err := app.Do(t.Context(), app.B().Set().Key("a-key").Value("a-value").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := exporter.Do(t.Context(), exporter.B().ConfigGet().Parameter("masterauth").Build()).AsStrMap(); err != nil || got["masterauth"] != masterauth {
		t.Fatalf("with the earlier rights the exporter reads masterauth as %q (%v): the test does not start where it should", got["masterauth"], err)
	}

	server, err := valkey.Connect(ip, Port, valkey.Auth{User: OperatorUser, Password: acl.Passwords[OperatorUser]})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if err := server.SetUsers(t.Context(), acl.Users(cache)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd     []string
		allowed bool
	}{
		{[]string{"INFO", "ALL"}, true},
		{[]string{"PING"}, true},
		{[]string{"SLOWLOG", "LEN"}, true},
		{[]string{"LATENCY", "LATEST"}, true},
		{[]string{"DBSIZE"}, true},
		{[]string{"CONFIG", "GET", "masterauth"}, false},
		{[]string{"GET", "a-key"}, false},
		{[]string{"SCAN", "0"}, false},
		{[]string{"SLOWLOG", "GET", "1"}, false},
		{[]string{"CLIENT", "LIST"}, false},
		{[]string{"MEMORY", "USAGE", "a-key"}, false},
	} {
		err := exporter.Do(t.Context(), exporter.B().Arbitrary(c.cmd...).Build()).Error()
		if refused := err != nil && strings.Contains(err.Error(), "NOPERM"); refused == c.allowed {
			t.Errorf("the exporter's %s: %v; want allowed %t", strings.Join(c.cmd, " "), err, c.allowed)
		}
	}
	// The application user's session keeps its rights: it still reads its key.
	if got, err := app.Do(t.Context(), app.B().Get().Key("a-key").Build()).ToString(); err != nil || got != "a-value" {
		t.Errorf("GET a-key as the application user after the new rights: %q, %v", got, err)
	}
}

// The application user runs what a cache's client needs, and not what wipes every key, reaches
// beyond its own keys or writes to another server, unless the spec grants it (spec.auth.grant);
// no grant gives it an administrative command. Grants given to a running server take effect on
// the sessions already open. On a real server.
func TestTheApplicationUserRunsWhatACacheClientNeedsAndWhatIsGranted(t *testing.T) {
	ip := testenv.LoopbackIPs(17)[16]
	cache, acl, file := aclFileOf(t, cachev2.ModeStandalone)
	testenv.StartValkey(t, ip, Port, "--aclfile", file)
	app, err := valkeygo.NewClient(valkeygo.ClientOption{
		InitAddress: []string{net.JoinHostPort(ip, strconv.Itoa(Port))}, Username: cachev2.AppUser, Password: "the-application-password",
		ForceSingleClient: true, DisableCache: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	server, err := valkey.Connect(ip, Port, valkey.Auth{User: OperatorUser, Password: acl.Passwords[OperatorUser]})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	check := func(rights string, commands map[string]bool) {
		t.Helper()
		for command, allowed := range commands {
			err := app.Do(t.Context(), app.B().Arbitrary(strings.Fields(command)...).Build()).Error()
			if refused := err != nil && strings.Contains(err.Error(), "NOPERM"); refused == allowed {
				t.Errorf("%s: the application user's %s: %v; want allowed %t", rights, command, err, allowed)
			}
		}
	}
	check("by default", map[string]bool{
		"SET k v": true, "GET k": true, "INFO": true, "SCAN 0": true, "EVAL return 1 0": true, "SCRIPT LOAD return 1": true,
		"CLIENT SETNAME app": true, "SELECT 0": true, "PUBLISH c m": true,
		"FLUSHALL": false, "FLUSHDB": false, "KEYS *": false, "SWAPDB 0 1": false, "SORT k": false,
		"SCRIPT FLUSH": false, "FUNCTION FLUSH": false, "MIGRATE 127.0.0.1 1 k 0 10": false, "RESTORE k2 0 x": false,
		"CONFIG GET maxmemory": false, "LATENCY RESET": false, "ACL LIST": false, "SHUTDOWN": false,
	})
	grant := func(grants ...cachev2.Grant) {
		t.Helper()
		cache.Spec.Auth.Grant = grants
		if err := server.SetUsers(t.Context(), acl.Users(cache)); err != nil {
			t.Fatal(err)
		}
	}
	grant("keys", "flushdb", "script|flush")
	check("granted keys, flushdb and script|flush", map[string]bool{
		"KEYS *": true, "FLUSHDB": true, "SCRIPT FLUSH": true, "SET k v": true,
		"FLUSHALL": false, "FUNCTION FLUSH": false, "CONFIG GET maxmemory": false,
	})
	grant("@dangerous")
	check("granted @dangerous", map[string]bool{
		"FLUSHALL": true, "SWAPDB 0 1": true, "SORT k": true,
		"CONFIG GET maxmemory": false, "LATENCY RESET": false, "ACL LIST": false, "SHUTDOWN": false, "MONITOR": false,
	})
}

// A Cluster node with auth, once allowed to import (valkey.Server.AllowImports), imports slots by
// atomic slot migration from another such node, whose replication user the target runs the keys
// as (without it the job stayed in its snapshot for good, on 9.1.2). A release without atomic slot
// migration, whose ACL knows no such command, has nothing to allow. On real servers of the oldest
// and the newest release.
func TestANodeWithAuthAllowedToImportImportsSlotsAtomically(t *testing.T) {
	ctx := t.Context()
	_, acl, file := aclFileOf(t, cachev2.ModeCluster)
	auth := valkey.Auth{User: OperatorUser, Password: acl.Passwords[OperatorUser], ReplicationUser: ReplicationUser}
	args := []string{"--cluster-enabled", "yes", "--aclfile", file, "--masteruser", ReplicationUser, "--masterauth", acl.Passwords[ReplicationUser]}
	releases := testenv.ValkeyReleases(t)
	ips := testenv.LoopbackIPs(24)[20:]
	start := func(ip string, release int) *valkey.Server {
		testenv.StartValkeyRelease(t, releases[release], ip, Port, args...)
		s, err := valkey.Connect(ip, Port, auth)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		if err := s.AllowImports(ctx); err != nil {
			t.Fatalf("allowing Valkey %s to import: %v", releases[release].Version, err)
		}
		return s
	}
	start(ips[3], 0)

	newest := len(releases) - 1
	source, target := start(ips[0], newest), start(ips[1], newest)
	if err := source.AddSlots(ctx, []valkey.SlotRange{{Start: 0, End: valkey.SlotCount - 1}}); err != nil {
		t.Fatal(err)
	}
	if err := source.Meet(ctx, ips[1], Port); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the source's cluster state ok", func() (bool, string) {
		state, err := source.ClusterState(ctx)
		return state == "ok", fmt.Sprint(state, err)
	})
	const keys = 20
	c := asOperator(t, ips[0], acl)
	for i := range keys {
		if err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("{b}%d", i)).Value("v").Build()).Error(); err != nil { // slot 3300
			t.Fatal(err)
		}
	}
	nodes, err := target.ClusterNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	targetNode, _ := valkey.Myself(nodes)
	testenv.WaitFor(t, 30*time.Second, "slots 3000-3999 moved to the target", func() (bool, string) {
		jobs, err := source.SlotMigrations(ctx)
		if err != nil {
			return false, err.Error()
		}
		if len(jobs) == 0 || jobs[0].State == valkey.MigrationFailed {
			if err := source.MigrateSlots(ctx, []valkey.SlotRange{{Start: 3000, End: 3999}}, targetNode.ID); err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("started; before: %+v", jobs)
		}
		return jobs[0].State == valkey.MigrationSucceeded, fmt.Sprintf("%+v", jobs[0])
	})
	if n, err := asOperator(t, ips[1], acl).Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || n != keys {
		t.Errorf("the target holds %d keys (%v), want %d", n, err, keys)
	}
}

// The node user runs what the readiness agent and a Cluster node's preStop hook send, the backup
// user what the backup agent sends, SYNC included, and neither reads a key, a setting or a user,
// or writes: a pod or a backup's Job holds no password that could. Each connects as package
// valkey does, and asks what its program asks. Every release loads the ACL file (Valkey 8 refuses
// a file that names a command it does not know). On real servers of each release.
func TestTheNodeAndBackupUsersRunWhatTheirProgramsSendAndNoMore(t *testing.T) {
	_, acl, file := aclFileOf(t, cachev2.ModeCluster)
	releases := testenv.ValkeyReleases(t)
	ips := testenv.LoopbackIPs(24 + len(releases))[24:]
	for i, release := range releases {
		t.Run(release.Version, func(t *testing.T) {
			testenv.StartValkeyRelease(t, release, ips[i], Port, "--cluster-enabled", "yes", "--aclfile", file)
			operator := asOperator(t, ips[i], acl)
			for _, user := range []string{NodeUser, BackupUser} {
				s, err := valkey.Connect(ips[i], Port, valkey.Auth{User: user, Password: acl.Passwords[user]})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if _, err := s.Status(t.Context()); err != nil {
					t.Errorf("INFO as %s: %v", user, err)
				}
				if _, err := s.ClusterNodes(t.Context()); err != nil {
					t.Errorf("CLUSTER NODES as %s: %v", user, err)
				}
			}
			for _, c := range []struct {
				user    string
				cmd     []string
				allowed bool
			}{
				{NodeUser, []string{"PING"}, true},
				{NodeUser, []string{"ROLE"}, true},
				{NodeUser, []string{"INFO", "replication"}, true},
				{NodeUser, []string{"CLUSTER", "MYID"}, true},
				{NodeUser, []string{"CLUSTER", "REPLICAS", "a-node"}, true},
				{NodeUser, []string{"CLUSTER", "FAILOVER"}, true},
				{NodeUser, []string{"CLUSTER", "INFO"}, true},
				{NodeUser, []string{"CLUSTER", "RESET"}, false},
				{BackupUser, []string{"PING"}, true},
				{BackupUser, []string{"INFO", "keyspace"}, true},
				{BackupUser, []string{"REPLCONF", "rdb-only", "1"}, true},
				{BackupUser, []string{"SYNC"}, true},
				{BackupUser, []string{"CLUSTER", "FAILOVER"}, false},
				{BackupUser, []string{"PSYNC", "?", "-1"}, false},
			} {
				checkRight(t, operator, c.user, c.cmd, c.allowed)
			}
			for _, user := range []string{NodeUser, BackupUser} {
				for _, cmd := range [][]string{{"GET", "a-key"}, {"SET", "a-key", "v"}, {"SCAN", "0"}, {"CONFIG", "GET", "masterauth"},
					{"CONFIG", "SET", "maxmemory", "1"}, {"ACL", "LIST"}, {"CLIENT", "LIST"}, {"FLUSHALL"}, {"SHUTDOWN"}, {"DEBUG", "SLEEP", "0"}} {
					checkRight(t, operator, user, cmd, false)
				}
			}
		})
	}
}

// asOperator connects to the server at ip as the operator's user of acl; the client is closed
// with the test.
func asOperator(t *testing.T, ip string, acl ACL) valkeygo.Client {
	t.Helper()
	operator, err := valkeygo.NewClient(valkeygo.ClientOption{
		InitAddress: []string{net.JoinHostPort(ip, strconv.Itoa(Port))}, Username: OperatorUser, Password: acl.Passwords[OperatorUser],
		ForceSingleClient: true, DisableCache: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(operator.Close)
	return operator
}

// checkRight fails the test unless the server, asked by as (ACL DRYRUN), says user may run cmd
// exactly when allowed.
func checkRight(t *testing.T, as valkeygo.Client, user string, cmd []string, allowed bool) {
	t.Helper()
	reply, err := as.Do(t.Context(), as.B().AclDryrun().Username(user).Command(cmd[0]).Arg(cmd[1:]...).Build()).ToString()
	if err != nil {
		t.Fatalf("ACL DRYRUN %s %s: %v", user, strings.Join(cmd, " "), err)
	}
	if (reply == "OK") != allowed {
		t.Errorf("%s may run %s: %q; want allowed %t", user, strings.Join(cmd, " "), reply, allowed)
	}
}

// aclFileOf is a new Cache with auth in the mode given, its first ACL (the application password
// "the-application-password"), and that ACL's file, written for a server to load.
func aclFileOf(t *testing.T, mode cachev2.Mode) (*cachev2.Cache, ACL, string) {
	t.Helper()
	cache := testCache()
	cache.Spec.Mode = mode
	cache.Spec.Auth = &cachev2.Auth{}
	acl, _ := NextACL(cache, ACL{}, "the-application-password", time.Now())
	file := filepath.Join(t.TempDir(), ACLFileKey)
	if err := os.WriteFile(file, []byte(acl.File(cache)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cache, acl, file
}

// In a Replicated Cache, the node user may also run what a primary's preStop hook sends
// (FAILOVER), and the replication user may sync from the start: a Replicated node starts held, a
// replica of an address that serves no sync, and needs no fence. Every release loads that file.
func TestAReplicatedNodesUsersHandOverAndReplicate(t *testing.T) {
	_, acl, file := aclFileOf(t, cachev2.ModeReplicated)
	releases := testenv.ValkeyReleases(t)
	ips := testenv.LoopbackIPs(31 + len(releases))[31:]
	for i, release := range releases {
		t.Run(release.Version, func(t *testing.T) {
			testenv.StartValkeyRelease(t, release, ips[i], Port, "--aclfile", file)
			operator := asOperator(t, ips[i], acl)
			for _, c := range []struct {
				user    string
				cmd     []string
				allowed bool
			}{
				{NodeUser, []string{"ROLE"}, true},
				{NodeUser, []string{"INFO", "replication"}, true},
				{NodeUser, []string{"FAILOVER", "TIMEOUT", "5000"}, true},
				{NodeUser, []string{"REPLICAOF", "NO", "ONE"}, false},
				{NodeUser, []string{"CONFIG", "GET", "masterauth"}, false},
				{ReplicationUser, []string{"PSYNC", "?", "-1"}, true},
				{ReplicationUser, []string{"SYNC"}, true},
				{ReplicationUser, []string{"REPLCONF", "listening-port", "6379"}, true},
				{ReplicationUser, []string{"GET", "a-key"}, false},
			} {
				checkRight(t, operator, c.user, c.cmd, c.allowed)
			}
		})
	}
}
