//go:build integration

package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	"example.com/cache-operator/internal/bucket"
	"example.com/cache-operator/internal/snapshot"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// setUp starts an S3 server with an empty bucket and n Valkey servers, the i-th holding
// 1000·(i+1) keys, and returns the bucket and the servers' shards.
func setUp(t *testing.T, n int) (*bucket.Bucket, []Shard, []*os.Process) {
	t.Helper()
	s3, shards, servers := startServers(t, n)
	return testBucket(t, s3, "backups", s3.SecretKey), shards, servers
}

// testBucket opens the named bucket of the S3 server with its access key and the secret given.
func testBucket(t *testing.T, s3 *testenv.S3, name, secret string) *bucket.Bucket {
	t.Helper()
	b, err := bucket.Open(bucket.Location{Endpoint: s3.Endpoint, Insecure: true, Bucket: name},
		bucket.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startServers is setUp's servers: the S3 server, with the bucket "backups", and the Valkey
// servers.
func startServers(t *testing.T, n int) (*testenv.S3, []Shard, []*os.Process) {
	t.Helper()
	ips := testenv.LoopbackIPs(n + 1)
	s3 := testenv.StartS3(t, ips[n], 7070)
	s3.MakeBucket(t, "backups")
	var shards []Shard
	var servers []*os.Process
	for i := range n {
		servers = append(servers, testenv.StartValkey(t, ips[i], 6379, "--repl-diskless-sync-delay", "0"))
		c := testenv.Valkey(t, ips[i], 6379)
		cmds := make(valkeygo.Commands, 0, 1000*(i+1))
		for k := range 1000 * (i + 1) {
			cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("s%d-key-%d", i, k)).Value("v").Build())
		}
		for _, res := range c.DoMulti(context.Background(), cmds...) {
			if err := res.Error(); err != nil {
				t.Fatal(err)
			}
		}
		shards = append(shards, Shard{Name: "shard-" + strconv.Itoa(i), Source: fmt.Sprintf("orders-%d", i),
			Addr: net.JoinHostPort(ips[i], "6379")})
	}
	return s3, shards, servers
}

// A backup holds each shard's RDB and its manifest, which lists them with their sizes and
// digests; fetched for a restore, each copy is whole (a new server loads it with every key), and
// a copy unlike its manifest is refused.
func TestABackupHoldsEveryShardWholeAndARestoreFetchesItChecked(t *testing.T) {
	b, shards, _ := setUp(t, 2)
	ctx := context.Background()
	// The servers' own format, announced as backups do: RDB 80 from Valkey 9, 11 from 8.
	version := testenv.ValkeyInfo(t, testenv.Valkey(t, testenv.LoopbackIPs(1)[0], 6379), "server", "valkey_version")
	format := valkey.RDBFormat(version)
	m, err := Take(ctx, b, "default/orders/2026-12-02T09-00-00Z", version, shards, snapshot.Source{Stall: 10 * time.Second, Version: version}, nil)
	if err != nil {
		t.Fatal(err)
	}
	names, err := b.List(ctx, "default/orders/")
	if err != nil || !slices.Equal(names, []string{"default/orders/2026-12-02T09-00-00Z/manifest.json",
		"default/orders/2026-12-02T09-00-00Z/shard-0.rdb", "default/orders/2026-12-02T09-00-00Z/shard-1.rdb"}) {
		t.Fatalf("the bucket lists %q, %v", names, err)
	}
	r, err := b.Get(ctx, "default/orders/2026-12-02T09-00-00Z/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var stored Manifest
	err = json.NewDecoder(r).Decode(&stored)
	_ = r.Close()
	if err != nil || len(stored.Shards) != 2 || stored.Shards[1].Bytes != m.Shards[1].Bytes || stored.Shards[1].SHA256 == "" ||
		stored.ValkeyVersion != version || stored.RDBFormat != format || stored.Shards[0].RDBFormat != format || stored.Completed.Before(stored.Started) {
		t.Fatalf("the stored manifest is %+v (%v); the backup returned %+v", stored, err, m)
	}

	ips := testenv.LoopbackIPs(6)[3:5]
	for i, s := range stored.Shards {
		dir := t.TempDir()
		if err := Fetch(ctx, b, s, dir); err != nil {
			t.Fatal(err)
		}
		if s.Keys != int64(1000*(i+1)) {
			t.Errorf("the manifest says %s holds %d keys, want %d", s.Name, s.Keys, 1000*(i+1))
		}
		testenv.StartValkey(t, ips[i], 6379, "--dir", dir, "--dbfilename", RestoreRDB)
		c := testenv.Valkey(t, ips[i], 6379)
		if size, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || size != int64(1000*(i+1)) {
			t.Errorf("%s loads %d keys (%v), want %d", s.Name, size, err, 1000*(i+1))
		}
	}

	// A copy that is not what its manifest says is refused, and leaves no RDB for a server to
	// start with.
	for name, damage := range map[string]func(*ShardCopy){
		"shorter": func(s *ShardCopy) { s.Bytes++ },
		"corrupt": func(s *ShardCopy) { s.SHA256 = strings.Repeat("0", 64) },
		"missing": func(s *ShardCopy) { s.Object += ".gone" },
	} {
		s := stored.Shards[0]
		damage(&s)
		dir := t.TempDir()
		if err := Fetch(ctx, b, s, dir); err == nil {
			t.Errorf("%s: a copy unlike its manifest was fetched", name)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: the refused fetch left %v in the data directory", name, entries)
		}
	}
}

// A backup of which one shard's server stops sending fails after the stall time, and leaves
// nothing in the bucket: no manifest, and no object of the shards that succeeded.
func TestAFailedBackupLeavesNothing(t *testing.T) {
	b, shards, servers := setUp(t, 2)
	if err := servers[1].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[1].Signal(syscall.SIGCONT) })
	ctx := context.Background()
	if _, err := Take(ctx, b, "default/orders/failed", "8.0.1", shards, snapshot.Source{Stall: time.Second}, nil); err == nil {
		t.Fatal("a backup with a stopped server succeeded")
	}
	if names, err := b.List(ctx, ""); err != nil || len(names) != 0 {
		t.Errorf("after the failed backup the bucket lists %q, %v; want nothing", names, err)
	}
}

// A backup the bucket refuses fails with the bucket's answer for each shard, not with the
// snapshot that its failed upload stopped ("context canceled").
func TestABackupTheBucketRefusesSaysWhy(t *testing.T) {
	s3, shards, _ := startServers(t, 2)
	for _, tc := range []struct {
		name, bucket, secret, code string
	}{
		{"wrong credentials", "backups", "not-the-secret", "SignatureDoesNotMatch"},
		{"no such bucket", "missing", s3.SecretKey, "NoSuchBucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBucket(t, s3, tc.bucket, tc.secret)
			_, err := Take(context.Background(), b, "default/orders/refused", "8.0.1", shards, snapshot.Source{Stall: 10 * time.Second}, nil)
			if err == nil {
				t.Fatal("the backup succeeded")
			}
			for _, s := range shards {
				if want := "shard " + s.Name + ": writing s3://" + tc.bucket + "/"; !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
			if !strings.HasPrefix(err.Error(), "shard ") || !strings.Contains(err.Error(), tc.code) || strings.Contains(err.Error(), "context canceled") {
				t.Errorf("the error does not lead with the bucket's %s:\n%v", tc.code, err)
			}
		})
	}
}

// Deleting a backup removes its objects, and only its: another backup under the same Cache's
// path (whose name starts like it) stays whole. A backup already gone is no error.
func TestDeletingABackupRemovesItsObjectsOnly(t *testing.T) {
	b, shards, _ := setUp(t, 1)
	ctx := context.Background()
	for _, name := range []string{"nightly", "nightly-2"} {
		if _, err := Take(ctx, b, "default/orders/"+name, "8.0.1", shards, snapshot.Source{Stall: 10 * time.Second}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := Delete(ctx, b, "default/orders/nightly"); err != nil || n != 2 {
		t.Fatalf("deleted %d objects (%v), want the manifest and one RDB", n, err)
	}
	names, err := b.List(ctx, "")
	if err != nil || !slices.Equal(names, []string{"default/orders/nightly-2/manifest.json", "default/orders/nightly-2/shard-0.rdb"}) {
		t.Errorf("after the deletion the bucket lists %q, %v; want the other backup whole", names, err)
	}
	if n, err := Delete(ctx, b, "default/orders/nightly"); err != nil || n != 0 {
		t.Errorf("deleting it again: %d objects, %v; want none and no error", n, err)
	}
}

// A Cluster shard with a slot in migration is refused when its snapshot would come from its
// replica too: Valkey prints a slot's migrating and importing marks on the myself line only,
// which the primary's own CLUSTER NODES has and the replica's does not. On real servers: a
// primary with every slot, its replica in sync, and a second primary importing one slot.
func TestAShardWithASlotInMigrationIsRefusedFromItsReplica(t *testing.T) {
	ctx := context.Background()
	ips := testenv.LoopbackIPs(3)
	servers, ids := testenv.StartClusterNodes(t, ips, valkey.Auth{}, func(int) []string { return []string{"--repl-diskless-sync-delay", "0"} })
	primary, other, replica := servers[0], servers[1], servers[2]
	if err := primary.AddSlots(ctx, []valkey.SlotRange{{Start: 0, End: valkey.SlotCount - 1}}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips[1:] {
		if err := primary.Meet(ctx, ip, 6379); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "every node to know the other two", func() (bool, string) {
		for i, s := range servers {
			nodes, err := s.ClusterNodes(ctx)
			if err != nil {
				return false, err.Error()
			}
			if known := slices.DeleteFunc(nodes, func(n valkey.ClusterNode) bool { return n.Handshake }); len(known) != len(servers) {
				return false, fmt.Sprintf("node %d knows %d nodes", i, len(known))
			}
		}
		return true, ""
	})
	if err := replica.Replicate(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	replicaAddr := net.JoinHostPort(ips[2], "6379")
	testenv.WaitFor(t, 30*time.Second, "the replica's shard to be the primary's slots, the primary named", func() (bool, string) {
		slots, primaryAddr, err := shardSlots(ctx, replicaAddr)
		return err == nil && len(slots) == 1 && slots[0].Len() == valkey.SlotCount && primaryAddr == net.JoinHostPort(ips[0], "6379"),
			fmt.Sprint(slots, primaryAddr, err)
	})

	const slot = 5
	if err := other.SetSlotsImporting(ctx, []int{slot}, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := primary.SetSlotsMigrating(ctx, []int{slot}, ids[1]); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"primary": net.JoinHostPort(ips[0], "6379"), "replica": replicaAddr} {
		if slots, _, err := shardSlots(ctx, addr); err == nil || !strings.Contains(err.Error(), "moving") {
			t.Errorf("the shard's slots from its %s while slot %d migrates: %v, %v; want refused", name, slot, slots, err)
		}
	}
}

// On a real server: a shard is recorded with the version its server runs and the memory its data
// takes as the server counts it against maxmemory; a server with keys in a database other than 0
// is refused.
func TestAShardIsRecordedAsItsServerReportsIt(t *testing.T) {
	ctx := t.Context()
	_, shards, _ := startServers(t, 1)
	d, err := inspectShard(ctx, shards[0])
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.Valkey(t, testenv.LoopbackIPs(1)[0], 6379)
	if want := testenv.ValkeyInfo(t, c, "server", "valkey_version"); d.Version != want || d.Keys != 1000 || d.Memory <= 0 {
		t.Errorf("the shard's server reports %+v, want version %s, 1000 keys and the memory they take", d, want)
	}
	if err := c.Do(ctx, c.B().Move().Key("s0-key-0").Db(1).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := inspectShard(ctx, shards[0]); err == nil || !strings.Contains(err.Error(), "database 1") {
		t.Errorf("a server with keys in database 1: %v, want it refused", err)
	}
}

// A Replicated Cache's shard is copied from its replica only once the replica has every write its
// primary had taken when the agent asked, so that the copy holds the writes acknowledged before
// the backup started, whichever replica acknowledged them; a replica whose link to its primary is
// down is refused. On real servers: a primary given writes while its replica was stopped, which
// then has them to read when the agent asks it, and a replica of an address where nothing listens.
func TestAReplicaIsCopiedOnceItHasItsPrimarysWrites(t *testing.T) {
	ctx := context.Background()
	ips := testenv.LoopbackIPs(9)[6:9]
	testenv.StartValkey(t, ips[0], 6379)
	replicaServer := testenv.StartValkey(t, ips[1], 6379, "--replicaof", ips[0], "6379")
	testenv.StartValkey(t, ips[2], 6379, "--replicaof", ips[0], "1") // nothing listens there
	primaryAddr, replicaAddr := net.JoinHostPort(ips[0], "6379"), net.JoinHostPort(ips[1], "6379")
	primary, replica := testenv.Valkey(t, ips[0], 6379), testenv.Valkey(t, ips[1], 6379)
	testenv.WaitFor(t, 30*time.Second, "the replica in sync", func() (bool, string) {
		link := testenv.ValkeyInfo(t, replica, "replication", "master_link_status")
		return link == "up", "link " + link
	})
	// Stopped, the replica reads nothing of the stream until it runs again, and then 16 KiB of it
	// at a time between its clients' requests.
	if err := replicaServer.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	const keys = 20000
	cmds := make(valkeygo.Commands, 0, keys)
	for i := range keys {
		cmds = append(cmds, primary.B().Set().Key(fmt.Sprint("k", i)).Value(strings.Repeat("v", 100)).Build())
	}
	for _, res := range primary.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := replicaServer.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got, err := primaryOf(ctx, replicaAddr, 10*time.Second); err != nil || got != primaryAddr {
		t.Fatalf("the replica's primary is %q (%v), want %s", got, err, primaryAddr)
	}
	if n, err := replica.Do(ctx, replica.B().Dbsize().Build()).AsInt64(); err != nil || n != keys {
		t.Errorf("once the agent found it caught up, the replica holds %d keys (%v), want the %d its primary took before", n, err, keys)
	}
	if got, err := primaryOf(ctx, primaryAddr, time.Second); err != nil || got != primaryAddr {
		t.Errorf("a primary's primary is %q (%v), want itself", got, err)
	}
	if _, err := primaryOf(ctx, net.JoinHostPort(ips[2], "6379"), time.Second); err == nil || !strings.Contains(err.Error(), "is down") {
		t.Errorf("a replica whose link is down: %v, want it refused", err)
	}
}
