package images

import (
	_ "embed" // the image's scripts
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/releases"
)

var (
	//go:embed valkey/docker-entrypoint.sh
	valkeyEntrypoint []byte
	//go:embed valkey/valkey-server
	valkeyServer []byte
)

// valkeyPath is the official image's PATH (debian:bookworm-slim's).
const valkeyPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// valkeyPrograms are the programs that a Valkey container runs, which the image must have on
// its PATH: the server and the client, the shell, what the pods' scripts run (the entrypoints and
// the preStop hook of internal/resources/valkeycontainer.go and clusternode.go), and what
// docker-entrypoint.sh runs.
var valkeyPrograms = []string{
	"valkey-server", "valkey-cli", "sh",
	"rm", "mv", "grep", "awk", "head", "seq", "sleep",
	"id", "find", "chown", "setpriv",
}

// alternatives are the links, by path, that Debian's maintainer scripts make with
// update-alternatives and that unpacking the packages therefore lacks, to their targets.
var alternatives = map[string]string{"/usr/bin/awk": "mawk"}

// valkeyUID is the valkey user's and group's ID in the official image, which the Cache's pods run
// as.
const valkeyUID = 999

// Valkey is the image of a Valkey release, laid out as the official Debian one
// (valkey-io/valkey-container), tagged with the release's version, or with each of tags if any are
// given. Its programs are the toolchain's root filesystem of the release (bin/valkey-LINE/rootfs):
// Debian's valkey-server and valkey-tools of the release, with what they and the pods' scripts run,
// from the same Debian suites.
func Valkey(release releases.Valkey, tags ...string) (Image, error) {
	root := release.Root()
	if _, err := os.Stat(filepath.Join(root, "usr/bin/valkey-server")); err != nil {
		return Image{}, fmt.Errorf("the root filesystem of Valkey %s's image (hack/toolchain.sh unpacks it): %w", release.Line, err)
	}
	added := append(accountFiles(
		account{"root", 0, "/root", "/bin/sh"},
		account{"valkey", valkeyUID, "/home/valkey", "/bin/sh"},
		account{"nobody", 65534, "/nonexistent", "/usr/sbin/nologin"},
	),
		// The official image makes /data with mkdir (0755) and gives it to valkey.
		Dir("/data", 0o755).Owned(valkeyUID, valkeyUID),
		File("/usr/local/bin/docker-entrypoint.sh", 0o755, valkeyEntrypoint),
		File("/usr/local/bin/valkey-server", 0o755, valkeyServer),
	)
	for link, target := range alternatives {
		_, errLink := os.Lstat(filepath.Join(root, link))
		if _, err := os.Stat(filepath.Join(root, path.Dir(link), target)); err == nil && errLink != nil {
			added = append(added, Symlink(link, target))
		}
	}
	if missing := missingPrograms(root, added); len(missing) > 0 {
		return Image{}, fmt.Errorf("the Valkey image's root filesystem %s has no %s on PATH", root, strings.Join(missing, ", "))
	}
	// A library missing from the root would fail every pod at its start; fail the build instead.
	for _, program := range []string{"valkey-server", "valkey-cli"} {
		if _, err := Libraries(filepath.Join(root, "usr/bin", program), root); err != nil {
			return Image{}, err
		}
	}
	if len(tags) == 0 {
		tags = []string{release.Version}
	}
	var names []string
	for _, tag := range tags {
		names = append(names, fullName(resources.Image(resources.DefaultImageRepository, tag)))
	}
	return Image{
		Names: names,
		Config: Config{
			Env:          []string{"PATH=" + valkeyPath},
			WorkingDir:   "/data",
			Volumes:      []string{"/data"},
			ExposedPorts: []string{"6379/tcp"},
			Entrypoint:   []string{"docker-entrypoint.sh"},
			Cmd:          []string{"valkey-server"},
		},
		Layers: []Layer{
			{Comment: "Debian's valkey-server and valkey-tools " + release.Version + ", and what they run on (bin/valkey-" + release.Line + "/rootfs)", Entries: []Entry{Tree("/", root)}},
			{Comment: "the official image's additions: the valkey user, /data, docker-entrypoint.sh", Entries: added},
		},
	}, nil
}

// missingPrograms are the valkeyPrograms that neither root nor the added entries have on PATH.
func missingPrograms(root string, added []Entry) []string {
	have := map[string]bool{}
	for _, e := range added {
		have[cleanPath(e.Path)] = true
	}
	var missing []string
programs:
	for _, program := range valkeyPrograms {
		for _, dir := range strings.Split(valkeyPath, ":") {
			p := cleanPath(path.Join(dir, program))
			if _, err := os.Lstat(filepath.Join(root, p)); err == nil || have[p] {
				continue programs
			}
		}
		missing = append(missing, program)
	}
	return missing
}
