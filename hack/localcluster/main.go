// Command localcluster manages the local cluster that `make run` uses: a kwokctl control plane
// with real nodes (package realnode), whose pods are containers.
//
//	go run ./hack/localcluster up             start it (creating it if needed), install the CRDs and print its kubeconfig path
//	go run ./hack/localcluster kubeconfig     print its kubeconfig path
//	go run ./hack/localcluster operator-args  print the flags an operator beside it runs with
//	go run ./hack/localcluster down           delete it
//	go run ./hack/localcluster s3             serve an S3 bucket the cluster's pods reach, for trying backups, until stopped
//	go run ./hack/localcluster s3-endpoint    print that server's host:port
//	go run ./hack/localcluster node SPECFILE  run one of its real nodes (the cluster starts them)
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/realnode"
)

const nodes = 3

// webhookPort is where `make run`'s operator serves the conversion webhook.
const webhookPort = 9443

func main() {
	if len(os.Args) == 3 && os.Args[1] == "node" {
		// A real node, in the namespaces its cluster started it in, until it is stopped.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		spec, err := realnode.ReadSpec(os.Args[2])
		if err == nil {
			err = realnode.Run(ctx, spec)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "node:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: localcluster up|kubeconfig|operator-args|down|s3|s3-endpoint")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
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
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c := &localcluster.Cluster{Name: "cache-operator", Workdir: workdir, BinDir: filepath.Join(root, "bin"),
		RealNodes: nodes, NodeBinary: self}

	switch command {
	case "up":
		images := filepath.Join(workdir, c.Name+"-images")
		switch {
		case !c.Exists():
			fmt.Fprintf(os.Stderr, "Building the images of local cluster %s\n", c.Name)
			if c.Images, err = localcluster.BuildImages(root, c.BinDir, images); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "Creating local cluster %s with %d real nodes\n", c.Name, nodes)
			err = c.Create(ctx, 0)
		case !c.Running(ctx):
			fmt.Fprintf(os.Stderr, "Starting local cluster %s\n", c.Name)
			if c.Images, err = filepath.Glob(filepath.Join(images, "*.tar")); err == nil {
				err = c.Start(ctx)
			}
		}
		if err != nil {
			return err
		}
		if _, ok, err := c.Plan(); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("local cluster %s has no real nodes (made by an earlier version, or its creation stopped "+
				"half way): delete it with `make local-cluster-down`", c.Name)
		}
		if err := c.InstallOperatorAccess(ctx, root); err != nil {
			return err
		}
		if err := c.ServeWebhooksAt(ctx, root, webhookPort); err != nil {
			return err
		}
		fmt.Println(c.Kubeconfig())
		return nil
	case "kubeconfig":
		fmt.Println(c.Kubeconfig())
		return nil
	case "operator-args":
		// Out of a cluster the manager cannot infer a namespace for its leader election Lease.
		args := append([]string{"--leader-election-namespace=" + localcluster.OperatorNamespace}, localcluster.OperatorWebhookArgs(webhookPort)...)
		fmt.Println(strings.Join(args, " "))
		return nil
	case "down":
		if !c.Exists() {
			return nil
		}
		return c.Delete(ctx)
	case "s3":
		return serveS3(ctx, c)
	case "s3-endpoint":
		endpoint, err := s3Endpoint(c)
		if err == nil {
			fmt.Println(endpoint)
		}
		return err
	}
	return fmt.Errorf("unknown command %q: want up, kubeconfig, operator-args, down, s3 or s3-endpoint", command)
}

// The local S3 server's port, bucket and credentials: fixed, so that the walkthrough in
// docs/backup-restore.md works when pasted.
const (
	s3Port      = 9000
	s3Bucket    = "backups"
	s3AccessKey = "local-cluster"
	s3SecretKey = "local-cluster-secret"
)

// s3Endpoint is where serveS3 serves: the machine's address on the cluster's bridge.
func s3Endpoint(c *localcluster.Cluster) (string, error) {
	plan, ok, err := c.Plan()
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("local cluster %s has no real nodes: start it with `make run` first", c.Name)
	}
	return net.JoinHostPort(plan.HostIP().String(), strconv.Itoa(s3Port)), nil
}

// serveS3 runs the toolchain's versitygw until ctx ends, on the machine's address on the
// cluster's bridge, where the pods reach it, over a directory in the cluster's own, so that
// `make local-cluster-down` removes the backups with the cluster.
func serveS3(ctx context.Context, c *localcluster.Cluster) error {
	endpoint, err := s3Endpoint(c)
	if err != nil {
		return err
	}
	if !c.Running(ctx) {
		return fmt.Errorf("local cluster %s is not running: start it with `make run` first", c.Name)
	}
	dir := filepath.Join(filepath.Dir(c.Kubeconfig()), "s3")
	// versitygw's posix backend serves each directory of its root as a bucket.
	if err := os.MkdirAll(filepath.Join(dir, s3Bucket), 0o700); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, `Serving S3 at %[1]s, bucket %[2]q, until stopped (Ctrl-C); the backups are removed with the cluster.
A CacheBackup's storage:  {endpoint: %[1]s, insecure: true, bucket: %[2]s, credentialsSecret: local-s3}
Its Secret, in the Cache's namespace:
  kubectl create secret generic local-s3 --from-literal=%[3]s=%[4]s --from-literal=%[5]s=%[6]s
`, endpoint, s3Bucket, cachev1alpha1.SecretKeyAccessKeyID, s3AccessKey, cachev1alpha1.SecretKeySecretAccessKey, s3SecretKey)
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "versitygw"), "--port", endpoint,
		"--access", s3AccessKey, "--secret", s3SecretKey, "posix", dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("versitygw: %w", err)
	}
	return nil
}
