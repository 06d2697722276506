// Package backup takes a backup of a Cache's servers into a bucket: each shard's snapshot
// (package snapshot) streamed into an object of its own (package bucket), side by side, and then
// the manifest that says what the backup holds. The manifest is written last and only when every
// shard's object is whole, so a backup without one is never complete; a backup that fails deletes
// the objects it wrote. For a restore, Fetch brings a shard's copy back, checked against the
// manifest, as the RDB its new server loads at start. For a backup already stored, Delete removes
// its objects, and RunInspect reports what the manifest of one made elsewhere lists.
package backup

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"example.com/cache-operator/internal/bucket"
	"example.com/cache-operator/internal/snapshot"
	"example.com/cache-operator/internal/valkey"
)

// ManifestName is the name of a backup's manifest, under the backup's prefix.
const ManifestName = "manifest.json"

// Shard is one server to take a snapshot of: the replica of a Cluster's shard when it has one,
// so that its primary keeps serving, or a Standalone node.
type Shard struct {
	// Name is the shard's name in the backup, and its object's: "shard-0".
	Name string `json:"name"`
	// Source is the pod whose server the snapshot is taken from, and Addr that server's address.
	Source string `json:"source"`
	Addr   string `json:"-"`
	// Slots are the slots the shard serves, in a Cluster.
	Slots []valkey.SlotRange `json:"slots,omitempty"`
	// Memory is what the shard's data took on its server when the backup began, as the server
	// counts it against maxmemory (valkey.Dataset): a restore needs nodes that may hold as
	// much, or they would evict. Zero in a backup made before it was recorded.
	Memory int64 `json:"memory,omitempty"`
}

// ShardCopy is a shard as the backup holds it.
type ShardCopy struct {
	Shard
	// Object is the name of the shard's RDB in the bucket, under the location's prefix.
	Object string `json:"object"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Keys is how many keys the shard holds, as its RDB says (snapshot.ReadHead): a restore
	// checks its servers against it.
	Keys int64 `json:"keys"`
	// RDBFormat is the version of the RDB's format (snapshot.Head.Format). Zero in a backup
	// made before it was recorded.
	RDBFormat int `json:"rdbFormat,omitempty"`
}

// Manifest says what a backup holds; restores read it first.
type Manifest struct {
	// ValkeyVersion is the version of the servers the snapshots come from, as they report it
	// (the latest, if they differ): an RDB loads into a server of that version or a later one.
	ValkeyVersion string `json:"valkeyVersion"`
	// RDBFormat is the newest of the shards' RDB formats: a server loads the formats up to its
	// own only (11 for Valkey 8, 80 for Valkey 9). Zero in a backup made before it was recorded.
	RDBFormat int         `json:"rdbFormat,omitempty"`
	Started   time.Time   `json:"started"`
	Completed time.Time   `json:"completed"`
	Shards    []ShardCopy `json:"shards"`
}

// MaxParallelShards is how many shards a backup copies at once: each upload holds a part
// (bucket.PartSize) in memory, so this bounds a backup's memory whatever the number of shards.
const MaxParallelShards = 4

// Take takes a backup of the shards into the bucket, under the given prefix, and returns its
// manifest. Each shard's snapshot streams into its object as the server sends it, taken as from
// says (its Addr is each shard's). unmoved, if set, is asked once every object is whole and
// before the manifest is written whether the shards still are what the snapshots were taken of:
// an error fails the backup.
func Take(ctx context.Context, b *bucket.Bucket, prefix, valkeyVersion string, shards []Shard, from snapshot.Source, unmoved func(context.Context) error) (Manifest, error) {
	m := Manifest{ValkeyVersion: valkeyVersion, Started: time.Now().UTC()}
	copies := make([]ShardCopy, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	turns := make(chan struct{}, MaxParallelShards)
	for i, s := range shards {
		wg.Go(func() {
			turns <- struct{}{}
			defer func() { <-turns }()
			copies[i], errs[i] = copyShard(ctx, b, prefix, s, from)
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil && unmoved != nil {
		err = unmoved(ctx)
	}
	if err != nil {
		return m, errors.Join(err, forget(b, prefix, copies))
	}
	m.Shards, m.Completed = copies, time.Now().UTC()
	for _, c := range copies {
		m.RDBFormat = max(m.RDBFormat, c.RDBFormat)
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err == nil {
		_, err = b.Put(ctx, path.Join(prefix, ManifestName), strings.NewReader(string(manifest)))
	}
	if err != nil {
		return m, errors.Join(fmt.Errorf("writing the manifest: %w", err), forget(b, prefix, copies))
	}
	return m, nil
}

// copyShard streams one shard's snapshot into its object, counting, hashing and reading its
// key count on the way.
func copyShard(ctx context.Context, b *bucket.Bucket, prefix string, s Shard, from snapshot.Source) (ShardCopy, error) {
	c := ShardCopy{Shard: s, Object: path.Join(prefix, s.Name+".rdb")}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, w := io.Pipe()
	hash := sha256.New()
	counting := headReader()
	var taken int64
	var takeErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		from.Addr = s.Addr
		taken, takeErr = from.Take(ctx, io.MultiWriter(w, hash, counting))
		// A snapshot that failed fails the upload, which is then aborted: no object is left.
		_ = w.CloseWithError(takeErr)
	}()
	stored, err := b.Put(ctx, c.Object, r)
	if err != nil {
		cancel()
		_ = r.CloseWithError(err)
	}
	<-done
	if err != nil && errors.Is(takeErr, context.Canceled) && parent.Err() == nil {
		// The snapshot stopped because the upload failed, and says only "canceled": the
		// bucket's error (wrong credentials, no such bucket) is the cause, and told first.
		takeErr = nil
	}
	head, keysErr := counting.result()
	switch {
	case takeErr != nil:
		return c, fmt.Errorf("shard %s from %s: %w", s.Name, s.Source, takeErr)
	case err != nil:
		return c, fmt.Errorf("shard %s: %w", s.Name, err)
	case stored != taken:
		return c, fmt.Errorf("shard %s: the bucket stored %d bytes of %d", s.Name, stored, taken)
	case keysErr != nil:
		return c, fmt.Errorf("shard %s from %s: %w", s.Name, s.Source, keysErr)
	}
	c.Bytes, c.SHA256, c.Keys, c.RDBFormat = taken, hex.EncodeToString(hash.Sum(nil)), head.Keys, head.Format
	return c, nil
}

// head reads the head of an RDB written to it, and takes the rest unread.
type head struct {
	w    *io.PipeWriter
	done chan struct{}
	head snapshot.Head
	err  error
}

func headReader() *head {
	r, w := io.Pipe()
	h := &head{w: w, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.head, h.err = snapshot.ReadHead(bufio.NewReader(r))
		_, _ = io.Copy(io.Discard, r)
	}()
	return h
}

func (h *head) Write(p []byte) (int, error) { return h.w.Write(p) }

// result is the head once the whole RDB was written, with the key count of database 0 (none if
// its first database is another): the only one a Cluster has and the one a Standalone Cache's
// clients use unless they SELECT another.
func (h *head) result() (snapshot.Head, error) {
	_ = h.w.Close()
	<-h.done
	if h.err != nil {
		return snapshot.Head{}, h.err
	}
	if h.head.DB != 0 {
		h.head.Keys = 0
	}
	return h.head, nil
}

// forget deletes the objects of a backup that failed, with a context of its own: the backup's
// may be what ended.
func forget(b *bucket.Bucket, prefix string, copies []ShardCopy) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := []string{path.Join(prefix, ManifestName)}
	for _, c := range copies {
		if c.Object != "" {
			names = append(names, c.Object)
		}
	}
	if err := b.Delete(ctx, names...); err != nil {
		return fmt.Errorf("deleting what the failed backup wrote: %w", err)
	}
	return nil
}
