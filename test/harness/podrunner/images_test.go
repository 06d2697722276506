package podrunner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// The runner runs the programs of the images it knows, found on this machine, and refuses with a
// reason any other image or program.
func TestImagesAreMappedToLocalProgramsOrRefused(t *testing.T) {
	r := &Runner{BinDir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(r.BinDir, "valkey-server"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		image, program, want, refusal string
	}{
		{"valkey/valkey:8.1.1", "valkey-server", filepath.Join(r.BinDir, "valkey-server"), ""},
		{"valkey/valkey@sha256:0123", "/usr/local/bin/valkey-server", filepath.Join(r.BinDir, "valkey-server"), ""},
		{"valkey/valkey:8.1.1", "valkey-cli", "", "the toolchain has no valkey-cli"},
		{"valkey/valkey:8.1.1", "redis-server", "", `runs "redis-server", which the runner does not know in valkey/valkey`},
		{"registry.example:5000/valkey/valkey:8.1.1", "valkey-server", "", "the image registry.example:5000/valkey/valkey:8.1.1, which the runner cannot run"},
	} {
		got, _, err := r.command(tc.image, "127.64.0.1", []string{tc.program})
		switch {
		case tc.refusal == "" && (err != nil || got != tc.want):
			t.Errorf("%s %s: %q, %v; want %s", tc.image, tc.program, got, err, tc.want)
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%s %s: %q, %v; want refused: %s", tc.image, tc.program, got, err, tc.refusal)
		}
	}
	if sh, _, err := r.command("valkey/valkey:8.1.1", "127.64.0.1", []string{"/bin/sh"}); err != nil || filepath.Base(sh) != "sh" {
		t.Errorf("the image's shell: %q, %v; want the machine's sh", sh, err)
	}
	// Each program is put on the pod's IP: the server listens there, the client calls there unless
	// told another host.
	if _, args, _ := r.command("valkey/valkey:8.1.1", "127.64.0.1", []string{"valkey-server", "--port", "6379"}); !slices.Equal(args,
		[]string{"--port", "6379", "--bind", "127.64.0.1", "--bind-source-addr", "127.64.0.1"}) {
		t.Errorf("valkey-server's arguments: %q", args)
	}
	// The exporter, as the operator builds it, serves on the pod's IP and scrapes the server there.
	if err := os.WriteFile(filepath.Join(r.BinDir, "redis_exporter"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cache := &cachev2.Cache{Spec: cachev2.CacheSpec{Version: "8.0.1", Metrics: &cachev2.Metrics{Enabled: true}}}
	for _, c := range resources.StatefulSet(cache, resources.DefaultImages).Spec.Template.Spec.Containers {
		if c.Name != resources.ExporterContainerName {
			continue
		}
		_, args, err := r.command(c.Image, "127.64.0.1", append(c.Command, c.Args...))
		if err != nil || !slices.Contains(args, "--web.listen-address=127.64.0.1:9121") || !slices.Contains(args, "--redis.addr=redis://127.64.0.1:6379") {
			t.Errorf("redis_exporter's arguments: %q, %v; want it on 127.64.0.1", args, err)
		}
		return
	}
	t.Error("a Cache with metrics has no exporter to run")
}
