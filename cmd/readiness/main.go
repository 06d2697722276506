// Command cache-operator-readiness answers the kubelet's readiness probes of the Valkey server
// beside it, in every pod of a Cache (package readiness).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"example.com/cache-operator/internal/readiness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := readiness.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
