// Package images builds the container images of the local cluster's real nodes (kubelet,
// containerd, runc) on this machine, which reaches no registry and has no Docker daemon: the
// images are written as archives that `ctr images import` (an OCI layout) and `docker load` or
// `podman load` (a manifest.json) both accept.
//
// The archives are deterministic: the same inputs give the same bytes, and so the same digests,
// on every build (fixed timestamps and owners, sorted entries, gzip with a fixed header), so a
// node that already has an image finds it unchanged and a changed digest means changed content.
package images

import (
	"io/fs"
	"runtime"
)

// Image is an image to write: the references it goes by, its runtime config and its layers,
// the lowest first.
type Image struct {
	// Names are full references with a tag, such as docker.io/valkey/valkey:8.1.1: containerd
	// keeps an image by the name a pod's image normalises to, so the registry must be spelled out.
	Names  []string
	Config Config
	Layers []Layer
}

// Config is what a container of the image runs, as a Dockerfile's instructions say it.
type Config struct {
	User       string
	WorkingDir string
	Entrypoint []string
	Cmd        []string
	Env        []string
	// ExposedPorts are port/protocol, such as 6379/tcp.
	ExposedPorts []string
	Volumes      []string
	Labels       map[string]string
}

// Layer is one layer of an image: its entries, and what made it, for the image's history.
type Layer struct {
	Comment string
	Entries []Entry
}

// Kind is what an Entry adds to a layer.
type Kind int

// The kinds of entries.
const (
	KindDir Kind = iota
	KindFile
	KindSymlink
	// KindTree is a directory tree on disk added under the entry's path, with its files' modes and
	// symlinks; every entry of it gets the Tree entry's owner.
	KindTree
)

// Entry is a path of a layer. Path is absolute in the image; the parent directories it implies
// are added (0755, root) unless the layer has them, as docker's layers have them, so an entry of
// an upper layer must not lie under what a lower layer has as a symlink (bin in a root with
// merged /usr: use usr/bin). Of two entries with one path in a layer, the later wins.
type Entry struct {
	Path string
	Kind Kind
	// Mode holds the permission bits and the setuid, setgid and sticky bits.
	Mode     fs.FileMode
	UID, GID int
	// Data is a file's content, unless Source names a file on disk that has it; for a tree,
	// Source is its directory on disk.
	Data   []byte
	Source string
	// Target is a symlink's target.
	Target string
}

// Dir is a directory entry.
func Dir(path string, mode fs.FileMode) Entry { return Entry{Path: path, Kind: KindDir, Mode: mode} }

// File is a file entry with the given content.
func File(path string, mode fs.FileMode, data []byte) Entry {
	return Entry{Path: path, Kind: KindFile, Mode: mode, Data: data}
}

// FileFrom is a file entry whose content is read from the file source on disk when the layer is
// built.
func FileFrom(path string, mode fs.FileMode, source string) Entry {
	return Entry{Path: path, Kind: KindFile, Mode: mode, Source: source}
}

// Symlink is a symlink entry.
func Symlink(path, target string) Entry {
	return Entry{Path: path, Kind: KindSymlink, Mode: 0o777, Target: target}
}

// Tree is the directory tree source on disk, added under path.
func Tree(path, source string) Entry { return Entry{Path: path, Kind: KindTree, Source: source} }

// Owned is the entry owned by uid and gid.
func (e Entry) Owned(uid, gid int) Entry {
	e.UID, e.GID = uid, gid
	return e
}

// platform is the platform the images are built for: this machine's, where their programs are
// built and run.
var platform = struct{ OS, Architecture string }{"linux", runtime.GOARCH}
