// Package bucket keeps backups in an S3-compatible bucket, through minio-go: objects written as
// they stream in, of a size not known ahead (a multipart upload of PartSize parts, so that an
// upload holds one part in memory whatever the object's size, and one that fails is aborted,
// leaving no object), read back as a stream, listed and deleted, all under one prefix.
package bucket

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// PartSize is the size of each part of an upload: what an upload holds in memory, and, with S3's
// 10,000 parts, a bound on an object's size (156 GiB).
const PartSize = 16 << 20

// Location is where the objects are: the server, the bucket and the prefix of their names.
type Location struct {
	// Endpoint is the server's host, or host:port.
	Endpoint string `json:"endpoint"`
	// Insecure: plain HTTP rather than HTTPS.
	Insecure bool `json:"insecure,omitempty"`
	// Region is the bucket's region, if the server needs one.
	Region string `json:"region,omitempty"`
	Bucket string `json:"bucket"`
	// Prefix, if set, comes before every object's name, as a directory would.
	Prefix string `json:"prefix,omitempty"`
	// CABundle, if set, is PEM certificates trusted beside the system's, for a server whose
	// certificate a private CA signed. It travels apart from the rest, with the credentials.
	CABundle []byte `json:"-"`
}

// Credentials are an access key and its secret.
type Credentials struct {
	AccessKeyID, SecretAccessKey string
}

// Bucket is a connection to one Location.
type Bucket struct {
	client *minio.Client
	loc    Location
}

// Open connects to the location with the credentials. It sends nothing yet.
func Open(loc Location, creds Credentials) (*Bucket, error) {
	transport, err := minio.DefaultTransport(!loc.Insecure)
	if err != nil {
		return nil, err
	}
	if len(loc.CABundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(loc.CABundle) {
			return nil, errors.New("the CA bundle holds no PEM certificate")
		}
		transport.TLSClientConfig.RootCAs = pool
	}
	client, err := minio.New(loc.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(creds.AccessKeyID, creds.SecretAccessKey, ""),
		Secure:    !loc.Insecure,
		Region:    loc.Region,
		Transport: transport,
	})
	if err != nil {
		return nil, fmt.Errorf("the bucket's endpoint %q: %w", loc.Endpoint, err)
	}
	return &Bucket{client: client, loc: loc}, nil
}

func (b *Bucket) key(name string) string { return path.Join(b.loc.Prefix, name) }

// Put writes the object of the given name from r, as it streams in, and returns its size. An
// object of that name is replaced only once the whole of r has been stored.
func (b *Bucket) Put(ctx context.Context, name string, r io.Reader) (int64, error) {
	info, err := b.client.PutObject(ctx, b.loc.Bucket, b.key(name), r, -1, minio.PutObjectOptions{
		PartSize: PartSize, ContentType: "application/octet-stream"})
	if err != nil {
		return 0, b.explain("writing", name, err)
	}
	return info.Size, nil
}

// Get opens the object of the given name for reading. Close it when done.
func (b *Bucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	obj, err := b.client.GetObject(ctx, b.loc.Bucket, b.key(name), minio.GetObjectOptions{})
	if err == nil {
		// GetObject asks nothing until the first read: a missing object or a refusal is told
		// here rather than halfway through a restore.
		_, err = obj.Stat()
	}
	if err != nil {
		return nil, b.explain("reading", name, err)
	}
	return obj, nil
}

// List is the names of the objects under the given prefix (within the location's), in order.
// A prefix that ends in "/" is a folder: "shop/nightly/" lists nothing of "shop/nightly-2/".
func (b *Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var names []string
	base := b.key("")
	if base != "" {
		base += "/"
	}
	under := b.key(prefix)
	if strings.HasSuffix(prefix, "/") && under != "" {
		under += "/" // path.Join dropped it
	}
	for obj := range b.client.ListObjects(ctx, b.loc.Bucket, minio.ListObjectsOptions{Prefix: under, Recursive: true}) {
		if obj.Err != nil {
			return nil, b.explain("listing", prefix, obj.Err)
		}
		names = append(names, strings.TrimPrefix(obj.Key, base))
	}
	return names, nil
}

// Delete deletes the objects of the given names; one that is not there is no error.
func (b *Bucket) Delete(ctx context.Context, names ...string) error {
	var errs []error
	for _, name := range names {
		if err := b.client.RemoveObject(ctx, b.loc.Bucket, b.key(name), minio.RemoveObjectOptions{}); err != nil {
			errs = append(errs, b.explain("deleting", name, err))
		}
	}
	return errors.Join(errs...)
}

// explain says what failed on which object, with the server's own code where it gave one
// (AccessDenied, SignatureDoesNotMatch, NoSuchBucket, NoSuchKey ...).
func (b *Bucket) explain(doing, name string, err error) error {
	where := fmt.Sprintf("%s s3://%s/%s at %s", doing, b.loc.Bucket, b.key(name), b.loc.Endpoint)
	if resp := minio.ToErrorResponse(err); resp.Code != "" {
		return fmt.Errorf("%s: %s: %w", where, resp.Code, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}
