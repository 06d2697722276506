// Command pause is the process of the local cluster's pod sandboxes (the image
// registry.k8s.io/pause of test/harness/images): it holds the pod's namespaces until the runtime
// stops it with SIGTERM or SIGINT, and then exits 0. As PID 1 of the pod's PID namespace, where the
// kernel re-parents the orphans of a pod that shares it, it reaps them, lest they stay zombies.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Two channels: a full one drops signals, and a stop must not be lost behind a SIGCHLD.
	stop, child := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			// One SIGCHLD may stand for several children: reap all that have exited.
			for {
				if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
