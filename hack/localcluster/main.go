// Command localcluster manages the local kwokctl cluster that `make run` uses.
//
//	go run ./hack/localcluster up             start it (creating it if needed), install the CRDs and print its kubeconfig path
//	go run ./hack/localcluster kubeconfig     print its kubeconfig path
//	go run ./hack/localcluster operator-args  print the flags an operator beside it runs with
//	go run ./hack/localcluster run-pods       run its Valkey pods as real servers until interrupted
//	go run ./hack/localcluster start-pods     run-pods in the background, until down, unless it runs
//	go run ./hack/localcluster down           delete it
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/podrunner"
)

const nodes = 3

// webhookPort is where `make run`'s operator serves the conversion webhook.
const webhookPort = 9443

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: localcluster up|kubeconfig|operator-args|run-pods|start-pods|down")
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
	c := &localcluster.Cluster{Name: "cache-operator", Workdir: workdir, BinDir: filepath.Join(root, "bin"), RealValkey: true}

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
		ok, err := c.LeavesValkeyPodsToRunner()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("local cluster %s was not made to run real Valkey servers (made by an earlier "+
				"version, or its creation stopped half way): delete it with `make local-cluster-down`", c.Name)
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
	case "run-pods":
		return runPods(ctx, c)
	case "start-pods":
		self, err := os.Executable()
		if err != nil {
			return err
		}
		started, err := c.StartPodRunner(self, "run-pods")
		if err == nil && started {
			fmt.Fprintf(os.Stderr, "Started the pod runner of local cluster %s in the background (log: %s); "+
				"like a kubelet it outlives the operator, until `make local-cluster-down`\n", c.Name, c.PodRunnerLog())
		}
		return err
	case "down":
		if !c.Exists() {
			return nil
		}
		return c.Delete(ctx)
	}
	return fmt.Errorf("unknown command %q: want up, kubeconfig, operator-args, run-pods, start-pods or down", command)
}

// runPods runs the cluster's Valkey pods as real valkey-server processes on their pod IPs until
// ctx is done, and then stops them all. One runner at a time may run a cluster's pods.
func runPods(ctx context.Context, c *localcluster.Cluster) error {
	unlock, err := c.LockPodRunner()
	if err != nil {
		return err
	}
	defer unlock()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New())
	runner := &podrunner.Runner{
		Client: clientset,
		BinDir: c.BinDir,
		// make run builds it there before it starts the pods (hack/run.sh).
		OperatorBinary: filepath.Join(c.BinDir, "cache-operator"),
		Workdir:        c.PodsDir(),
		Log:            ctrl.Log.WithName("podrunner"),
	}
	fmt.Fprintln(os.Stderr, "Running the Valkey pods of local cluster", c.Name, "as real servers")
	return runner.Run(ctx)
}
