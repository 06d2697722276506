// Package testenv starts a real etcd and kube-apiserver, built by hack/toolchain.sh, with the
// project's CRDs installed, for tests that need the API server's admission, defaulting and
// optimistic concurrency rather than a fake.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/mod/modfile"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Root is the repository's top directory: the nearest directory at or above the working
// directory (a test's is its package's) whose go.mod is this module's. Not the source file's
// path, which the build's -trimpath (Makefile) leaves relative to the module.
func Root() string {
	root, err := foundRoot()
	if err != nil {
		panic(err)
	}
	return root
}

var foundRoot = sync.OnceValues(findRoot)

// module is the project's module path, as its go.mod declares it.
const module = "example.com/cache-operator"

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modfile.ModulePath(mod) == module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s at or above the working directory: run the tests from within the checkout", module)
		}
		dir = parent
	}
}

// BinDir is where the toolchain's binaries are linked: $KUBEBUILDER_ASSETS if set, else the
// repository's bin/ that hack/toolchain.sh fills.
func BinDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(Root(), "bin")
}

// Start starts etcd and kube-apiserver and installs the CRDs of config/crd/bases. The caller
// stops the returned environment.
func Start() (*envtest.Environment, error) {
	dir := BinDir()
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make tools` (or hack/toolchain.sh etcd kubernetes) first: %w", bin, dir, err)
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(Root(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: dir,
	}
	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	return env, nil
}

// Main runs a test package against a fresh API server: it starts one, lets setup make the
// package's clients from its config, runs the tests, stops the server and exits with the tests'
// status. Call it from TestMain.
func Main(m *testing.M, setup func(*rest.Config) error) {
	env, err := Start()
	if err == nil {
		err = setup(env.Config)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// SkipTier skips the test that stands in, in a plain `go test ./...`, for a package's tests of a
// tier that needs the toolchain and is selected by a build tag (integration or e2e), and says how
// to run them.
func SkipTier(t *testing.T, tag string) {
	t.Helper()
	t.Skipf("the %s tests need the toolchain: run `make test-%s`, or `go test -tags %s` after `make tools`", tag, tag, tag)
}
