package localcluster

import (
	"fmt"
	"os"
	"path/filepath"

	"example.com/cache-operator/test/harness/images"
	"example.com/cache-operator/test/harness/releases"
)

// SandboxImage is the pods' pause image in a cluster with real nodes, which their containerd is
// told to use: our own, as no registry can be reached for the one containerd would pull.
const SandboxImage = images.DefaultPauseName

// BuildImages writes, into dir, an archive of each image a cluster with real nodes runs: the
// operator's (built from the repository at root, as `make image` builds it), one of Valkey for each
// release of the toolchain (releases.Valkeys: a Cache's spec.version runs its release, and a
// version the toolchain lacks is an image no node has, as on a cluster that cannot pull it), the
// metrics exporter's, CoreDNS's and the pause image, from the toolchain's binaries in binDir. It
// returns the archives, for Cluster.Images.
func BuildImages(root, binDir, dir string) ([]string, error) {
	recipes := map[string]func() (images.Image, error){
		"operator": func() (images.Image, error) { return images.Operator(root, binDir, "") },
		"exporter": func() (images.Image, error) { return images.Exporter(binDir) },
		"coredns":  func() (images.Image, error) { return images.CoreDNS(binDir, CoreDNSImage) },
		"pause":    func() (images.Image, error) { return images.Pause(root, SandboxImage) },
	}
	valkeys, err := releases.Valkeys(binDir)
	if err != nil {
		return nil, err
	}
	for _, release := range valkeys {
		recipes["valkey-"+release.Line] = func() (images.Image, error) { return images.Valkey(release) }
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var archives []string
	for name, recipe := range recipes {
		img, err := recipe()
		if err != nil {
			return nil, fmt.Errorf("the %s image: %w", name, err)
		}
		archive := filepath.Join(dir, name+".tar")
		if _, err := images.WriteFile(archive, img); err != nil {
			return nil, fmt.Errorf("the %s image: %w", name, err)
		}
		archives = append(archives, archive)
	}
	return archives, nil
}
