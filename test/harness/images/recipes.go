package images

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"example.com/cache-operator/internal/readiness"
	"example.com/cache-operator/internal/resources"
)

// Default names of the images whose name the recipes take.
const (
	// DefaultPauseName is the pod sandbox's image that containerd's CRI runs unless its config
	// names another (sandbox_image, or pinned_images.sandbox): registry.k8s.io/pause:3.10 in
	// containerd 2.1, 3.10.1 in 2.2, 3.10.2 in 2.4 (internal/cri/config DefaultSandboxImage). The
	// local cluster's containerd config should name the image it imports.
	DefaultPauseName = "registry.k8s.io/pause:3.10.1"
	// DefaultOperatorTag is the operator's release, the tag of the image its backup Jobs run
	// (resources.DefaultAgentImage).
	DefaultOperatorTag = "v0.1.0"
	// DefaultCoreDNSName is the local cluster's CoreDNS, the toolchain's version.
	DefaultCoreDNSName = "localhost/coredns:v1.14.3"
)

// Pause is the pod sandbox's image: our own pause program (hack/image/pause), built from the
// repository at repo, as /pause, run as the user registry.k8s.io/pause runs as. Its names are
// names, or DefaultPauseName.
func Pause(repo string, names ...string) (Image, error) {
	program, err := goBuild(repo, "./hack/image/pause")
	if err != nil {
		return Image{}, err
	}
	if len(names) == 0 {
		names = []string{DefaultPauseName}
	}
	return Image{
		Names:  names,
		Config: Config{User: "65535:65535", Entrypoint: []string{"/pause"}},
		Layers: []Layer{{Comment: "pause (hack/image/pause)", Entries: []Entry{File("/pause", 0o755, program)}}},
	}, nil
}

// Operator is the operator's image as its Dockerfile builds it, tagged tag (DefaultOperatorTag
// if empty): the operator and its readiness agent built from the repository at repo, on what
// distroless's static nonroot base gives it, with the CA certificates of the toolchain in bin. A
// release from before the agent (the upgrade tests build earlier releases) has the operator alone.
func Operator(repo, bin, tag string) (Image, error) {
	base, err := staticBase(bin)
	if err != nil {
		return Image{}, err
	}
	programs := Layer{Comment: "the operator (go build ./cmd) and its readiness agent (./cmd/readiness)"}
	for _, p := range []struct{ pkg, path string }{{"./cmd", "/cache-operator"}, {"./cmd/readiness", readiness.Program}} {
		if _, err := os.Stat(filepath.Join(repo, p.pkg)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		program, err := goBuild(repo, p.pkg)
		if err != nil {
			return Image{}, err
		}
		programs.Entries = append(programs.Entries, File(p.path, 0o755, program))
	}
	if tag == "" {
		tag = DefaultOperatorTag
	}
	return Image{
		Names: []string{fullName(resources.OperatorImageRepository + ":" + tag)},
		Config: Config{User: "65532:65532", WorkingDir: "/home/nonroot", Env: staticEnv,
			Entrypoint: []string{"/cache-operator"}},
		Layers: []Layer{base, programs},
	}, nil
}

// Exporter is the metrics exporter's image (resources.DefaultExporterImage) laid out as the
// official one: /redis_exporter on an empty base with the CA certificates. The program is
// Debian's build of the same release, the toolchain's bin/redis_exporter, which is linked to
// the C library: the image has it too, with the dynamic loader, from the toolchain's Debian root.
func Exporter(bin string) (Image, error) {
	program := filepath.Join(bin, "redis_exporter")
	layer, err := programLayer("redis_exporter (Debian's prometheus-redis-exporter)", bin, program, "/redis_exporter")
	if err != nil {
		return Image{}, err
	}
	return Image{
		Names: []string{fullName(resources.DefaultExporterImage)},
		Config: Config{User: "59000:59000", ExposedPorts: []string{"9121/tcp"},
			Entrypoint: []string{"/redis_exporter"}},
		Layers: []Layer{layer},
	}, nil
}

// CoreDNS is CoreDNS's image laid out as the official one: the toolchain's bin/coredns as
// /coredns on distroless's static nonroot base, named name (DefaultCoreDNSName if empty). Unlike
// the official one, the program has no file capability to bind port 53: a container that drops
// every capability, as the restricted Pod Security Standard asks, could not even start it (exec
// fails with EPERM when a file's capabilities cannot be granted), so the local cluster's CoreDNS
// listens on an unprivileged port.
func CoreDNS(bin, name string) (Image, error) {
	base, err := staticBase(bin)
	if err != nil {
		return Image{}, err
	}
	layer, err := programLayer("coredns", bin, filepath.Join(bin, "coredns"), "/coredns")
	if err != nil {
		return Image{}, err
	}
	if name == "" {
		name = DefaultCoreDNSName
	}
	return Image{
		Names: []string{name},
		Config: Config{User: "65532:65532", Env: staticEnv, ExposedPorts: []string{"53/tcp", "53/udp"},
			Entrypoint: []string{"/coredns"}},
		Layers: []Layer{base, layer},
	}, nil
}

// programLayer is a layer of the program as path, the CA certificates, and, for a program linked
// dynamically, the libraries it needs from the toolchain's Debian root.
func programLayer(comment, bin, program, path string) (Layer, error) {
	certs, err := caCertificates(bin)
	if err != nil {
		return Layer{}, err
	}
	libs, err := Libraries(program, debianRoot(bin))
	if err != nil {
		return Layer{}, err
	}
	return Layer{Comment: comment, Entries: append([]Entry{FileFrom(path, 0o755, program), certs, nsswitch}, libs...)}, nil
}
