package images

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// libDirs are where a root filesystem of Debian keeps the shared libraries of this machine's
// architecture, in the order the dynamic loader looks.
var libDirs = func() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[platform.Architecture]
	return []string{"lib/" + triplet, "usr/lib/" + triplet, "lib64", "usr/lib64", "lib", "usr/lib"}
}()

// Libraries are the entries that the ELF program needs beside it to run in an image with
// nothing else: its dynamic loader and the shared libraries that it and they need (DT_NEEDED),
// taken from the root filesystem root at the paths they have there, with the symlinks on the
// way. A static program needs none.
func Libraries(program, root string) ([]Entry, error) {
	var entries []Entry
	seen := map[string]bool{}
	var needs func(file string) error
	// include adds the image path p, following its symlinks in root.
	include := func(p string) error {
		for !seen[p] {
			seen[p] = true
			info, err := os.Lstat(filepath.Join(root, p))
			if err != nil {
				return err
			}
			if info.Mode()&fs.ModeSymlink == 0 {
				entries = append(entries, FileFrom(p, info.Mode(), filepath.Join(root, p)))
				return needs(filepath.Join(root, p))
			}
			target, err := os.Readlink(filepath.Join(root, p))
			if err != nil {
				return err
			}
			entries = append(entries, Symlink(p, target))
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(p), target)
			}
			p = cleanPath(target)
		}
		return nil
	}
	needs = func(file string) error {
		f, err := elf.Open(file)
		if err != nil {
			return err
		}
		defer f.Close() //nolint:errcheck // read only
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				interp := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(interp, 0); err != nil {
					return err
				}
				if err := include(cleanPath(strings.TrimRight(string(interp), "\x00"))); err != nil {
					return err
				}
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return err
		}
		for _, lib := range libs {
			if err := include(findLib(root, lib)); err != nil {
				return fmt.Errorf("%s needs %s: %w", file, lib, err)
			}
		}
		return nil
	}
	if err := needs(program); err != nil {
		return nil, fmt.Errorf("the libraries of %s in %s: %w", program, root, err)
	}
	return entries, nil
}

// findLib is where in root the library is, or where it would be.
func findLib(root, lib string) string {
	for _, dir := range libDirs {
		if _, err := os.Lstat(filepath.Join(root, dir, lib)); err == nil {
			return path.Join(dir, lib)
		}
	}
	return path.Join(libDirs[0], lib)
}
