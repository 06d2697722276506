// Package releases lists the Valkey releases that the toolchain provides (hack/toolchain.sh's
// VALKEY_RELEASES: 8.0, 8.1 and 9.1, each from the Debian suites that carry it). Each release line
// is a directory of the toolchain's bin, valkey-LINE, that holds the root filesystem of its image,
// wrappers that run its valkey-server and valkey-cli on the machine, and the Debian versions it was
// made of (VERSION). Tests name a release by its line, and learn its exact version here: the
// toolchain takes each line's newest version, which moves on with Debian.
package releases

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// Valkey is one release of Valkey that the toolchain provides.
type Valkey struct {
	// Line is the release line, MAJOR.MINOR, such as 9.1.
	Line string
	// Version is the release, MAJOR.MINOR.PATCH, such as 9.1.2: the tag of its image, and a
	// Cache's spec.version that runs it.
	Version string
	// Dir is the toolchain's directory of the release, bin/valkey-LINE.
	Dir string
}

// AtLeast reports whether the release is version (MAJOR.MINOR or MAJOR.MINOR.PATCH) or later.
func (v Valkey) AtLeast(min string) bool {
	return version.MustParseGeneric(v.Version).AtLeast(version.MustParseGeneric(min))
}

// Server is the path of a program that runs the release's valkey-server on the machine.
func (v Valkey) Server() string { return filepath.Join(v.Dir, "valkey-server") }

// CLI is the path of a program that runs the release's valkey-cli on the machine.
func (v Valkey) CLI() string { return filepath.Join(v.Dir, "valkey-cli") }

// Root is the root filesystem of the release's image: Debian's valkey-server and valkey-tools,
// with what they and the pods' scripts run.
func (v Valkey) Root() string { return filepath.Join(v.Dir, "rootfs") }

// Valkeys are the Valkey releases of the toolchain's bin directory, oldest first. A link to a
// release that the toolchain no longer provides (left in bin by an older checkout) is skipped.
func Valkeys(bin string) ([]Valkey, error) {
	dirs, err := filepath.Glob(filepath.Join(bin, "valkey-[0-9]*.[0-9]*"))
	if err != nil {
		return nil, err
	}
	var found []Valkey
	for _, dir := range dirs {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			continue
		}
		v, err := read(dir)
		if err != nil {
			return nil, err
		}
		found = append(found, v)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("the toolchain's %s has no Valkey release (valkey-LINE): run hack/toolchain.sh valkey", bin)
	}
	slices.SortFunc(found, func(a, b Valkey) int {
		c, _ := version.MustParseGeneric(a.Version).Compare(b.Version) // both parsed by read
		return c
	})
	return found, nil
}

// Line is the release of the line, such as 9.1, among the toolchain's.
func Line(bin, line string) (Valkey, error) {
	all, err := Valkeys(bin)
	if err != nil {
		return Valkey{}, err
	}
	for _, v := range all {
		if v.Line == line {
			return v, nil
		}
	}
	return Valkey{}, fmt.Errorf("the toolchain's %s has no Valkey %s (it has %s)", bin, line, strings.Join(Lines(all), ", "))
}

// Lines are the releases' lines.
func Lines(vs []Valkey) []string {
	lines := make([]string, len(vs))
	for i, v := range vs {
		lines[i] = v.Line
	}
	return lines
}

// read reads the release of the directory bin/valkey-LINE from its VERSION file, whose line
// valkey-server=DEBIAN-VERSION names it.
func read(dir string) (Valkey, error) {
	line := strings.TrimPrefix(filepath.Base(dir), "valkey-")
	f, err := os.Open(filepath.Join(dir, "VERSION"))
	if err != nil {
		return Valkey{}, fmt.Errorf("the toolchain's Valkey %s: %w", line, err)
	}
	defer f.Close() //nolint:errcheck // read only
	s := bufio.NewScanner(f)
	for s.Scan() {
		if debian, ok := strings.CutPrefix(s.Text(), "valkey-server="); ok {
			v, err := Upstream(debian)
			if err != nil {
				return Valkey{}, fmt.Errorf("the toolchain's Valkey %s: %w", line, err)
			}
			if !strings.HasPrefix(v, line+".") {
				return Valkey{}, fmt.Errorf("the toolchain's valkey-%s holds Valkey %s", line, v)
			}
			return Valkey{Line: line, Version: v, Dir: dir}, nil
		}
	}
	if err := s.Err(); err != nil {
		return Valkey{}, err
	}
	return Valkey{}, fmt.Errorf("the toolchain's Valkey %s: its VERSION names no valkey-server", line)
}

// Upstream is Valkey's own version of a Debian package version: 8.1.1 of 8.1.1+dfsg1-3+deb13u3,
// 9.1.2 of 9.1.2-1 (without an epoch, Debian's revision, or a repack's suffix).
func Upstream(debian string) (string, error) {
	v := debian
	if _, after, ok := strings.Cut(v, ":"); ok {
		v = after
	}
	if i := strings.IndexAny(v, "+~-"); i >= 0 {
		v = v[:i]
	}
	if _, err := version.ParseGeneric(v); err != nil || strings.Count(v, ".") != 2 {
		return "", fmt.Errorf("the Debian version %q is not of a Valkey release MAJOR.MINOR.PATCH", debian)
	}
	return v, nil
}
