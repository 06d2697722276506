package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"example.com/cache-operator/test/harness/releases"
)

// repo is the repository's root, from this package's directory.
const repo = "../../.."

// pauseProgram is our pause program, built once: a static program that the tests' stand-ins
// for the toolchain's programs are copies of.
var pauseProgram = sync.OnceValues(func() ([]byte, error) { return goBuild(repo, "./hack/image/pause") })

// fakeBin is a toolchain's bin directory with a CA bundle and the given programs, each a copy of
// the static pause program.
func fakeBin(t *testing.T, programs ...string) string {
	t.Helper()
	program, err := pauseProgram()
	must(t, err)
	bin := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bin, "ca-certificates.crt"), []byte("PEM\n"), 0o644))
	for _, p := range programs {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(bin, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(bin, p), program, 0o755))
	}
	return bin
}

// layerFiles are the paths of the layer's entries, with the headers.
func layerFiles(t *testing.T, l Layer) map[string]*tar.Header {
	t.Helper()
	built, err := buildLayer(l)
	must(t, err)
	files := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(gunzip(t, built.data)))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		must(t, err)
		files["/"+strings.TrimSuffix(hdr.Name, "/")] = hdr
	}
}

func TestPause(t *testing.T) {
	img, err := Pause(repo)
	must(t, err)
	if !slices.Equal(img.Names, []string{DefaultPauseName}) || img.Config.User != "65535:65535" || !slices.Equal(img.Config.Entrypoint, []string{"/pause"}) {
		t.Errorf("pause image = %+v", img)
	}
	if h := layerFiles(t, img.Layers[0])["/pause"]; h == nil || h.Mode != 0o755 || h.Size == 0 {
		t.Errorf("/pause = %+v", h)
	}
}

func TestValkey(t *testing.T) {
	rootfs := "valkey-9.1/rootfs/"
	programs := []string{rootfs + "usr/bin/valkey-server", rootfs + "usr/bin/valkey-cli", rootfs + "usr/bin/mawk"}
	for _, p := range []string{"bin/sh", "bin/rm", "bin/mv", "bin/grep", "usr/bin/head", "usr/bin/seq", "bin/sleep", "usr/bin/id", "usr/bin/find", "bin/chown", "usr/bin/setpriv"} {
		programs = append(programs, rootfs+p)
	}
	bin := fakeBin(t, programs...)
	release := releases.Valkey{Line: "9.1", Version: "9.1.2", Dir: filepath.Join(bin, "valkey-9.1")}
	img, err := Valkey(release)
	must(t, err)
	if want := []string{"docker.io/valkey/valkey:9.1.2"}; !slices.Equal(img.Names, want) {
		t.Errorf("names = %q, want the release's version, %q", img.Names, want)
	}
	if tagged, err := Valkey(release, "9.1.2", "9.1"); err != nil || !slices.Equal(tagged.Names, []string{"docker.io/valkey/valkey:9.1.2", "docker.io/valkey/valkey:9.1"}) {
		t.Errorf("names = %q (%v), want the tags given", tagged.Names, err)
	}
	c := img.Config
	if c.User != "" || c.WorkingDir != "/data" || !slices.Equal(c.Entrypoint, []string{"docker-entrypoint.sh"}) ||
		!slices.Equal(c.Cmd, []string{"valkey-server"}) || !slices.Equal(c.Volumes, []string{"/data"}) ||
		!slices.Equal(c.ExposedPorts, []string{"6379/tcp"}) || !slices.Equal(c.Env, []string{"PATH=" + valkeyPath}) {
		t.Errorf("config = %+v", c)
	}
	files := layerFiles(t, img.Layers[1])
	for path, want := range map[string]struct {
		mode     int64
		uid, gid int
	}{"/data": {0o755, 999, 999}, "/usr/local/bin/docker-entrypoint.sh": {0o755, 0, 0}, "/usr/local/bin/valkey-server": {0o755, 0, 0}, "/etc/passwd": {0o644, 0, 0}} {
		if h := files[path]; h == nil || h.Mode != want.mode || h.Uid != want.uid || h.Gid != want.gid {
			t.Errorf("%s = %+v, want %+v", path, h, want)
		}
	}
	if h := files["/usr/bin/awk"]; h == nil || h.Linkname != "mawk" {
		t.Errorf("/usr/bin/awk = %+v, want a link to mawk (Debian's alternative)", h)
	}
	if _, ok := layerFiles(t, img.Layers[0])["/usr/bin/valkey-cli"]; !ok {
		t.Error("the root filesystem's layer has no /usr/bin/valkey-cli")
	}

	must(t, os.Remove(filepath.Join(bin, rootfs, "usr/bin/setpriv")))
	if _, err := Valkey(release); err == nil || !strings.Contains(err.Error(), "setpriv") {
		t.Errorf("a root filesystem without setpriv: error %v", err)
	}
}

func TestExporterAndCoreDNS(t *testing.T) {
	bin := fakeBin(t, "redis_exporter", "coredns")
	exporter, err := Exporter(bin)
	must(t, err)
	if !slices.Equal(exporter.Names, []string{"docker.io/oliver006/redis_exporter:v1.45.0"}) || exporter.Config.User != "59000:59000" ||
		!slices.Equal(exporter.Config.Entrypoint, []string{"/redis_exporter"}) {
		t.Errorf("exporter = %+v", exporter)
	}
	files := layerFiles(t, exporter.Layers[0])
	for _, p := range []string{"/redis_exporter", caBundle} {
		if files[p] == nil {
			t.Errorf("the exporter's image has no %s", p)
		}
	}
	coredns, err := CoreDNS(bin, "")
	must(t, err)
	// A file capability would keep it from starting in a container that drops them all.
	if h := layerFiles(t, coredns.Layers[1])["/coredns"]; h == nil || len(h.PAXRecords) != 0 {
		t.Errorf("/coredns = %+v, want a plain program", h)
	}
}

func TestLibraries(t *testing.T) {
	static := fakeBin(t, "static")
	if libs, err := Libraries(filepath.Join(static, "static"), "/nonexistent"); err != nil || len(libs) != 0 {
		t.Errorf("a static program's libraries = %+v, %v", libs, err)
	}
	// This machine's own programs are Debian's: its root is a Debian root filesystem.
	libs, err := Libraries("/bin/sh", "/")
	if err != nil {
		t.Skipf("this machine's /bin/sh: %v", err)
	}
	var paths []string
	for _, l := range libs {
		paths = append(paths, l.Path)
	}
	if !slices.ContainsFunc(paths, func(p string) bool { return strings.HasSuffix(p, "/libc.so.6") }) ||
		!slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(p, "ld-linux") }) {
		t.Errorf("/bin/sh's libraries = %q, want libc and the loader", paths)
	}
}
