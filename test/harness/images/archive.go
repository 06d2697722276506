package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The media types of the OCI image spec that the archive's blobs have.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// The annotations of an OCI index's manifest that name the image: containerd's import names it
// by the full reference, other tools by the tag.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// Written is an image as Write wrote it.
type Written struct {
	Names []string
	// Digest is the digest of the image's manifest: the digest containerd and the kubelet report
	// for the image (a pod's imageID), and Size is the manifest's size.
	Digest string
	Size   int64
	// Config is the digest of its config: the image's ID for docker and podman.
	Config string
}

// Write writes the images as one archive to w: an OCI image layout (oci-layout, index.json with
// a manifest per name, blobs/sha256/...) for containerd, and docker's manifest.json pointing into
// the same blobs for docker and podman.
func Write(w io.Writer, imgs ...Image) ([]Written, error) {
	var (
		written []Written
		entries []descriptor
		docker  []dockerManifest
		blobs   = map[string][]byte{}
		names   = map[string]bool{}
	)
	for _, img := range imgs {
		if len(img.Names) == 0 {
			return nil, errors.New("an image has no name")
		}
		manifest, config, layers, err := build(img)
		if err != nil {
			return nil, err
		}
		dm := dockerManifest{Config: blobPath(config.digest), RepoTags: img.Names}
		for _, b := range append([]blob{manifest, config}, layers...) {
			blobs[b.digest] = b.data
		}
		for _, l := range layers {
			dm.Layers = append(dm.Layers, blobPath(l.digest))
		}
		for _, name := range img.Names {
			tag, err := tagOf(name)
			if err != nil {
				return nil, err
			}
			if names[name] {
				return nil, fmt.Errorf("two images named %s", name)
			}
			names[name] = true
			entries = append(entries, descriptor{
				MediaType: MediaTypeManifest, Digest: manifest.digest, Size: int64(len(manifest.data)),
				Platform:    &platformSpec{platform.Architecture, platform.OS},
				Annotations: map[string]string{AnnotationImageName: name, AnnotationRefName: tag},
			})
		}
		docker = append(docker, dm)
		written = append(written, Written{img.Names, manifest.digest, int64(len(manifest.data)), config.digest})
	}
	files := []file{
		{"oci-layout", mustJSON(map[string]string{"imageLayoutVersion": "1.0.0"})},
		{"index.json", mustJSON(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: entries})},
		{"manifest.json", mustJSON(docker)},
	}
	for _, digest := range slices.Sorted(maps.Keys(blobs)) {
		files = append(files, file{blobPath(digest), blobs[digest]})
	}
	return written, writeArchive(w, files)
}

// WriteFile writes the images' archive (Write) to the file at path, whole or not at all: an
// interrupted build leaves no archive that a later import would take for a good one.
func WriteFile(path string, imgs ...Image) ([]Written, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name()) //nolint:errcheck // gone already once renamed
	written, err := Write(f, imgs...)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return written, err
}

// build is the image's manifest, config and layers.
func build(img Image) (manifest, config blob, layers []blob, err error) {
	cfg := imageConfig{Created: epoch.Format("2006-01-02T15:04:05Z"), Architecture: platform.Architecture, OS: platform.OS}
	cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{}
	c := img.Config
	cfg.Config = runConfig{User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir,
		Labels: c.Labels, ExposedPorts: set(c.ExposedPorts), Volumes: set(c.Volumes)}
	descs := []descriptor{}
	for _, l := range img.Layers {
		built, err := buildLayer(l)
		if err != nil {
			return blob{}, blob{}, nil, fmt.Errorf("image %s: %w", strings.Join(img.Names, ", "), err)
		}
		layers = append(layers, built.blob)
		descs = append(descs, descriptor{MediaType: MediaTypeLayer, Digest: built.digest, Size: int64(len(built.data))})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, built.diffID)
		cfg.History = append(cfg.History, history{Created: cfg.Created, CreatedBy: l.Comment})
	}
	config = newBlob(mustJSON(cfg))
	manifest = newBlob(mustJSON(ociManifest{
		SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: descriptor{MediaType: MediaTypeConfig, Digest: config.digest, Size: int64(len(config.data))},
		Layers: descs,
	}))
	return manifest, config, layers, nil
}

// writeArchive writes the files as a tar: regular files, and the directories of the blobs
// before them, all root's, at epoch.
func writeArchive(w io.Writer, files []file) error {
	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range files {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// file is a file of the archive.
type file struct {
	name string
	data []byte
}

// blobPath is where the archive holds the blob with the digest.
func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

// tagOf is the tag of the full reference name, which must name its registry (docker.io,
// localhost, a host with a dot or a port), and have a tag and no digest: containerd stores an
// image under such a name only.
func tagOf(name string) (string, error) {
	repo, tag, ok := strings.Cut(name[strings.LastIndexByte(name, '/')+1:], ":")
	host, _, slash := strings.Cut(name, "/")
	if !ok || tag == "" || repo == "" || !slash || strings.Contains(name, "@") ||
		!strings.ContainsAny(host, ".:") && host != "localhost" {
		return "", fmt.Errorf("image name %q is not a full reference with a tag (registry/repository:tag)", name)
	}
	return tag, nil
}

// set is the JSON object of a config that stands for a set (ExposedPorts, Volumes).
func set(keys []string) map[string]struct{} {
	if len(keys) == 0 {
		return nil
	}
	m := map[string]struct{}{}
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// mustJSON is v in JSON, which for the types of this file cannot fail.
func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}
