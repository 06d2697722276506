//go:build integration

package bucket

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

// newBucket starts an S3 server with a bucket named backups, and returns its location and root
// credentials.
func newBucket(t *testing.T) (Location, Credentials) {
	t.Helper()
	s3 := testenv.StartS3(t, testenv.LoopbackIPs(1)[0], 7070)
	s3.MakeBucket(t, "backups")
	return Location{Endpoint: s3.Endpoint, Insecure: true, Bucket: "backups", Prefix: "team-a/caches"},
		Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey}
}

// An object of a size not known ahead, larger than a part, is stored as it streams in and reads
// back the same; it is listed under the location's prefix, and gone once deleted.
func TestAnObjectStreamsInAndOutWhole(t *testing.T) {
	loc, creds := newBucket(t)
	b, err := Open(loc, creds)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const size = 2*PartSize + 12345
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(data)
	// A reader that does not say its size, as a snapshot's stream does not.
	n, err := b.Put(ctx, "orders/shard-0.rdb", io.MultiReader(bytes.NewReader(data)))
	if err != nil || n != size {
		t.Fatalf("Put: %d bytes, %v; want %d", n, err, size)
	}
	if _, err := b.Put(ctx, "orders/manifest.json", strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}

	r, err := b.Get(ctx, "orders/shard-0.rdb")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	read, err := io.Copy(h, r)
	_ = r.Close()
	if err != nil || read != size || !bytes.Equal(h.Sum(nil), sha256Of(data)) {
		t.Errorf("Get read %d bytes (%v), digest equal %v; want the %d bytes written", read, err, bytes.Equal(h.Sum(nil), sha256Of(data)), size)
	}

	if names, err := b.List(ctx, "orders/"); err != nil || !slices.Equal(names, []string{"orders/manifest.json", "orders/shard-0.rdb"}) {
		t.Errorf("List = %q, %v", names, err)
	}
	if err := b.Delete(ctx, "orders/shard-0.rdb", "orders/manifest.json", "orders/never-written"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if names, err := b.List(ctx, "orders/"); err != nil || len(names) != 0 {
		t.Errorf("after Delete, List = %q, %v", names, err)
	}
	if _, err := b.Get(ctx, "orders/shard-0.rdb"); err == nil || !strings.Contains(err.Error(), "NoSuchKey") {
		t.Errorf("Get of a deleted object: %v; want NoSuchKey", err)
	}
}

// A wrong secret is refused, with the server's reason, and stores nothing.
func TestAWrongSecretIsRefusedAndStoresNothing(t *testing.T) {
	loc, creds := newBucket(t)
	wrong, err := Open(loc, Credentials{AccessKeyID: creds.AccessKeyID, SecretAccessKey: "not-the-secret"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := wrong.Put(ctx, "x.rdb", strings.NewReader("data")); err == nil || !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
		t.Errorf("Put with a wrong secret: %v; want SignatureDoesNotMatch", err)
	}
	right, err := Open(loc, creds)
	if err != nil {
		t.Fatal(err)
	}
	if names, err := right.List(ctx, ""); err != nil || len(names) != 0 {
		t.Errorf("after a refused Put the bucket lists %q, %v", names, err)
	}
}

func sha256Of(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}
