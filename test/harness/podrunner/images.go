package podrunner

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"example.com/cache-operator/internal/resources"
)

// images are the images the runner can run, by repository, each with the programs a container
// of it may start, where the runner finds them here and how it puts them on the pod's IP. It is
// the one place that says what the runner stands in for: a container of another image, or one
// that starts another program, is refused, and its pod fails with the reason.
var images = map[string]map[string]program{
	resources.DefaultImageRepository: {
		"valkey-server": {toolchainProgram, onPodIPAsServer},
		"valkey-cli":    {toolchainProgram, onPodIPAsClient},
		// The image's entrypoint shell passes its arguments on to the server ("$@").
		"sh": {machineShell, onPodIPAsServer},
	},
	// The operator's own image runs its backup mode in the backups' Jobs: it only connects out,
	// to the servers and the bucket, from wherever.
	resources.OperatorImageRepository: {
		"cache-operator": {operatorBinary, asGiven},
	},
	// The metrics exporter beside Valkey in a Cache with metrics: Debian's build of the release
	// the default image holds (hack/toolchain.sh, redis-exporter).
	imageRepository(resources.DefaultExporterImage): {
		"redis_exporter": {toolchainProgram, onPodIPAsExporter},
	},
}

// program is a program of an image, as the runner runs it on this machine.
type program struct {
	// find is the program's executable here.
	find func(r *Runner, name string) (string, error)
	// onPodIP is its arguments with what puts it on the pod's IP, which in a pod would be the
	// only address it has: every pod here shares the machine's loopback interface.
	onPodIP func(ip string, args []string) []string
}

// onPodIPAsServer makes valkey-server listen on the pod's IP and connect from it: connections to
// other servers, the cluster bus, must leave from the pod's IP, or the peers would see them come
// from 127.0.0.1.
func onPodIPAsServer(ip string, args []string) []string {
	return append(args[:len(args):len(args)], "--bind", ip, "--bind-source-addr", ip)
}

// onPodIPAsClient makes valkey-cli's default host the pod's IP, as 127.0.0.1 is in the pod's own
// network namespace; a host given on the command line comes later and wins.
func onPodIPAsClient(ip string, args []string) []string {
	return append([]string{"-h", ip}, args...)
}

// onPodIPAsExporter makes redis_exporter serve its metrics on the pod's IP and scrape the server
// there: the flags --web.listen-address=HOST:PORT and --redis.addr=redis://HOST:PORT get the
// pod's IP for their host, which in a pod would be any address and localhost, the pod's own.
func onPodIPAsExporter(ip string, args []string) []string {
	args = slices.Clone(args)
	for i, arg := range args {
		flag, value, _ := strings.Cut(arg, "=")
		switch flag {
		case "--web.listen-address":
			if _, port, err := net.SplitHostPort(value); err == nil {
				args[i] = flag + "=" + net.JoinHostPort(ip, port)
			}
		case "--redis.addr":
			if u, err := url.Parse(value); err == nil && u.Host != "" {
				u.Host = net.JoinHostPort(ip, u.Port())
				args[i] = flag + "=" + u.String()
			}
		}
	}
	return args
}

// asGiven leaves a program's arguments as they are: a client whose connections may come from any
// address.
func asGiven(_ string, args []string) []string { return args }

// operatorBinary is the operator's binary the runner was given, standing in for its image.
func operatorBinary(r *Runner, _ string) (string, error) {
	if r.OperatorBinary == "" {
		return "", errors.New("the runner was given no operator binary (Runner.OperatorBinary)")
	}
	return r.OperatorBinary, nil
}

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

// command is the executable that argv, run by a container of the image on the pod's IP, names,
// and its arguments.
func (r *Runner) command(image, ip string, argv []string) (string, []string, error) {
	if len(argv) == 0 {
		return "", nil, errors.New("it has no command")
	}
	repository := imageRepository(image)
	programs, ok := images[repository]
	if !ok {
		return "", nil, fmt.Errorf("it runs the image %s, which the runner cannot run (it runs %s)", image, strings.Join(slices.Sorted(maps.Keys(images)), ", "))
	}
	name := filepath.Base(argv[0])
	p, ok := programs[name]
	if !ok {
		return "", nil, fmt.Errorf("it runs %q, which the runner does not know in %s (it knows %s)", argv[0], repository, strings.Join(slices.Sorted(maps.Keys(programs)), ", "))
	}
	binary, err := p.find(r, name)
	if err != nil {
		return "", nil, err
	}
	return binary, p.onPodIP(ip, argv[1:]), nil
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
