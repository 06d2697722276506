package images

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// account is a user of an image, with a group of its own of the same name and ID.
type account struct {
	name        string
	id          int
	home, shell string
}

// nsswitch is the /etc/nsswitch.conf that has the C library (setpriv, find -user) and Go's
// resolver read the accounts from /etc and the hosts from /etc/hosts, then DNS.
var nsswitch = File("/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"))

// accountFiles are /etc/passwd and /etc/group naming the accounts, and nsswitch.
func accountFiles(accounts ...account) []Entry {
	var passwd, group strings.Builder
	for _, a := range accounts {
		fmt.Fprintf(&passwd, "%s:x:%d:%d:%s:%s:%s\n", a.name, a.id, a.id, a.name, a.home, a.shell)
		fmt.Fprintf(&group, "%s:x:%d:\n", a.name, a.id)
	}
	return []Entry{
		File("/etc/passwd", 0o644, []byte(passwd.String())),
		File("/etc/group", 0o644, []byte(group.String())),
		nsswitch,
	}
}

// The accounts of distroless's static nonroot image, which the operator's Dockerfile builds on.
var (
	rootAccount    = account{"root", 0, "/root", "/sbin/nologin"}
	nobodyAccount  = account{"nobody", 65534, "/nonexistent", "/sbin/nologin"}
	nonrootAccount = account{"nonroot", 65532, "/home/nonroot", "/sbin/nologin"}
)

// staticEnv is the environment of distroless's static image.
var staticEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=" + caBundle,
}

// caBundle is where Debian, distroless and Go look for the CA certificates first.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// caCertificates is the toolchain's CA bundle (Debian's ca-certificates as one PEM file).
func caCertificates(bin string) (Entry, error) {
	src := filepath.Join(bin, "ca-certificates.crt")
	if _, err := os.Stat(src); err != nil {
		return Entry{}, fmt.Errorf("the images' CA certificates (hack/toolchain.sh makes them): %w", err)
	}
	return FileFrom(caBundle, 0o644, src), nil
}

// staticBase is the layer of what distroless's static nonroot image has that a Go program may
// use: the accounts, the CA certificates, /tmp, and nonroot's home.
func staticBase(bin string) (Layer, error) {
	certs, err := caCertificates(bin)
	if err != nil {
		return Layer{}, err
	}
	return Layer{
		Comment: "base: accounts, CA certificates, /tmp (as distroless/static-debian12:nonroot)",
		Entries: append(accountFiles(rootAccount, nobodyAccount, nonrootAccount),
			certs,
			Dir("/tmp", 0o1777),
			Dir("/root", 0o700),
			Dir("/home/nonroot", 0o700).Owned(nonrootAccount.id, nonrootAccount.id),
		),
	}, nil
}

// debianRoot is the toolchain's root filesystem of the machine's Debian release, bookworm: the
// image's of Valkey 8.0, which comes from bookworm's backports. A program of the toolchain linked
// dynamically against bookworm (redis_exporter) finds there the C library its image must have too.
func debianRoot(bin string) string { return filepath.Join(bin, "valkey-8.0", "rootfs") }

// fullName is the image reference ref with its registry spelled out, as containerd keeps it:
// docker.io when it names none.
func fullName(ref string) string {
	host, _, ok := strings.Cut(ref, "/")
	switch {
	case !ok:
		return "docker.io/library/" + ref
	case strings.ContainsAny(host, ".:") || host == "localhost":
		return ref
	}
	return "docker.io/" + ref
}
