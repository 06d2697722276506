package podrunner

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"example.com/cache-operator/internal/resources"
)

// images are the images the runner can run, by repository, each with the programs a container
// of it may start and where the runner finds them here. It is the one place that says what the
// runner stands in for: a container of another image, or one that starts another program, is
// refused, and its pod fails with the reason.
var images = map[string]map[string]program{
	resources.DefaultImageRepository: {"valkey-server": toolchainProgram, "valkey-cli": toolchainProgram, "sh": machineShell},
}

// program finds a program of an image on this machine.
type program func(r *Runner, name string) (string, error)

// toolchainProgram is one of the toolchain's binaries (hack/toolchain.sh), in BinDir.
func toolchainProgram(r *Runner, name string) (string, error) {
	path := filepath.Join(r.BinDir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the toolchain has no %s: %w", name, err)
	}
	return path, nil
}

// machineShell is the machine's own shell, standing in for the image's: it runs with the
// toolchain first in its PATH (processEnv), where it finds the image's other programs.
func machineShell(*Runner, string) (string, error) { return exec.LookPath("sh") }

// binary is the executable that argv, run by a container of the image, names.
func (r *Runner) binary(image string, argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("it has no command")
	}
	repository := imageRepository(image)
	programs, ok := images[repository]
	if !ok {
		return "", fmt.Errorf("it runs the image %s, which the runner cannot run (it runs %s)", image, strings.Join(slices.Sorted(maps.Keys(images)), ", "))
	}
	name := filepath.Base(argv[0])
	find, ok := programs[name]
	if !ok {
		return "", fmt.Errorf("it runs %q, which the runner does not know in %s (it knows %s)", argv[0], repository, strings.Join(slices.Sorted(maps.Keys(programs)), ", "))
	}
	return find(r, name)
}

// imageRepository is the image's repository, without its tag or digest.
func imageRepository(image string) string {
	if at := strings.IndexByte(image, '@'); at >= 0 {
		image = image[:at]
	}
	if colon := strings.LastIndexByte(image, ':'); colon > strings.LastIndexByte(image, '/') {
		image = image[:colon]
	}
	return image
}
