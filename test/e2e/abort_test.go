//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"example.com/cache-operator/test/harness/localcluster"
)

// deleteOnAbort deletes the clusters, stops the processes and removes the directory the run
// made if it is stopped before TestMain's deferred deletes can run: by SIGINT or SIGTERM, or by
// go test's -timeout, which panics and so skips them. A run killed that way used to leave a whole cluster running (an
// API server, kubelets, containers, the nodes' namespaces and cgroups), and `go test` waiting on
// the pipe its processes held. The timeout is met a minute early, with every goroutine's stack
// written out in place of the panic's.
func deleteOnAbort(clusters ...*localcluster.Cluster) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	var early <-chan time.Time
	if timeout := flag.Lookup("test.timeout"); timeout != nil {
		if d, ok := timeout.Value.(flag.Getter).Get().(time.Duration); ok && d > 2*time.Minute {
			early = time.After(d - time.Minute)
		}
	}
	go func() {
		select {
		case s := <-signals:
			fmt.Fprintf(os.Stderr, "e2e: %v: deleting the test clusters\n", s)
		case <-early:
			fmt.Fprintln(os.Stderr, "e2e: a minute before -test.timeout: every goroutine, then deleting the test clusters")
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, c := range clusters {
			if c.Exists() {
				if err := c.Delete(ctx); err != nil {
					fmt.Fprintln(os.Stderr, "deleting", c.Name, err)
				}
			}
		}
		killChildren()
		_ = os.RemoveAll(workdir)
		os.Exit(1)
	}()
}

// killChildren kills the processes this one started that are still running: the operators the
// tests start, and whatever those left.
func killChildren() {
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// The fields after the command's name, in parentheses: state, then the parent's pid.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == self {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(stat))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
