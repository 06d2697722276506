// Command localcluster manages the local kwokctl cluster that `make run` uses.
//
//	go run ./hack/localcluster up     start it (creating it if needed), install the CRDs and print its kubeconfig path
//	go run ./hack/localcluster kubeconfig   print its kubeconfig path
//	go run ./hack/localcluster down   delete it
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"example.com/cache-operator/internal/localcluster"
)

const nodes = 3

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: localcluster up|kubeconfig|down")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, command string) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	workdir, err := localcluster.DefaultWorkdir()
	if err != nil {
		return err
	}
	c := &localcluster.Cluster{Name: "cache-operator", Workdir: workdir, BinDir: filepath.Join(root, "bin")}

	switch command {
	case "up":
		switch {
		case !c.Exists():
			fmt.Fprintf(os.Stderr, "Creating local cluster %s with %d simulated nodes\n", c.Name, nodes)
			err = c.Create(ctx, nodes)
		case !c.Running(ctx):
			fmt.Fprintf(os.Stderr, "Starting local cluster %s\n", c.Name)
			err = c.Start(ctx)
		}
		if err != nil {
			return err
		}
		if err := c.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "config", "crd")); err != nil {
			return err
		}
		fmt.Println(c.Kubeconfig())
		return nil
	case "kubeconfig":
		fmt.Println(c.Kubeconfig())
		return nil
	case "down":
		if !c.Exists() {
			return nil
		}
		return c.Delete(ctx)
	}
	return fmt.Errorf("unknown command %q: want up, kubeconfig or down", command)
}
