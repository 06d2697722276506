package releases

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestUpstreamIsValkeysOwnVersionOfDebians(t *testing.T) {
	for debian, want := range map[string]string{
		"8.0.1+dfsg1-1~bpo12+1": "8.0.1",
		"8.1.1+dfsg1-3+deb13u3": "8.1.1",
		"9.1.2-1":               "9.1.2",
		"1:9.1.10-2":            "9.1.10",
	} {
		if got, err := Upstream(debian); err != nil || got != want {
			t.Errorf("Upstream(%q) = %q, %v; want %q", debian, got, err, want)
		}
	}
	for _, bad := range []string{"", "9.1-1", "latest", "9.x.1-1"} {
		if got, err := Upstream(bad); err == nil {
			t.Errorf("Upstream(%q) = %q; want an error", bad, got)
		}
	}
}

// The releases are the bin's valkey-LINE directories, oldest first by version (9.1 after 8.10
// would be wrong as text), and a link left to a release that is gone is skipped.
func TestValkeysAreTheToolchainsReleasesOldestFirst(t *testing.T) {
	bin := t.TempDir()
	for line, debian := range map[string]string{"9.1": "9.1.2-1", "8.10": "8.10.0-1", "8.1": "8.1.1+dfsg1-3+deb13u3"} {
		dir := filepath.Join(bin, "valkey-"+line)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "VERSION"), []byte("libc6=2.43-7\nvalkey-server="+debian+"\nvalkey-tools="+debian+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(bin, "gone"), filepath.Join(bin, "valkey-7.2")); err != nil {
		t.Fatal(err)
	}
	all, err := Valkeys(bin)
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, v := range all {
		versions = append(versions, v.Version)
	}
	if want := []string{"8.1.1", "8.10.0", "9.1.2"}; !slices.Equal(versions, want) {
		t.Errorf("versions %v, want %v", versions, want)
	}
	if v, err := Line(bin, "9.1"); err != nil || v.Server() != filepath.Join(bin, "valkey-9.1", "valkey-server") {
		t.Errorf("Line 9.1 = %+v, %v", v, err)
	}
	if _, err := Line(bin, "7.2"); err == nil {
		t.Error("a release that is gone was found")
	}
}
