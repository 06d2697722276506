package testenv

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is an S3-compatible server a test started: versitygw over a directory of its own.
type S3 struct {
	// Endpoint is the server's host:port, plain HTTP.
	Endpoint string
	// AccessKey and SecretKey are the credentials of its root account.
	AccessKey, SecretKey string
	// Dir is the directory it keeps the buckets in, one directory per bucket.
	Dir string
}

// StartS3 starts the toolchain's versitygw (hack/toolchain.sh versitygw) on ip:port, with a
// posix backend in a directory of the test's own, and waits until it accepts connections. It is
// killed when the test ends.
func StartS3(t testing.TB, ip string, port int) *S3 {
	t.Helper()
	s := &S3{Endpoint: net.JoinHostPort(ip, strconv.Itoa(port)), AccessKey: "cache-operator-test",
		SecretKey: "the-secret-of-the-test-bucket", Dir: t.TempDir()}
	startListening(t, t.TempDir(), s.Endpoint, "versitygw", "--port", s.Endpoint,
		"--access", s.AccessKey, "--secret", s.SecretKey, "posix", s.Dir)
	return s
}

// MakeBucket makes a bucket on the server, as its root account.
func (s *S3) MakeBucket(t testing.TB, name string) {
	t.Helper()
	admin, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("making bucket %s: %v", name, err)
	}
}
