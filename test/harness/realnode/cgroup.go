package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The nodes' cgroups: each node's daemons and pods go under one cgroup of the node's own (its
// kubelet's cgroupRoot), itself under the cgroup of the process that made the cluster, so that
// what the nodes use counts against whatever runs the tests, and removing that one cgroup
// subtree ends every process a node started. These machines mount cgroup v1 hierarchies; a node
// takes the same path in each.

// RunCgroup is the cgroup under which a cluster made by this process puts its nodes: below this
// process's own cgroup in the memory hierarchy, the one that limits what a run may use.
func RunCgroup(cluster string) (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close() //nolint:errcheck // read only
	own := "/"
	for scanner := bufio.NewScanner(f); scanner.Scan(); {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(scanner.Text(), ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			own = parts[2]
		}
	}
	return filepath.Join(own, "cache-operator-"+cluster), nil
}

// hierarchies are the mount points of the machine's cgroup v1 hierarchies.
func hierarchies() ([]string, error) {
	content, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for line := range strings.SplitSeq(string(content), "\n") {
		// The unified hierarchy too, beside the v1 ones: the kubelet makes its cgroups there as well.
		if fields := strings.Fields(line); len(fields) > 2 && (fields[2] == "cgroup" || fields[2] == "cgroup2") {
			dirs = append(dirs, fields[1])
		}
	}
	if len(dirs) == 0 {
		return nil, errors.New("no cgroup v1 hierarchy is mounted: the local cluster's nodes are written for cgroup v1")
	}
	return dirs, nil
}

// MakeRunCgroup makes the cgroup at path in every hierarchy, with the cgroups above it that are
// missing, and returns the directories it made, for RemoveMade: the run's own cgroup is at that
// path in one hierarchy, but in the others the run may be elsewhere and the path new.
func MakeRunCgroup(path string) ([]string, error) {
	dirs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var made []string
	for _, hierarchy := range dirs {
		more, err := makeCgroup(hierarchy, path)
		made = append(made, more...)
		if err != nil {
			return made, err
		}
	}
	return made, nil
}

// RemoveMade removes the cgroups MakeRunCgroup made, deepest first, once they are empty; one
// that something else has come to use stays.
func RemoveMade(made []string) error {
	for _, dir := range slices.Backward(made) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
			return err
		}
	}
	return nil
}

// joinCgroup moves this process into the cgroup at path in every hierarchy, making it where
// missing.
func joinCgroup(path string) error {
	dirs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, hierarchy := range dirs {
		if _, err := makeCgroup(hierarchy, path); err != nil {
			return err
		}
		procs := filepath.Join(hierarchy, path, "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("%s: %w", procs, err)
		}
	}
	return nil
}

// makeCgroup makes the cgroup at path in a hierarchy, and each missing one above it, and returns
// those it made. A new cpuset cgroup has no CPUs and no memory nodes, so no process could join
// it: each gets its parent's.
func makeCgroup(hierarchy, path string) ([]string, error) {
	dir := hierarchy
	var made []string
	for part := range strings.SplitSeq(strings.Trim(path, "/"), "/") {
		parent := dir
		dir = filepath.Join(dir, part)
		switch err := os.Mkdir(dir, 0o755); {
		case err == nil:
			made = append(made, dir)
		case !errors.Is(err, fs.ErrExist):
			return made, err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			own, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil || strings.TrimSpace(string(own)) != "" {
				continue // not a cpuset hierarchy, or already set
			}
			inherited, err := os.ReadFile(filepath.Join(parent, file))
			if err != nil {
				return made, err
			}
			if err := os.WriteFile(filepath.Join(dir, file), inherited, 0o644); err != nil {
				return made, err
			}
		}
	}
	return made, nil
}

// RemoveCgroup kills every process in the cgroup at path and below, in every hierarchy, until
// none is left, and removes the cgroups.
func RemoveCgroup(ctx context.Context, path string) error {
	dirs, err := hierarchies()
	if err != nil {
		return err
	}
	for {
		pids, err := processesUnder(dirs, path)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %v of cgroup %s outlived SIGKILL: %w", pids, path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, hierarchy := range dirs {
		var cgroups []string
		err := filepath.WalkDir(filepath.Join(hierarchy, path), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				cgroups = append(cgroups, p)
			}
			return err
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		// Deepest first: a cgroup with children cannot go.
		slices.Reverse(cgroups)
		for _, cgroup := range cgroups {
			if err := os.Remove(cgroup); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// ContainerProcesses lists the processes of the container with the given ID (as a pod's status
// gives it, without its runtime's prefix) if it runs on the node.
func (spec *Spec) ContainerProcesses(id string) ([]int, error) {
	dirs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	path, err := spec.containerCgroup(dirs[0], id)
	if err != nil || path == "" {
		return nil, err
	}
	return processesUnder(dirs, path)
}

// ContainerMemoryPeak is the most memory the container with the given ID has used, as its memory
// cgroup counts it for its limit (page cache and the copies a fork's child writes included), if
// it runs on the node: found says whether it does.
func (spec *Spec) ContainerMemoryPeak(id string) (peak int64, found bool, err error) {
	dirs, err := hierarchies()
	if err != nil {
		return 0, false, err
	}
	i := slices.IndexFunc(dirs, func(dir string) bool { return filepath.Base(dir) == "memory" })
	if i < 0 {
		return 0, false, errors.New("no memory cgroup hierarchy is mounted at .../memory")
	}
	path, err := spec.containerCgroup(dirs[i], id)
	if err != nil || path == "" {
		return 0, false, err
	}
	content, err := os.ReadFile(filepath.Join(dirs[i], path, "memory.max_usage_in_bytes"))
	if err != nil {
		return 0, false, err
	}
	peak, err = strconv.ParseInt(strings.TrimSpace(string(content)), 10, 64)
	return peak, err == nil, err
}

// containerCgroup is the path of the cgroup of the container with the given ID in a hierarchy,
// or "" if the node runs no such container: the kubelet gives each container a cgroup named by
// its ID, under its pod's, under the node's.
func (spec *Spec) containerCgroup(hierarchy, id string) (string, error) {
	var found string
	err := filepath.WalkDir(filepath.Join(hierarchy, spec.CgroupRoot), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			// A pod's cgroup that went while the walk was under way.
			return nil
		}
		if err == nil && d.IsDir() && d.Name() == id {
			found = p
			return filepath.SkipAll
		}
		return err
	})
	if err != nil || found == "" {
		return "", err
	}
	return filepath.Rel(hierarchy, found)
}

// processesUnder lists the processes in the cgroup at path and below, in any hierarchy.
func processesUnder(dirs []string, path string) ([]int, error) {
	var pids []int
	for _, hierarchy := range dirs {
		err := filepath.WalkDir(filepath.Join(hierarchy, path), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return err
			}
			content, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for field := range strings.FieldsSeq(string(content)) {
				if pid, err := strconv.Atoi(field); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return pids, nil
}

// SignalDaemon sends sig to the node's program of that name (kubelet, containerd, kube-proxy):
// SIGSTOP to its kubelet, say, for a node that stops reporting to the API server while its
// containers run on. It fails if the program does not run.
func (spec *Spec) SignalDaemon(name string, sig syscall.Signal) error {
	dirs, err := hierarchies()
	if err != nil {
		return err
	}
	pids, err := processesUnder(dirs, filepath.Join(spec.CgroupRoot, "system"))
	if err != nil {
		return err
	}
	for _, pid := range pids {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			return syscall.Kill(pid, sig)
		}
	}
	return fmt.Errorf("node %s runs no %s", spec.Name, name)
}
