package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// epoch is every entry's modification time, and the image's creation time: a fixed one, so
// that a rebuild of unchanged inputs is byte for byte the same.
var epoch = time.Unix(0, 0).UTC()

// blob is content of the archive, by its digest (sha256:...).
type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob { return blob{digestOf(data), data} }

func digestOf(data []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(data)) }

// builtLayer is a layer as the archive holds it: a gzipped tar, and the digest of the tar itself
// (the diff_id the image's config lists).
type builtLayer struct {
	blob
	diffID string
}

// buildLayer writes the layer's entries as a tar, sorted by path, with the implied parent
// directories, and gzips it with a fixed header (no name, no time).
func buildLayer(l Layer) (builtLayer, error) {
	entries, err := flatten(l.Entries)
	if err != nil {
		return builtLayer{}, err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	diff := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(diff, zw))
	for _, p := range slices.Sorted(maps.Keys(entries)) {
		if err := writeEntry(tw, p, entries[p]); err != nil {
			return builtLayer{}, fmt.Errorf("layer %q: %s: %w", l.Comment, p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return builtLayer{}, err
	}
	if err := zw.Close(); err != nil {
		return builtLayer{}, err
	}
	return builtLayer{newBlob(gz.Bytes()), fmt.Sprintf("sha256:%x", diff.Sum(nil))}, nil
}

// flatten is the layer's entries by clean path without the leading slash, its trees expanded
// into their entries and the parent directories added.
func flatten(entries []Entry) (map[string]Entry, error) {
	out := map[string]Entry{}
	for _, e := range entries {
		p := cleanPath(e.Path)
		if e.Kind != KindTree {
			if p == "" {
				return nil, fmt.Errorf("entry %q: the root is no entry", e.Path)
			}
			out[p] = e
			continue
		}
		if err := expandTree(out, p, e); err != nil {
			return nil, err
		}
	}
	for p := range out {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := out[dir]; !ok {
				out[dir] = Dir(dir, 0o755)
			}
		}
	}
	return out, nil
}

// cleanPath is p relative to the image's root: "" for the root itself.
func cleanPath(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// expandTree adds tree's files under prefix to out, as they are on disk but for their owner.
func expandTree(out map[string]Entry, prefix string, tree Entry) error {
	// A tree given as a symlink to it (a toolchain's link into its cache) is the tree it names.
	root, err := filepath.EvalSymlinks(tree.Source)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(src string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, src)
		if err != nil {
			return err
		}
		p := cleanPath(path.Join(prefix, filepath.ToSlash(rel)))
		if p == "" {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var e Entry
		switch mode := info.Mode(); {
		case mode.IsDir():
			e = Dir(p, mode)
		case mode.IsRegular():
			e = FileFrom(p, mode, src)
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			e = Symlink(p, target)
		default:
			return fmt.Errorf("%s: a %v, which an image tree cannot hold", src, mode.Type())
		}
		out[p] = e.Owned(tree.UID, tree.GID)
		return nil
	})
}

// writeEntry writes the entry at p to tw.
func writeEntry(tw *tar.Writer, p string, e Entry) error {
	hdr := &tar.Header{Name: p, Mode: tarMode(e.Mode), Uid: e.UID, Gid: e.GID, ModTime: epoch}
	var content io.Reader
	switch e.Kind {
	case KindDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
	case KindSymlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
	case KindFile:
		hdr.Typeflag, hdr.Size, content = tar.TypeReg, int64(len(e.Data)), bytes.NewReader(e.Data)
		if e.Source != "" {
			f, err := os.Open(e.Source)
			if err != nil {
				return err
			}
			defer f.Close() //nolint:errcheck // read only
			info, err := f.Stat()
			if err != nil {
				return err
			}
			hdr.Size, content = info.Size(), f
		}
	default:
		return fmt.Errorf("unknown entry kind %d", e.Kind)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if content == nil {
		return nil
	}
	n, err := io.Copy(tw, content)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s changed while it was read", e.Source)
	}
	return err
}

// tarMode is the tar header's mode of m, whose setuid, setgid and sticky bits may be given as
// fs.FileMode's flags (as a file's Stat has them) or as the octal bits (0o1777).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m & 0o7777)
	for flag, bit := range map[fs.FileMode]int64{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if m&flag != 0 {
			mode |= bit
		}
	}
	return mode
}
