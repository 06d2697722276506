package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"example.com/cache-operator/internal/bucket"
)

// RDBName is the file a server loads its data from at start, in its data directory.
const RDBName = "dump.rdb"

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
	tmp, err := os.CreateTemp(dir, RDBName+".part-*")
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
	return os.Rename(tmp.Name(), filepath.Join(dir, RDBName))
}
