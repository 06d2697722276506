package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// PodRunnerLog is where a pod runner started in the background (StartPodRunner) writes its log.
func (c *Cluster) PodRunnerLog() string {
	return filepath.Join(c.Logs(), "podrunner.log")
}

// PodRunnerRunning reports whether a process runs the cluster's pods (holds LockPodRunner's
// lock).
func (c *Cluster) PodRunnerRunning() (bool, error) {
	f, err := os.OpenFile(c.podRunnerLock(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, err
	}
	defer f.Close() //nolint:errcheck // read only for the lock
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return true, nil
		}
		return false, err
	}
	return false, syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// StartPodRunner starts argv, a command that runs the cluster's pods until it is signalled, in
// the background, in a session of its own and with its output in PodRunnerLog, unless a pod
// runner already runs: as a kubelet does, it outlives whatever started it (an operator that
// crashes, a terminal's Ctrl-C), so that the cache servers keep serving. Delete stops it. It
// reports whether it started one.
func (c *Cluster) StartPodRunner(argv ...string) (bool, error) {
	if running, err := c.PodRunnerRunning(); err != nil || running {
		return false, err
	}
	if err := os.MkdirAll(c.Logs(), 0o700); err != nil {
		return false, err
	}
	log, err := os.OpenFile(c.PodRunnerLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return false, err
	}
	defer log.Close() //nolint:errcheck // the child has its own copy
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	return true, cmd.Process.Release()
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
