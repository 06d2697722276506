package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	"example.com/cache-operator/internal/bucket"
)

// RestoreRDB is the file a restore leaves in a node's data directory: the node's entrypoint
// makes it the RDB its server loads at its first start, and only then (resources.StatefulSet).
const RestoreRDB = "restore.rdb"

// restoredMark, in a node's data directory, says its restore is done: an init step that runs
// again (the pod's sandbox made anew) fetches nothing.
const restoredMark = ".restored"

// RestoreCommand is the operator binary's first argument that runs it as a restore's init step,
// in a Cache's pods, rather than as the operator.
const RestoreCommand = "restore"

// EnvRestorePlan is the environment variable the init step reads its RestorePlan from: the
// operator keeps the plan in a ConfigMap while the restore lasts, and removes it once every
// node holds its data, so that a pod made later (a replaced node) starts empty, as any new node.
const EnvRestorePlan = "RESTORE_PLAN"

// RestorePlan is where a Cache's nodes find the backup they start from.
type RestorePlan struct {
	Location bucket.Location `json:"location"`
	// Path is the backup's place under the location's prefix, where its manifest is.
	Path string `json:"path"`
}

// Encode is the plan as EnvRestorePlan holds it.
func (p RestorePlan) Encode() string {
	out, _ := json.Marshal(p) // strings and a bool: cannot fail
	return string(out)
}

// openBucket opens the bucket at loc with the credentials, and the CA bundle if any, that the
// agent's pod takes from the user's Secret.
func openBucket(loc bucket.Location) (*bucket.Bucket, error) {
	loc.CABundle = []byte(os.Getenv(EnvCABundle))
	return bucket.Open(loc, bucket.Credentials{AccessKeyID: os.Getenv(EnvAccessKeyID), SecretAccessKey: os.Getenv(EnvSecretAccessKey)})
}

// Fetch downloads a shard's copy into dir as the RDB its server loads at start, as a restore's
// init step does before the server starts. The copy must be whole: its size and digest those of
// the manifest; otherwise Fetch fails with the reason and leaves no RDB in dir, so that a
// server never starts with part of a shard's data and looks ready.
func Fetch(ctx context.Context, b *bucket.Bucket, shard ShardCopy, dir string) error {
	r, err := b.Get(ctx, shard.Object)
	if err != nil {
		return err
	}
	defer r.Close() //nolint:errcheck // read only
	tmp, err := os.CreateTemp(dir, RestoreRDB+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone already once renamed
	hash := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, hash), r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch digest := hex.EncodeToString(hash.Sum(nil)); {
	case err != nil:
		return fmt.Errorf("downloading %s: %w", shard.Object, err)
	case n != shard.Bytes:
		return fmt.Errorf("%s has %d bytes, its manifest says %d: the backup is not whole", shard.Object, n, shard.Bytes)
	case digest != shard.SHA256:
		return fmt.Errorf("%s's SHA-256 is %s, its manifest says %s: the backup is corrupt", shard.Object, digest, shard.SHA256)
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, RestoreRDB))
}

// RunRestore is a node's restore step: with a plan in the environment, it fetches the shard of
// the backup that its pod's ordinal names into the data directory; with none, or once done, it
// does nothing. A pod whose ordinal is past the backup's shards (a Cluster's replica) starts
// empty and gets its data from its primary. It returns the process's exit code; what it did, or
// why it failed, is written to --result-file too (the termination message).
func RunRestore(ctx context.Context, args []string) int {
	flags := flag.NewFlagSet(RestoreCommand, flag.ContinueOnError)
	dir := flags.String("dir", ".", "The node's data directory.")
	pod := flags.String("pod", "", "The pod's name, which ends in its ordinal.")
	resultFile := flags.String("result-file", "/dev/termination-log", "Where what was done is written.")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	message, err := restore(ctx, *dir, *pod)
	return report(RestoreCommand, *resultFile, message, err)
}

func restore(ctx context.Context, dir, pod string) (string, error) {
	encoded := os.Getenv(EnvRestorePlan)
	if encoded == "" {
		return "no restore pending: the node starts empty", nil
	}
	if _, err := os.Stat(filepath.Join(dir, restoredMark)); err == nil {
		return "restored already", nil
	}
	var plan RestorePlan
	if err := json.Unmarshal([]byte(encoded), &plan); err != nil {
		return "", fmt.Errorf("the restore plan in %s: %w", EnvRestorePlan, err)
	}
	ordinal, err := strconv.Atoi(pod[strings.LastIndexByte(pod, '-')+1:])
	if err != nil {
		return "", fmt.Errorf("pod %q does not end in an ordinal", pod)
	}
	b, err := openBucket(plan.Location)
	if err != nil {
		return "", err
	}
	m, err := ReadManifest(ctx, b, plan.Path)
	if err != nil {
		return "", err
	}
	if ordinal >= len(m.Shards) {
		return fmt.Sprintf("pod %s holds none of the backup's %d shards: it starts empty", pod, len(m.Shards)), nil
	}
	shard := m.Shards[ordinal]
	if err := Fetch(ctx, b, shard, dir); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, restoredMark), nil, 0o600); err != nil {
		return "", err
	}
	return fmt.Sprintf("fetched %s (%d bytes, %d keys) for pod %s", shard.Object, shard.Bytes, shard.Keys, pod), nil
}

// ReadManifest reads a backup's manifest. A backup without one is not complete, and is no
// backup to restore from.
func ReadManifest(ctx context.Context, b *bucket.Bucket, backupPath string) (Manifest, error) {
	var m Manifest
	r, err := b.Get(ctx, path.Join(backupPath, ManifestName))
	if err != nil {
		return m, fmt.Errorf("reading the backup's manifest (a backup without one is not complete): %w", err)
	}
	defer r.Close() //nolint:errcheck // read only
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return m, fmt.Errorf("reading the backup's manifest: %w", err)
	}
	if len(m.Shards) == 0 {
		return m, errors.New("the backup's manifest lists no shard")
	}
	return m, nil
}

// PlaceOf is where a backup's objects are: its bucket, and its path under the bucket's prefix,
// <namespace>/<cache>/<backup> for one taken here, or the path of an imported one.
func PlaceOf(b *cachev1alpha1.CacheBackup) (bucket.Location, string) {
	s := b.Spec.Storage
	backupPath := b.Spec.ImportPath
	if backupPath == "" {
		backupPath = path.Join(b.Namespace, b.Spec.CacheName, b.Name)
	}
	return bucket.Location{Endpoint: s.Endpoint, Insecure: s.Insecure, Region: s.Region, Bucket: s.Bucket, Prefix: s.Prefix}, backupPath
}
