package images

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// goBuild builds the main package pkg of the module in dir as the operator's Dockerfile builds
// the operator: a static program (CGO_ENABLED=0) for the images' platform, without paths of this
// machine (-trimpath), symbols or debug information (-s -w), and without the checkout's VCS state
// (-buildvcs=false), so that the program, and the image, depend on the source alone.
func goBuild(dir, pkg string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "images-go-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // a temporary directory
	out := filepath.Join(tmp, "program")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+platform.OS, "GOARCH="+platform.Architecture)
	if output, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, output)
	}
	return os.ReadFile(out)
}
