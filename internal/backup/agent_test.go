package backup

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/bucket"
	"example.com/cache-operator/internal/valkey"
)

// What the operator writes as a Job's arguments is what the agent reads back.
func TestAPlanReadsBackAsWritten(t *testing.T) {
	plan := Plan{
		Location: bucket.Location{Endpoint: "s3.example.internal:9000", Insecure: true, Region: "eu-1", Bucket: "caches", Prefix: "prod"},
		Path:     "shop/orders/nightly", ValkeyVersion: "8.0.1", Mode: cachev2.ModeCluster, Stall: 45 * time.Second,
		ResultFile: "/dev/termination-log",
		Shards: []Shard{{Name: "shard-0", Source: "orders-1", Addr: "127.64.0.7:6379"},
			{Name: "shard-1", Source: "orders-3", Addr: "127.64.0.9:6379"}},
	}
	got, err := ParsePlan(plan.Args())
	if err != nil || !reflect.DeepEqual(got, plan) {
		t.Errorf("read back %+v, %v; want %+v", got, err, plan)
	}
	if _, err := ParsePlan([]string{"--endpoint=s3:9000", "--bucket=b", "--path=p"}); err == nil {
		t.Error("a plan with no shard was read")
	}
	if _, err := ParsePlan(append(plan.Args(), "--shard=shard-2,orders-5")); err == nil {
		t.Error("a shard without an address was read")
	}
	if _, err := ParsePlan(append(plan.Args(), "--cache-mode=cluster")); err == nil {
		t.Error("a plan of an unknown mode was read")
	}
	// A Job made by an earlier release says --cluster rather than --cache-mode.
	for flag, mode := range map[string]cachev2.Mode{"--cluster=true": cachev2.ModeCluster, "--cluster=false": cachev2.ModeStandalone} {
		earlier := []string{"--endpoint=s3:9000", "--bucket=b", "--path=p", "--shard=shard-0,orders-0,127.64.0.7:6379", flag}
		if got, err := ParsePlan(earlier); err != nil || got.Mode != mode {
			t.Errorf("%s read as mode %q, %v; want %s", flag, got.Mode, err, mode)
		}
	}
}

// A deletion's plan reads back as written too, and names a backup.
func TestAPlaceReadsBackAsWritten(t *testing.T) {
	plan := Place{Location: bucket.Location{Endpoint: "s3.example.internal:9000", Region: "eu-1", Bucket: "caches", Prefix: "prod"},
		Path: "shop/orders/nightly", ResultFile: "/dev/termination-log"}
	got, err := ParsePlace(DeleteCommand, plan.Args())
	if err != nil || !reflect.DeepEqual(got, plan) {
		t.Errorf("read back %+v, %v; want %+v", got, err, plan)
	}
	if _, err := ParsePlace(DeleteCommand, []string{"--endpoint=s3:9000", "--bucket=b"}); err == nil {
		t.Error("a deletion with no backup path was read")
	}
}

// A result always fits in a termination message: the shards' memory is left out first, so that
// as many shards as before the memory was recorded keep their keys and slots, which a restore
// needs; the shards are left out when they would not fit even so.
func TestAResultFitsInATerminationMessage(t *testing.T) {
	// The most shards that fit with realistic names and sizes before the memory was recorded.
	var full Result
	for i := 0; ; i++ {
		full.Shards = append(full.Shards, ShardResult{Name: fmt.Sprintf("shard-%d", i), Source: fmt.Sprintf("orders-cache-%d", i+100),
			Bytes: 1 << 30, Keys: 1 << 24, Slots: "10923-16383"})
		if out, _ := json.Marshal(full); len(out) > MaxResultBytes {
			full.Shards = full.Shards[:i]
			break
		}
	}
	for i := range full.Shards {
		full.Shards[i].Memory = 1 << 33
	}
	if m, err := full.message(); err != nil || len(m) > MaxResultBytes || len(mustParse(t, m).Shards) != len(full.Shards) {
		t.Errorf("%d shards with their memory: %d bytes (%v), %d shards read back; want every shard, without its memory",
			len(full.Shards), len(m), err, len(mustParse(t, m).Shards))
	}

	r := Result{Bytes: 3, Keys: 3}
	for i := range 3 {
		r.Shards = append(r.Shards, ShardResult{Name: fmt.Sprintf("shard-%d", i), Bytes: 1, Keys: 1})
	}
	if m, err := r.message(); err != nil || len(mustParse(t, m).Shards) != 3 {
		t.Errorf("a small result reads back as %s, %v", m, err)
	}
	for i := range 200 {
		r.Shards = append(r.Shards, ShardResult{Name: fmt.Sprintf("shard-%d", i+3), Bytes: 1 << 40, Keys: 1 << 30})
	}
	m, err := r.message()
	if back := mustParse(t, m); err != nil || len(m) > MaxResultBytes || back.Shards != nil || back.Keys != 3 {
		t.Errorf("a result of 203 shards is %d bytes (%v), reads back as %+v", len(m), err, back)
	}
}

func mustParse(t *testing.T, message string) Result {
	t.Helper()
	r, err := ParseResult(message)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A Cluster's backup holds every slot once: shards chosen before a scale-out ended would miss
// some, or hold some twice.
func TestAClusterBackupHoldsEverySlotOnce(t *testing.T) {
	shard := func(name string, ranges ...valkey.SlotRange) Shard { return Shard{Name: name, Slots: ranges} }
	whole := []Shard{shard("shard-0", valkey.SlotRange{Start: 0, End: 8191}), shard("shard-1", valkey.SlotRange{Start: 8192, End: 16383})}
	if err := wholeCluster(whole); err != nil {
		t.Errorf("two halves: %v", err)
	}
	for name, shards := range map[string][]Shard{
		"a slot missing": {shard("shard-0", valkey.SlotRange{Start: 0, End: 8190}), whole[1]},
		"a slot twice":   {shard("shard-0", valkey.SlotRange{Start: 0, End: 8192}), whole[1]},
		"no slot":        {shard("shard-0")},
	} {
		if err := wholeCluster(shards); err == nil {
			t.Errorf("%s: taken as whole", name)
		}
	}
}

// What a manifest lists is what an imported backup reports: a Cluster's shards have slots.
func TestAManifestReadsAsAResult(t *testing.T) {
	m := Manifest{ValkeyVersion: "8.0.1", RDBFormat: 11, Shards: []ShardCopy{
		{Shard: Shard{Name: "shard-0", Source: "orders-1", Slots: []valkey.SlotRange{{Start: 0, End: 8191}}}, Bytes: 10, Keys: 3},
		{Shard: Shard{Name: "shard-1", Source: "orders-3", Slots: []valkey.SlotRange{{Start: 8192, End: 16383}}}, Bytes: 20, Keys: 4},
	}}
	want := Result{Bytes: 30, Keys: 7, ValkeyVersion: "8.0.1", RDBFormat: 11, Cluster: true, Shards: []ShardResult{
		{Name: "shard-0", Source: "orders-1", Bytes: 10, Keys: 3, Slots: "0-8191"},
		{Name: "shard-1", Source: "orders-3", Bytes: 20, Keys: 4, Slots: "8192-16383"}}}
	if got := resultOf(m); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	m.Shards = []ShardCopy{{Shard: Shard{Name: "shard-0", Source: "pages-0"}, Bytes: 5, Keys: 1}}
	if got := resultOf(m); got.Cluster {
		t.Error("a Standalone node's manifest reads as a Cluster's")
	}
}
