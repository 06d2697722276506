//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/bucket"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// backupStore is an S3 server of the test's own with a bucket, and the Secret of its
// credentials in a namespace: where the test's backups go.
type backupStore struct {
	s3       *testenv.S3
	location cachev1alpha1.BucketLocation
}

const backupBucket = "cache-backups"

func newBackupStore(t *testing.T, namespace string) *backupStore {
	t.Helper()
	// On the machine's address on the cluster's bridge, where the pods reach it.
	plan, _, err := cluster.Plan()
	if err != nil {
		t.Fatal(err)
	}
	s3 := testenv.StartS3(t, plan.HostIP().String(), testenv.FreePort(t))
	s3.MakeBucket(t, backupBucket)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bucket-credentials", Namespace: namespace},
		StringData: map[string]string{
			cachev1alpha1.SecretKeyAccessKeyID:     s3.AccessKey,
			cachev1alpha1.SecretKeySecretAccessKey: s3.SecretKey,
		},
	}
	if err := admin.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return &backupStore{s3: s3, location: cachev1alpha1.BucketLocation{Endpoint: s3.Endpoint, Insecure: true,
		Bucket: backupBucket, Prefix: "e2e", CredentialsSecret: secret.Name}}
}

// bucket is the store's bucket, with the objects' names whole (the location's prefix included).
func (s *backupStore) bucket(t *testing.T) *bucket.Bucket {
	t.Helper()
	b, err := bucket.Open(bucket.Location{Endpoint: s.s3.Endpoint, Insecure: true, Bucket: backupBucket},
		bucket.Credentials{AccessKeyID: s.s3.AccessKey, SecretAccessKey: s.s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// objects lists the store's objects under the prefix.
func (s *backupStore) objects(t *testing.T, prefix string) []string {
	t.Helper()
	names, err := s.bucket(t).List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// newBackup asks for a backup of the Cache into the location.
func newBackup(t *testing.T, namespace, name, cache string, location cachev1alpha1.BucketLocation) client.ObjectKey {
	t.Helper()
	b := &cachev1alpha1.CacheBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       cachev1alpha1.CacheBackupSpec{CacheName: cache, Storage: location},
	}
	if err := admin.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(b)
}

// waitBackup waits until the backup is in the phase, and returns it.
func waitBackup(t *testing.T, key client.ObjectKey, phase cachev1alpha1.BackupPhase, timeout time.Duration) *cachev1alpha1.CacheBackup {
	t.Helper()
	b := &cachev1alpha1.CacheBackup{}
	testenv.WaitFor(t, timeout, fmt.Sprintf("backup %s %s", key, phase), func() (bool, string) {
		if err := admin.Get(context.Background(), key, b); err != nil {
			return false, err.Error()
		}
		return b.Status.Phase == phase, describeBackup(b)
	})
	return b
}

func describeBackup(b *cachev1alpha1.CacheBackup) string {
	complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete)
	if complete == nil {
		return fmt.Sprintf("phase %q, no Complete condition", b.Status.Phase)
	}
	return fmt.Sprintf("phase %q, Complete=%s %s: %s", b.Status.Phase, complete.Status, complete.Reason, complete.Message)
}

// backupShards is the number of shards of every Cache these tests back up: 3 nodes of a
// Standalone Cache, or 3 primaries.
const backupShards = 3

// assertBackupHolds checks a completed backup against the bucket and the data: the bucket holds
// each shard's RDB and the manifest, nothing else; and each RDB, loaded by a new server, holds
// the keys the backup counted and the values and TTLs written (check).
func assertBackupHolds(t *testing.T, store *backupStore, b *cachev1alpha1.CacheBackup, check func(shard int, c valkeygo.Client) int64) {
	t.Helper()
	shards := backupShards
	path := strings.Join([]string{store.location.Prefix, b.Namespace, b.Spec.CacheName, b.Name}, "/")
	if b.Status.Location != "s3://"+backupBucket+"/"+path+"/" {
		t.Errorf("the backup says it is at %s, want s3://%s/%s/", b.Status.Location, backupBucket, path)
	}
	want := []string{path + "/" + backup.ManifestName}
	for i := range shards {
		want = append(want, fmt.Sprintf("%s/shard-%d.rdb", path, i))
	}
	if got := store.objects(t, path+"/"); !slices.Equal(got, want) {
		t.Fatalf("the bucket holds %q, want %q", got, want)
	}
	if len(b.Status.Shards) != shards {
		t.Fatalf("the backup lists %d shards, want %d: %+v", len(b.Status.Shards), shards, b.Status.Shards)
	}
	var total int64
	ips := loopbackIPs(shards)
	for i, s := range b.Status.Shards {
		dir := t.TempDir()
		if err := backup.Fetch(context.Background(), store.bucket(t), backup.ShardCopy{Object: s.Object, Bytes: s.Bytes,
			SHA256: manifestDigest(t, store, path, s.Name)}, dir); err != nil {
			t.Fatal(err)
		}
		testenv.StartValkey(t, ips[i], 6379, "--dir", dir, "--dbfilename", backup.RestoreRDB)
		c := testenv.Valkey(t, ips[i], 6379)
		if keys := check(i, c); keys != s.Keys {
			t.Errorf("%s's RDB loads %d keys, its status says %d", s.Name, keys, s.Keys)
		}
		total += s.Keys
	}
	if total != b.Status.Keys {
		t.Errorf("the shards hold %d keys, the backup says %d", total, b.Status.Keys)
	}
}

// manifestDigest is a shard's SHA-256 as the backup's manifest says.
func manifestDigest(t *testing.T, store *backupStore, path, shard string) string {
	t.Helper()
	r, err := store.bucket(t).Get(context.Background(), path+"/"+backup.ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() //nolint:errcheck // read only
	var m backup.Manifest
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Shards {
		if s.Name == shard {
			return s.SHA256
		}
	}
	t.Fatalf("the manifest has no %s", shard)
	return ""
}

// waitJobGone waits until a finished backup's Job is removed.
func waitJobGone(t *testing.T, b *cachev1alpha1.CacheBackup) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, "the backup's Job removed", func() (bool, string) {
		err := admin.Get(context.Background(), client.ObjectKey{Namespace: b.Namespace, Name: resources.BackupJobName(b)}, &batchv1.Job{})
		return isNotFound(err), fmt.Sprint(err)
	})
}

// A backup of a Cluster holds each shard once, taken from its replica so that its primary keeps
// serving; a backup of a Standalone Cache holds each node. Each RDB, loaded by a new server,
// holds every key the backup counted, with its value and TTL, in the format of the servers'
// release; the Job is removed once the backup is recorded. The Cluster's backup, taken of the
// oldest release, restores into the newest (RDB 11 into a server of RDB 80).
func TestABackupHoldsEveryShardOfTheCache(t *testing.T) {
	runBeside(t, 2)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	ctx := context.Background()

	t.Run("Cluster 3×1", func(t *testing.T) {
		namespace := newNamespace(t)
		store := newBackupStore(t, namespace)
		key := newClusterCacheOf(t, namespace, "sessions", 3, 1, valkeys[0].Version)
		cache := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
		const keys = 3000
		writeKeys(t, key, keys)
		c := clusterClient(t, key)
		if err := c.Do(ctx, c.B().Expire().Key("key-7").Seconds(3600).Build()).Error(); err != nil {
			t.Fatal(err)
		}

		b := waitBackup(t, newBackup(t, namespace, "sessions-nightly", key.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
		for _, s := range b.Status.Shards {
			if i := slices.IndexFunc(cache.Status.Nodes, func(n cachev2.ClusterNode) bool { return n.Pod == s.Source }); i < 0 || cache.Status.Nodes[i].Role != cachev2.RoleReplica {
				t.Errorf("%s was taken from %s, not a replica (%+v)", s.Name, s.Source, cache.Status.Nodes)
			}
		}
		// The version is the servers' own, whatever the spec says (a restore needs it or later).
		served := testenv.ValkeyInfo(t, c, "server", "valkey_version")
		if b.Status.Keys != keys || b.Status.ValkeyVersion != served || int(b.Status.RDBFormat) != valkey.RDBFormat(served) ||
			b.Status.StartTime == nil || b.Status.CompletionTime == nil {
			t.Errorf("the backup's status is %+v, want %d keys of Valkey %s in its RDB format and its times", b.Status, keys, served)
		}
		for _, s := range b.Status.Shards {
			if s.Memory <= 0 {
				t.Errorf("%s records no memory its data took", s.Name)
			}
		}
		assertBackupHolds(t, store, b, func(_ int, c valkeygo.Client) int64 {
			n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if v, err := c.Do(ctx, c.B().Get().Key("key-7").Build()).ToString(); err == nil {
				ttl, _ := c.Do(ctx, c.B().Ttl().Key("key-7").Build()).AsInt64()
				if v != "7" || ttl <= 0 {
					t.Errorf("key-7 = %q with TTL %d, want 7 with one", v, ttl)
				}
			}
			return n
		})
		waitJobGone(t, b)
		assertBackupMetrics(t, operator, b)

		// Deleted, and made again from its backup: every key, its value and TTL are back, and
		// the Cache is Ready only once its nodes were checked against the backup.
		recreateFromBackup(t, key, b.Name, func(c *cachev2.Cache) { c.Spec, c.Spec.Version = cache.Spec, valkeyVersion })
		restored := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
		assertRestored(t, restored, keys)
		for pod, version := range serverVersions(t, key) {
			if version != valkeyVersion {
				t.Errorf("restored %s runs Valkey %s, want %s", pod, version, valkeyVersion)
			}
		}
		assertKeysRead(t, key, keys)
		c = clusterClient(t, key)
		if ttl, err := c.Do(ctx, c.B().Ttl().Key("key-7").Build()).AsInt64(); err != nil || ttl <= 0 || ttl > 3600 {
			t.Errorf("key-7's TTL after the restore is %d (%v), want up to an hour", ttl, err)
		}
	})

	t.Run("Standalone 3", func(t *testing.T) {
		namespace, store, cache := readyPagesWithStore(t)
		key := client.ObjectKeyFromObject(cache)
		for i, pod := range cachePods(t, key) {
			c := node(t, &pod)
			cmds := make(valkeygo.Commands, 0, 100*(i+1))
			for k := range 100 * (i + 1) {
				cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("page-%d", k)).Value(pod.Name).Build())
			}
			for _, res := range c.DoMulti(ctx, cmds...) {
				if err := res.Error(); err != nil {
					t.Fatal(err)
				}
			}
		}

		b := waitBackup(t, newBackup(t, namespace, "pages-nightly", key.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
		if b.Status.ValkeyVersion != valkeyVersion || int(b.Status.RDBFormat) != valkey.RDBFormat(valkeyVersion) {
			t.Errorf("the backup records Valkey %s, RDB format %d; want %s, %d", b.Status.ValkeyVersion, b.Status.RDBFormat, valkeyVersion, valkey.RDBFormat(valkeyVersion))
		}
		assertBackupHolds(t, store, b, func(i int, c valkeygo.Client) int64 {
			if source := fmt.Sprintf("pages-%d", i); b.Status.Shards[i].Source != source {
				t.Errorf("shard-%d was taken from %s, want %s", i, b.Status.Shards[i].Source, source)
			}
			if v, err := c.Do(ctx, c.B().Get().Key("page-0").Build()).ToString(); err != nil || v != b.Status.Shards[i].Source {
				t.Errorf("shard-%d's page-0 = %q (%v), want %s", i, v, err, b.Status.Shards[i].Source)
			}
			n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
			if err != nil || n != int64(100*(i+1)) {
				t.Errorf("shard-%d loads %d keys (%v), want %d", i, n, err, 100*(i+1))
			}
			return n
		})
		waitJobGone(t, b)

		recreateFromBackup(t, key, b.Name, func(c *cachev2.Cache) { c.Spec = cache.Spec })
		restored := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
		assertRestored(t, restored, 600)
		for i, pod := range cachePods(t, key) {
			c := node(t, &pod)
			if n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || n != int64(100*(i+1)) {
				t.Errorf("restored %s holds %d keys (%v), want %d", pod.Name, n, err, 100*(i+1))
			}
			if v, err := c.Do(ctx, c.B().Get().Key("page-0").Build()).ToString(); err != nil || v != pod.Name {
				t.Errorf("restored %s's page-0 = %q (%v), want %s", pod.Name, v, err, pod.Name)
			}
		}
	})
}

// TestABackupOfACacheWithAuthIsTakenAsTheBackupUserAndRestored: the backup's Job speaks to a
// server that refuses clients without credentials as the backup user, which may read no key one
// by one; a Cache with auth restored from it is checked against the backup by the operator, as
// its own user; the application reads every key back with the restored Cache's own password.
func TestABackupOfACacheWithAuthIsTakenAsTheBackupUserAndRestored(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "")
	ctx := context.Background()
	namespace := newNamespace(t)
	store := newBackupStore(t, namespace)
	spec := cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: valkeyVersion,
		Memory: resource.MustParse("64Mi"), Auth: &cachev2.Auth{}}
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "private"}, Spec: spec}
	if err := admin.Create(ctx, cache); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cache)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	password := func() string { return string(appSecret(t, namespace, "private-auth").Data[resources.AppPasswordKey]) }
	app, err := connectAs(t, cachePods(t, key)[0].Status.PodIP, cachev2.AppUser, password())
	if err != nil {
		t.Fatal(err)
	}
	const keys = 200
	for i := range keys {
		if err := app.Do(ctx, app.B().Set().Key(fmt.Sprint("private-", i)).Value(fmt.Sprint(i)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}

	b := waitBackup(t, newBackup(t, namespace, "private-nightly", key.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
	if b.Status.Keys != keys {
		t.Errorf("the backup holds %d keys, want %d", b.Status.Keys, keys)
	}
	waitJobGone(t, b)

	recreateFromBackup(t, key, b.Name, func(c *cachev2.Cache) { c.Spec = spec })
	assertRestored(t, waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute), keys)
	app, err = connectAs(t, cachePods(t, key)[0].Status.PodIP, cachev2.AppUser, password())
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if v, err := app.Do(ctx, app.B().Get().Key(fmt.Sprint("private-", i)).Build()).ToString(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("restored private-%d = %q (%v)", i, v, err)
		}
	}
}

// assertBackupMetrics checks what the operator exports of a Cache's latest backup, completed.
func assertBackupMetrics(t *testing.T, operator *testenv.Operator, b *cachev1alpha1.CacheBackup) {
	t.Helper()
	families := operator.Metrics(t)
	labels := map[string]string{"namespace": b.Namespace, "cache": b.Spec.CacheName}
	for name, want := range map[string]float64{
		"cache_operator_backup_last_success_timestamp_seconds": float64(b.Status.CompletionTime.Unix()),
		"cache_operator_backup_last_bytes":                     float64(b.Status.Bytes),
		"cache_operator_backup_last_duration_seconds":          b.Status.CompletionTime.Sub(b.Status.StartTime.Time).Seconds(),
	} {
		if got := testenv.Sum(families, name, labels); got != want {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
	}
	if got := testenv.Sum(families, "cache_operator_backups", map[string]string{"phase": "Completed"}); got < 1 {
		t.Errorf("cache_operator_backups{phase=Completed} = %v, want the completed backup counted", got)
	}
}

// readyPagesWithStore makes a namespace with a backup store and a Ready Standalone Cache of 3
// nodes, "pages": what most backup tests start from.
func readyPagesWithStore(t *testing.T) (string, *backupStore, *cachev2.Cache) {
	t.Helper()
	namespace := newNamespace(t)
	store := newBackupStore(t, namespace)
	cache := newCache(t, namespace, "pages")
	waitReadyAs(t, client.ObjectKeyFromObject(cache), metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	return namespace, store, cache
}

// recreateFromBackup deletes the Cache, waits until its pods are gone, and creates it again with
// the same name, restored from the backup, with the spec edit gives it.
func recreateFromBackup(t *testing.T, key client.ObjectKey, backupName string, edit func(*cachev2.Cache)) {
	t.Helper()
	ctx := context.Background()
	if err := admin.Delete(ctx, &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the Cache and its pods gone", func() (bool, string) {
		_, err := getCache(t, key)
		pods := cachePods(t, key)
		return isNotFound(err) && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
	c := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	edit(c)
	c.Spec.RestoreFrom = &cachev2.RestoreSource{Backup: backupName}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// assertRestored checks that a restored Cache says so, with the backup's keys, and that its
// restore's ConfigMap is gone, so that a node made later starts empty.
func assertRestored(t *testing.T, c *cachev2.Cache, keys int) {
	t.Helper()
	restored := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionRestored)
	if restored == nil || restored.Status != metav1.ConditionTrue || restored.Reason != cachev2.ReasonRestoreVerified ||
		!strings.Contains(restored.Message, fmt.Sprintf(" %d keys", keys)) {
		t.Errorf("the restored Cache's Restored condition is %+v, want True %s with %d keys", restored, cachev2.ReasonRestoreVerified, keys)
	}
	testenv.WaitFor(t, time.Minute, "the restore's ConfigMap removed", func() (bool, string) {
		err := admin.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: resources.RestoreConfigMapName(c)}, &corev1.ConfigMap{})
		return isNotFound(err), fmt.Sprint(err)
	})
}

// A backup that cannot complete fails with the reason, never stays Running, and leaves nothing
// in the bucket that a restore could take for a backup: its Cache missing, the bucket's
// credentials wrong or missing, the bucket missing; and a backup whose Job is deleted while the
// operator is down fails as lost once the operator is back. A backup running while the operator
// is killed completes under the next one.
func TestABackupThatCannotCompleteFailsWithTheReason(t *testing.T) {
	runBeside(t, 1)
	operator := startOperator(t, "a", "")
	namespace, store, cache := readyPagesWithStore(t)
	ctx := context.Background()
	wrongKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wrong-credentials", Namespace: namespace},
		StringData: map[string]string{cachev1alpha1.SecretKeyAccessKeyID: store.s3.AccessKey, cachev1alpha1.SecretKeySecretAccessKey: "not-the-secret"}}
	if err := admin.Create(ctx, wrongKey); err != nil {
		t.Fatal(err)
	}
	at := func(edit func(*cachev1alpha1.BucketLocation)) cachev1alpha1.BucketLocation {
		l := store.location
		edit(&l)
		return l
	}
	cases := []struct {
		name, cache string
		location    cachev1alpha1.BucketLocation
		reason      string
		says        string
	}{
		{"no-cache", "doomed", store.location, cachev1alpha1.ReasonCacheNotFound, "does not exist"},
		{"wrong-secret", cache.Name, at(func(l *cachev1alpha1.BucketLocation) { l.CredentialsSecret = wrongKey.Name }),
			cachev1alpha1.ReasonBackupFailed, "SignatureDoesNotMatch"},
		{"no-secret", cache.Name, at(func(l *cachev1alpha1.BucketLocation) { l.CredentialsSecret = "missing" }),
			cachev1alpha1.ReasonBackupFailed, `CreateContainerConfigError: secret "missing" not found`},
		{"no-bucket", cache.Name, at(func(l *cachev1alpha1.BucketLocation) { l.Bucket = "no-such-bucket" }),
			cachev1alpha1.ReasonBackupFailed, "NoSuchBucket"},
	}
	// A backup naming no Cache is refused at admission; one whose Cache goes after it was made
	// fails.
	typo := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "typo"},
		Spec: cachev1alpha1.CacheBackupSpec{CacheName: "pagse", Storage: store.location}}
	if err := admin.Create(ctx, typo); err == nil || !strings.Contains(err.Error(), "Cache pagse does not exist in namespace "+namespace) {
		t.Errorf("a backup of no Cache was admitted (%v); want it refused, naming the Cache", err)
	}
	doomed := newOneNodeCache(t, namespace, "doomed")
	for _, c := range cases {
		newBackup(t, namespace, c.name, c.cache, c.location)
	}
	if err := admin.Delete(ctx, doomed); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		b := waitBackup(t, client.ObjectKey{Namespace: namespace, Name: c.name}, cachev1alpha1.BackupFailed, 2*time.Minute)
		complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete)
		if complete == nil || complete.Status != metav1.ConditionFalse || complete.Reason != c.reason || !strings.Contains(complete.Message, c.says) {
			t.Errorf("%s: %s; want reason %s saying %q", c.name, describeBackup(b), c.reason, c.says)
		}
		if b.Status.CompletionTime == nil {
			t.Errorf("%s failed with no completion time", c.name)
		}
	}
	if names := store.objects(t, ""); len(names) != 0 {
		t.Errorf("the failed backups left %q in the bucket", names)
	}

	// Killed while a backup runs: the Job goes on, and the next operator records how it ended.
	// With the operator down, a Job deleted before it ended (here one whose pod waits for its
	// Secret) is a lost backup.
	running := newBackup(t, namespace, "across-a-crash", cache.Name, store.location)
	lost := newBackup(t, namespace, "job-deleted", cache.Name, at(func(l *cachev1alpha1.BucketLocation) { l.CredentialsSecret = "missing" }))
	waitBackup(t, running, cachev1alpha1.BackupRunning, time.Minute)
	lostBackup := waitBackup(t, lost, cachev1alpha1.BackupRunning, time.Minute)
	operator.Stop(t, syscall.SIGKILL)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: resources.BackupJobName(lostBackup)}}
	if err := admin.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the deleted Job gone", func() (bool, string) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(job), job)
		return isNotFound(err), fmt.Sprintf("%v, finalizers %v", err, job.Finalizers)
	})
	startOperator(t, "b", "")
	b := waitBackup(t, running, cachev1alpha1.BackupCompleted, 2*time.Minute)
	assertBackupHolds(t, store, b, func(int, valkeygo.Client) int64 { return 0 })
	b = waitBackup(t, lost, cachev1alpha1.BackupFailed, time.Minute)
	if complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete); complete == nil || complete.Reason != cachev1alpha1.ReasonJobLost {
		t.Errorf("the backup whose Job was deleted: %s; want reason %s", describeBackup(b), cachev1alpha1.ReasonJobLost)
	}
}

// A restore that cannot give every node its data never makes the Cache Ready: a backup that
// does not exist (yet) holds the Cache back; one with other shards than the Cache is refused and
// no pod is made; one whose data is corrupt in the bucket fails the node's init step, which says
// why, and the Cache is not Ready.
func TestARestoreThatCannotBeWholeIsNeverReady(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "")
	namespace, store, cache := readyPagesWithStore(t)
	key := client.ObjectKeyFromObject(cache)
	for _, pod := range cachePods(t, key) {
		c := node(t, &pod)
		if err := c.Do(context.Background(), c.B().Set().Key("page").Value(pod.Name).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	b := waitBackup(t, newBackup(t, namespace, "pages-nightly", key.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)

	restored := func(name, backup string, shards int32) client.ObjectKey {
		c := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: cache.Spec}
		c.Spec.Shards = shards
		c.Spec.RestoreFrom = &cachev2.RestoreSource{Backup: backup}
		if err := admin.Create(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		return client.ObjectKeyFromObject(c)
	}
	waiting := restored("waiting", "not-yet", 3)
	refused := restored("refused", b.Name, 2)
	// shard-1's RDB, changed in the bucket after the backup: its digest no longer matches.
	object := filepath.Join(store.s3.Dir, backupBucket, b.Status.Shards[1].Object)
	data, err := os.ReadFile(object)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xFF
	if err := os.WriteFile(object, data, 0o600); err != nil {
		t.Fatal(err)
	}
	corrupt := restored("corrupt", b.Name, 3)

	for _, c := range []struct {
		key    client.ObjectKey
		reason string
		says   string
	}{
		{waiting, cachev2.ReasonRestoring, "CacheBackup not-yet, which does not exist"},
		{refused, cachev2.ReasonRestoreRefused, "holds 3 shards and this Cache has 2"},
		{corrupt, cachev2.ReasonRestoreFailed, "pod corrupt-1 cannot fetch its shard"},
	} {
		got := waitReadyAs(t, c.key, metav1.ConditionFalse, c.reason, 2*time.Minute)
		if ready := meta.FindStatusCondition(got.Status.Conditions, cachev2.ConditionReady); !strings.Contains(ready.Message, c.says) {
			t.Errorf("%s: Ready says %q, want it to say %q", c.key.Name, ready.Message, c.says)
		}
	}
	if ready := meta.FindStatusCondition(waitReadyAs(t, corrupt, metav1.ConditionFalse, cachev2.ReasonRestoreFailed, time.Minute).Status.Conditions,
		cachev2.ConditionReady); !strings.Contains(ready.Message, "the backup is corrupt") {
		t.Errorf("the corrupt backup's failure says %q, want the reason", ready.Message)
	}
	for _, k := range []client.ObjectKey{waiting, refused} {
		if pods := cachePods(t, k); len(pods) != 0 {
			t.Errorf("%s has %d pods before its restore can start", k.Name, len(pods))
		}
	}
}

// A backup runs in its Job, never in one of the operator's workers: with a single worker, while
// a backup's server stops sending (SIGSTOP), another Cache is made and becomes Ready; the
// stalled backup then fails, saying so, and leaves nothing in the bucket.
func TestABackupNeverHoldsAWorker(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", "--max-concurrent-reconciles=1", "--backup-stall-timeout=60s")
	namespace, store, cache := readyPagesWithStore(t)
	delaySnapshots(t, client.ObjectKeyFromObject(cache))

	key := newBackup(t, namespace, "stalled", cache.Name, store.location)
	source := waitBackup(t, key, cachev1alpha1.BackupRunning, time.Minute).Status.Shards[0].Source
	// Stopped once the agent has asked for its snapshot, and before it sends it, the server never
	// sends this one.
	waitSnapshotAsked(t, client.ObjectKeyFromObject(cache), source)
	if err := signalServer(namespace, source, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = signalServer(namespace, source, syscall.SIGCONT) })

	other := newOneNodeCache(t, namespace, "other")
	waitReadyAs(t, client.ObjectKeyFromObject(other), metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	b := &cachev1alpha1.CacheBackup{}
	if err := admin.Get(context.Background(), key, b); err != nil || b.Status.Phase != cachev1alpha1.BackupRunning {
		t.Fatalf("another Cache became Ready only once the backup had ended (%s, %v): the backup held the worker", describeBackup(b), err)
	}

	b = waitBackup(t, key, cachev1alpha1.BackupFailed, 3*time.Minute)
	if complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete); complete == nil ||
		complete.Reason != cachev1alpha1.ReasonBackupFailed || !strings.Contains(complete.Message, "sent nothing for 1m0s") {
		t.Errorf("the stalled backup: %s; want %s saying the server sent nothing", describeBackup(b), cachev1alpha1.ReasonBackupFailed)
	}
	if names := store.objects(t, ""); len(names) != 0 {
		t.Errorf("the failed backup left %q in the bucket", names)
	}
}

// delaySnapshots has the Cache's servers wait 30 s before they send a snapshot, where the
// operator starts them with no wait (repl-diskless-sync-delay 0): a test can then stop or remove
// a server between the agent's asking and the server's sending, a fault no real part produces on
// demand. A server waiting keeps sending the agent a newline every second, so the backup does not
// stall meanwhile.
func delaySnapshots(t *testing.T, key client.ObjectKey) {
	t.Helper()
	for _, pod := range cachePods(t, key) {
		c := node(t, &pod)
		if err := c.Do(context.Background(), c.B().Arbitrary("CONFIG", "SET").Args("repl-diskless-sync-delay", "30").Build()).Error(); err != nil {
			t.Fatalf("%s: %v", pod.Name, err)
		}
	}
}

// waitSnapshotAsked waits until the backup's agent has asked the pod's server for its snapshot:
// the server counts it as a replica.
func waitSnapshotAsked(t *testing.T, key client.ObjectKey, source string) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, "the snapshot of "+source+" asked for", func() (bool, string) {
		pods := cachePods(t, key)
		i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == source })
		if i < 0 {
			return false, "no source pod"
		}
		replicas := testenv.ValkeyInfo(t, node(t, &pods[i]), "replication", "connected_slaves")
		return replicas == "1", "connected_slaves:" + replicas
	})
}

// A backup whose source pod is deleted while its snapshot is under way (asked for, not yet sent:
// delaySnapshots) fails, naming the shard, and leaves nothing in the bucket; a backup taken once
// the pod is replaced completes.
func TestABackupWhoseSourceIsReplacedFails(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "")
	namespace, store, cache := readyPagesWithStore(t)
	key := client.ObjectKeyFromObject(cache)
	delaySnapshots(t, key)

	first := newBackup(t, namespace, "replaced", cache.Name, store.location)
	source := waitBackup(t, first, cachev1alpha1.BackupRunning, time.Minute).Status.Shards[0]
	waitSnapshotAsked(t, key, source.Source)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: source.Source}}
	if err := admin.Delete(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	b := waitBackup(t, first, cachev1alpha1.BackupFailed, 2*time.Minute)
	if complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete); complete == nil ||
		complete.Reason != cachev1alpha1.ReasonBackupFailed || !strings.Contains(complete.Message, "shard "+source.Name+" from "+source.Source) {
		t.Errorf("the backup whose source went: %s; want %s naming %s", describeBackup(b), cachev1alpha1.ReasonBackupFailed, source.Name)
	}
	if names := store.objects(t, ""); len(names) != 0 {
		t.Errorf("the failed backup left %q in the bucket", names)
	}

	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	again := waitBackup(t, newBackup(t, namespace, "again", cache.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
	assertBackupHolds(t, store, again, func(int, valkeygo.Client) int64 { return 0 })
}

// TestMeasureBackupAndRestore is the benchmark of a backup and a restore (docs/benchmark.md):
// a 3×1 Cluster with 200,000 keys of 100 bytes is backed up, deleted and restored, each timed
// as a client sees it, from the object's creation to its Completed phase, or to the restored
// Cache's Ready. Each run's numbers are logged; CACHE_OPERATOR_MEASURE=N runs it N times.
func TestMeasureBackupAndRestore(t *testing.T) {
	runs := measureRuns(t)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	var backups, restores []time.Duration
	for run := 1; run <= runs; run++ {
		t.Run(fmt.Sprintf("run %d", run), func(t *testing.T) {
			namespace := newNamespace(t)
			store := newBackupStore(t, namespace)
			key := newClusterCache(t, namespace, "sessions", 3, 1)
			cache := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			smallData.load(t, clusterClient(t, key))

			ctx, stop := context.WithCancel(context.Background())
			peak := samplePeakMemory(ctx, operator, namespace, "bench-backup")
			start := time.Now()
			b := waitBackup(t, newBackup(t, namespace, "bench", key.Name, store.location), cachev1alpha1.BackupCompleted, 5*time.Minute)
			backups = append(backups, time.Since(start))
			stop()
			if b.Status.Keys != int64(smallData.keys) {
				t.Fatalf("the backup holds %d keys, want %d", b.Status.Keys, smallData.keys)
			}

			recreateFromBackup(t, key, b.Name, func(c *cachev2.Cache) { c.Spec = cache.Spec })
			start = time.Now()
			restored := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 5*time.Minute)
			restores = append(restores, time.Since(start))
			assertRestored(t, restored, smallData.keys)
			operatorMiB, agentMiB := peak.read()
			t.Logf("run %d: backup of %d keys (%d bytes) %s; restore to Ready %s; peak memory: operator %.0f MiB, backup agent %.0f MiB", run, b.Status.Keys, b.Status.Bytes,
				backups[len(backups)-1].Round(100*time.Millisecond), restores[len(restores)-1].Round(100*time.Millisecond), operatorMiB, agentMiB)
		})
	}
	slices.Sort(backups)
	slices.Sort(restores)
	if len(backups) == runs && len(restores) == runs {
		t.Logf("backup: median %s, worst %s; restore: median %s, worst %s (%d runs)", backups[runs/2].Round(100*time.Millisecond),
			backups[runs-1].Round(100*time.Millisecond), restores[runs/2].Round(100*time.Millisecond), restores[runs-1].Round(100*time.Millisecond), runs)
	}
}

// A backup made elsewhere (here another namespace, whose backup and Cache are gone by then:
// deleting a backup whose policy is Retain leaves its objects) is imported by its path: a Job
// reads its manifest, and the imported backup is Completed with its shards, for a new Cache to
// restore from, every key back. A path with no manifest fails, saying so.
func TestARestoreFromABackupMadeElsewhere(t *testing.T) {
	runBeside(t, 2)
	startOperator(t, "a", "")
	ctx := context.Background()
	origin, store, cache := readyPagesWithStore(t)
	key := client.ObjectKeyFromObject(cache)
	for _, pod := range cachePods(t, key) {
		c := node(t, &pod)
		if err := c.Do(ctx, c.B().Set().Key("page-of").Value(pod.Name).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	made := waitBackup(t, newBackup(t, origin, "pages-weekly", key.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
	if err := admin.Delete(ctx, made); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, cache); err != nil {
		t.Fatal(err)
	}
	backupPath := path.Join(origin, key.Name, made.Name)
	testenv.WaitFor(t, time.Minute, "the backup deleted, its objects kept", func() (bool, string) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(made), &cachev1alpha1.CacheBackup{})
		names := store.objects(t, path.Join(store.location.Prefix, backupPath)+"/")
		return isNotFound(err) && len(names) == backupShards+1, fmt.Sprintf("%v, objects %q", err, names)
	})

	elsewhere := newNamespace(t)
	if err := admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: store.location.CredentialsSecret, Namespace: elsewhere},
		StringData: map[string]string{cachev1alpha1.SecretKeyAccessKeyID: store.s3.AccessKey, cachev1alpha1.SecretKeySecretAccessKey: store.s3.SecretKey}}); err != nil {
		t.Fatal(err)
	}
	importBackup := func(name, importPath string) client.ObjectKey {
		b := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: elsewhere},
			Spec: cachev1alpha1.CacheBackupSpec{ImportPath: importPath, Storage: store.location}}
		if err := admin.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		return client.ObjectKeyFromObject(b)
	}
	missing := importBackup("no-such-backup", path.Join(origin, key.Name, "never-made"))
	imported := waitBackup(t, importBackup("from-origin", backupPath), cachev1alpha1.BackupCompleted, time.Minute)
	if imported.Status.CacheMode != string(cachev2.ModeStandalone) || imported.Status.ValkeyVersion != made.Status.ValkeyVersion ||
		imported.Status.Keys != made.Status.Keys || len(imported.Status.Shards) != backupShards || imported.Status.Shards[2].Object != made.Status.Shards[2].Object ||
		imported.Status.Shards[2].Keys != made.Status.Shards[2].Keys {
		t.Fatalf("imported: %+v\nmade: %+v", imported.Status, made.Status)
	}
	failed := waitBackup(t, missing, cachev1alpha1.BackupFailed, time.Minute)
	if complete := meta.FindStatusCondition(failed.Status.Conditions, cachev1alpha1.ConditionComplete); complete == nil ||
		!strings.Contains(complete.Message, "manifest") {
		t.Errorf("importing a path with no backup: %s; want Failed, naming the manifest", describeBackup(failed))
	}

	restored := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: "pages"}, Spec: cache.Spec}
	restored.Spec.RestoreFrom = &cachev2.RestoreSource{Backup: imported.Name}
	if err := admin.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	restored = waitReadyAs(t, client.ObjectKeyFromObject(restored), metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	assertRestored(t, restored, backupShards)
	for _, pod := range cachePods(t, client.ObjectKeyFromObject(restored)) {
		c := node(t, &pod)
		if v, err := c.Do(ctx, c.B().Get().Key("page-of").Build()).ToString(); err != nil || v != pod.Name {
			t.Errorf("restored %s's page-of = %q (%v), want %s", pod.Name, v, err, pod.Name)
		}
	}
}

// A Replicated Cache is backed up from its replica, not its primary, with every write the replica
// acknowledged (WAIT 1); the backup restores into a new Replicated Cache, whose first primary
// takes it and whose replicas copy it, and into a Standalone Cache of one node; and that
// Standalone Cache's backup restores back into a Replicated Cache. Every key comes through each
// move with its value and TTL.
func TestAReplicatedCacheIsBackedUpFromAReplicaAndRestoresAcrossModes(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ctx := context.Background()
	ns := newNamespace(t)
	store := newBackupStore(t, ns)
	source := newReplicatedCache(t, ns, "jobs", 1, nil)
	primary := waitPrimaryServed(t, source, "")
	const keys = 300
	v := node(t, primary)
	cmds := make(valkeygo.Commands, 0, keys+2)
	for i := range keys {
		cmds = append(cmds, v.B().Set().Key(fmt.Sprint("job-", i)).Value(fmt.Sprint(i)).Build())
	}
	cmds = append(cmds, v.B().Expire().Key("job-7").Seconds(3600).Build(), v.B().Wait().Numreplicas(1).Timeout(10000).Build())
	results := v.DoMulti(ctx, cmds...)
	for _, res := range results {
		if err := res.Error(); err != nil {
			t.Fatal(err)
		}
	}
	if acked, _ := results[len(results)-1].AsInt64(); acked != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged the writes", acked)
	}

	b := waitBackup(t, newBackup(t, ns, "jobs-nightly", source.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
	if len(b.Status.Shards) != 1 || b.Status.Shards[0].Source == primary.Name || b.Status.CacheMode != string(cachev2.ModeReplicated) ||
		b.Status.Keys != keys || b.Status.Shards[0].Memory <= 0 {
		t.Fatalf("the backup's status is %+v; want one shard of %d keys from the replica (the primary is %s), with its memory, of a Replicated Cache",
			b.Status, keys, primary.Name)
	}
	// Each restored Cache holds every key, its value and TTL, on every server.
	assertJobs := func(key client.ObjectKey, want int) {
		t.Helper()
		for _, pod := range cachePods(t, key) {
			c := node(t, &pod)
			if n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || n != int64(want) {
				t.Errorf("restored %s holds %d keys (%v), want %d", pod.Name, n, err, want)
			}
			for _, i := range []int{0, 7, keys - 1} {
				if got, err := c.Do(ctx, c.B().Get().Key(fmt.Sprint("job-", i)).Build()).ToString(); err != nil || got != fmt.Sprint(i) {
					t.Errorf("restored %s: job-%d = %q (%v)", pod.Name, i, got, err)
				}
			}
			if ttl, err := c.Do(ctx, c.B().Ttl().Key("job-7").Build()).AsInt64(); err != nil || ttl <= 0 || ttl > 3600 {
				t.Errorf("restored %s: job-7's TTL is %d (%v), want up to an hour", pod.Name, ttl, err)
			}
		}
	}
	restoreInto := func(name string, spec cachev2.CacheSpec, backupName string) client.ObjectKey {
		t.Helper()
		spec.RestoreFrom = &cachev2.RestoreSource{Backup: backupName}
		c := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
		if err := admin.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		return client.ObjectKeyFromObject(c)
	}
	replicated := cachev2.CacheSpec{Mode: cachev2.ModeReplicated, Shards: 1, ReplicasPerShard: ptr.To[int32](2), Version: valkeyVersion, Memory: resource.MustParse("64Mi")}
	standalone := cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: valkeyVersion, Memory: resource.MustParse("64Mi")}

	// Into a new Replicated Cache: its first node takes the backup and becomes the primary.
	copied := restoreInto("jobs-copy", replicated, b.Name)
	if first := waitPrimaryServed(t, copied, ""); first.Name != "jobs-copy-0" {
		t.Errorf("the restored Cache's first primary is %s, want jobs-copy-0, which took the backup", first.Name)
	}
	c, err := getCache(t, copied)
	if err != nil {
		t.Fatal(err)
	}
	assertRestored(t, c, keys)
	assertJobs(copied, keys)

	// Into a Standalone Cache of one node, and its backup back into a Replicated Cache.
	single := restoreInto("jobs-single", standalone, b.Name)
	assertRestored(t, waitReadyAs(t, single, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute), keys)
	assertJobs(single, keys)
	back := waitBackup(t, newBackup(t, ns, "single-nightly", single.Name, store.location), cachev1alpha1.BackupCompleted, 2*time.Minute)
	if back.Status.CacheMode != string(cachev2.ModeStandalone) || back.Status.Keys != keys {
		t.Fatalf("the Standalone Cache's backup: %+v; want %d keys of a Standalone Cache", back.Status, keys)
	}
	oneReplica := replicated
	oneReplica.ReplicasPerShard = ptr.To[int32](1)
	again := restoreInto("jobs-again", oneReplica, back.Name)
	waitPrimaryServed(t, again, "")
	if c, err = getCache(t, again); err != nil {
		t.Fatal(err)
	}
	assertRestored(t, c, keys)
	assertJobs(again, keys)
}
