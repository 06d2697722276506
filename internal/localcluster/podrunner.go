package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PodsDir is where a pod runner of the cluster keeps its pods' directories.
func (c *Cluster) PodsDir() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "pods")
}

func (c *Cluster) podRunnerLock() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "podrunner.lock")
}

// LockPodRunner makes the calling process the cluster's one pod runner, until unlock: two
// runners would each start a server for every pod. The lock file holds the process ID, for
// Delete to stop the runner.
func (c *Cluster) LockPodRunner() (unlock func(), err error) {
	f, err := os.OpenFile(c.podRunnerLock(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("another process runs the pods of cluster %s: %w", c.Name, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// stopPodRunner stops the cluster's pod runner, if one runs, and waits until it has stopped
// its servers and released its lock.
func (c *Cluster) stopPodRunner(ctx context.Context) error {
	f, err := os.Open(c.podRunnerLock())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	signalled := false
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		if !signalled {
			content, err := os.ReadFile(c.podRunnerLock())
			if err != nil {
				return err
			}
			// Empty for a moment while a starting runner writes its pid: look again.
			if pid, err := strconv.Atoi(strings.TrimSpace(string(content))); err == nil {
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
					return fmt.Errorf("stopping the pod runner: %w", err)
				}
				signalled = true
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
