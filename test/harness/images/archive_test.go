package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testImage is an image with an entry of every kind, built from files it makes in t's
// temporary directory.
func testImage(t *testing.T) Image {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "source"), []byte("from disk\n"), 0o600))
	tree := filepath.Join(dir, "tree")
	must(t, os.MkdirAll(filepath.Join(tree, "sub"), 0o750))
	must(t, os.WriteFile(filepath.Join(tree, "sub", "run"), []byte("#!/bin/sh\n"), 0o750))
	must(t, os.Chmod(filepath.Join(tree, "sub", "run"), 0o750|os.ModeSetuid)) // past the umask
	must(t, os.Symlink("sub/run", filepath.Join(tree, "link")))
	return Image{
		Names: []string{"docker.io/example/test:1", "localhost/test:2"},
		Config: Config{User: "1:1", WorkingDir: "/w", Entrypoint: []string{"/e"}, Cmd: []string{"c"}, Env: []string{"A=b"},
			ExposedPorts: []string{"1/tcp"}, Volumes: []string{"/v"}, Labels: map[string]string{"l": "v"}},
		Layers: []Layer{
			{Comment: "first", Entries: []Entry{
				Tree("/opt/tree", tree).Owned(7, 8),
				File("/etc/deep/file", 0o644, []byte("data")),
				Dir("/tmp", 0o1777),
			}},
			{Comment: "second", Entries: []Entry{
				FileFrom("/from-disk", 0o755, filepath.Join(dir, "source")),
				Symlink("/bin", "usr/bin"),
				File("/etc/deep/file", 0o600, []byte("the later entry wins")),
				File("/etc/deep/file", 0o644, []byte("data")).Owned(3, 4),
			}},
		},
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, imgs ...Image) ([]byte, []Written) {
	t.Helper()
	var buf bytes.Buffer
	written, err := Write(&buf, imgs...)
	must(t, err)
	return buf.Bytes(), written
}

// readArchive is the archive's files by name, and the names in their order.
func readArchive(t *testing.T, data []byte) (map[string][]byte, []string) {
	t.Helper()
	files, names := map[string][]byte{}, []string(nil)
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, names
		}
		must(t, err)
		content, err := io.ReadAll(tr)
		must(t, err)
		files[hdr.Name], names = content, append(names, hdr.Name)
	}
}

func unmarshal(t *testing.T, data []byte, v any) {
	t.Helper()
	must(t, json.Unmarshal(data, v))
}

func TestWriteIsDeterministic(t *testing.T) {
	first, _ := write(t, testImage(t))
	second, _ := write(t, testImage(t)) // other temporary files, of other times
	if !bytes.Equal(first, second) {
		t.Fatal("two builds of the same image differ")
	}
}

func TestWriteLaysOutOCIAndDocker(t *testing.T) {
	img := testImage(t)
	data, written := write(t, img)
	files, order := readArchive(t, data)
	if !slices.Equal(order[:5], []string{"blobs/", "blobs/sha256/", "oci-layout", "index.json", "manifest.json"}) {
		t.Errorf("archive begins %q", order[:5])
	}
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", got)
	}
	blob := func(desc descriptor) []byte {
		t.Helper()
		content, ok := files[blobPath(desc.Digest)]
		if !ok || digestOf(content) != desc.Digest || int64(len(content)) != desc.Size {
			t.Fatalf("blob %s of %d bytes: missing or of another digest or size", desc.Digest, desc.Size)
		}
		return content
	}

	var idx index
	unmarshal(t, files["index.json"], &idx)
	if idx.SchemaVersion != 2 || idx.MediaType != MediaTypeIndex || len(idx.Manifests) != 2 {
		t.Fatalf("index.json = %s", files["index.json"])
	}
	for i, m := range idx.Manifests {
		want := map[string]string{AnnotationImageName: img.Names[i], AnnotationRefName: []string{"1", "2"}[i]}
		if m.MediaType != MediaTypeManifest || !maps.Equal(m.Annotations, want) || m.Digest != written[0].Digest {
			t.Errorf("index.json manifest %d = %+v, want annotations %v", i, m, want)
		}
	}

	var manifest ociManifest
	unmarshal(t, blob(idx.Manifests[0]), &manifest)
	var config imageConfig
	unmarshal(t, blob(manifest.Config), &config)
	if manifest.Config.MediaType != MediaTypeConfig || manifest.Config.Digest != written[0].Config {
		t.Errorf("manifest's config = %+v", manifest.Config)
	}
	if config.OS != "linux" || config.Architecture != platform.Architecture || config.Config.User != "1:1" ||
		config.Config.WorkingDir != "/w" || len(config.Config.ExposedPorts) != 1 || len(config.Config.Volumes) != 1 {
		t.Errorf("config = %s", blob(manifest.Config))
	}
	if len(manifest.Layers) != 2 || len(config.RootFS.DiffIDs) != 2 || len(config.History) != 2 {
		t.Fatalf("manifest has %d layers, config %d diff_ids and %d history entries", len(manifest.Layers), len(config.RootFS.DiffIDs), len(config.History))
	}
	for i, l := range manifest.Layers {
		if l.MediaType != MediaTypeLayer {
			t.Errorf("layer %d's media type = %s", i, l.MediaType)
		}
		if diff := digestOf(gunzip(t, blob(l))); diff != config.RootFS.DiffIDs[i] {
			t.Errorf("layer %d's diff_id = %s, its tar's digest %s", i, config.RootFS.DiffIDs[i], diff)
		}
	}

	var docker []dockerManifest
	unmarshal(t, files["manifest.json"], &docker)
	var layers []string
	for _, l := range manifest.Layers {
		layers = append(layers, blobPath(l.Digest))
	}
	if len(docker) != 1 || docker[0].Config != blobPath(manifest.Config.Digest) ||
		!slices.Equal(docker[0].RepoTags, img.Names) || !slices.Equal(docker[0].Layers, layers) {
		t.Errorf("manifest.json = %s", files["manifest.json"])
	}
}

func TestLayerEntries(t *testing.T) {
	built, err := buildLayer(testImage(t).Layers[0])
	must(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(built.data))
	must(t, err)
	if !zr.ModTime.IsZero() || zr.Name != "" || zr.OS != 255 {
		t.Errorf("gzip header = %+v", zr.Header)
	}
	got := map[string]*tar.Header{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(gunzip(t, built.data)))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(t, err)
		if !hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v", hdr.Name, hdr.ModTime)
		}
		got[strings.TrimSuffix(hdr.Name, "/")], order = hdr, append(order, strings.TrimSuffix(hdr.Name, "/"))
	}
	want := []string{"etc", "etc/deep", "etc/deep/file", "opt", "opt/tree", "opt/tree/link", "opt/tree/sub", "opt/tree/sub/run", "tmp"}
	if !slices.Equal(order, want) {
		t.Fatalf("layer entries %q, want %q", order, want)
	}
	check := func(name string, typ byte, mode int64, uid int) {
		t.Helper()
		if h := got[name]; h.Typeflag != typ || h.Mode != mode || h.Uid != uid || h.Gid != map[int]int{0: 0, 7: 8}[uid] {
			t.Errorf("%s: type %c mode %o owner %d:%d, want type %c mode %o owner %d", name, h.Typeflag, h.Mode, h.Uid, h.Gid, typ, mode, uid)
		}
	}
	check("etc/deep", tar.TypeDir, 0o755, 0)
	check("tmp", tar.TypeDir, 0o1777, 0)
	check("opt/tree", tar.TypeDir, 0o750, 7) // the tree's own directory
	check("opt/tree/sub", tar.TypeDir, 0o750, 7)
	check("opt/tree/sub/run", tar.TypeReg, 0o4750, 7)
	check("opt/tree/link", tar.TypeSymlink, 0o777, 7)
	if got["opt/tree/link"].Linkname != "sub/run" {
		t.Errorf("link's target = %q", got["opt/tree/link"].Linkname)
	}
}

func TestLayerFileFromDisk(t *testing.T) {
	built, err := buildLayer(testImage(t).Layers[1])
	must(t, err)
	tr := tar.NewReader(bytes.NewReader(gunzip(t, built.data)))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		must(t, err)
		content, _ := io.ReadAll(tr)
		switch hdr.Name {
		case "from-disk":
			if string(content) != "from disk\n" || hdr.Mode != 0o755 {
				t.Errorf("from-disk: %q, mode %o", content, hdr.Mode)
			}
		case "etc/deep/file":
			if string(content) != "data" || hdr.Uid != 3 || hdr.Gid != 4 || hdr.Mode != 0o644 {
				t.Errorf("etc/deep/file, the later entry: %q, %d:%d, mode %o", content, hdr.Uid, hdr.Gid, hdr.Mode)
			}
		}
	}
}

func TestWriteSeveralImages(t *testing.T) {
	one, two := testImage(t), testImage(t)
	two.Names, two.Config.User = []string{"example.com/other:v1"}, "2:2"
	data, written := write(t, one, two)
	files, _ := readArchive(t, data)
	var docker []dockerManifest
	unmarshal(t, files["manifest.json"], &docker)
	if len(written) != 2 || written[0].Digest == written[1].Digest || len(docker) != 2 {
		t.Fatalf("written %+v, manifest.json %s", written, files["manifest.json"])
	}
	// Both images' layers are the same blobs, held once: 2 manifests, 2 configs and 2 layers.
	if blobs := len(files) - 5; blobs != 6 { // less oci-layout, index.json, manifest.json and blobs/sha256/
		t.Errorf("%d blobs, want 6", blobs)
	}
}

func TestWriteRefusesNames(t *testing.T) {
	for _, names := range [][]string{nil, {"valkey/valkey:8.1.1"}, {"docker.io/valkey/valkey"}, {"localhost/x:1@sha256:00"}, {"localhost/x:1", "localhost/x:1"}} {
		img := testImage(t)
		img.Names = names
		if _, err := Write(io.Discard, img); err == nil {
			t.Errorf("names %q: no error", names)
		}
	}
}

func gunzip(t *testing.T, data []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	must(t, err)
	out, err := io.ReadAll(zr)
	must(t, err)
	return out
}
