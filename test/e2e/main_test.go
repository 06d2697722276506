//go:build e2e

// Package e2e tests the operator as a whole on a real control plane: a kwokctl cluster built
// from the toolchain, with the real StatefulSet controller, scheduler and garbage collector and
// kwok playing the kubelet. The operator runs as its real binary, in processes the tests start
// and kill, under its own ServiceAccount so that only the generated RBAC applies. Behind every
// cache pod runs a real valkey-server (package podrunner), on the pod's loopback IP. A second
// cluster (realCluster) has real nodes, whose pods are containers of images built from this
// checkout, and runs the operator installed from its image as users install it; the scenarios
// move there one by one.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/podrunner"
	"example.com/cache-operator/test/harness/testenv"
)

// Shared by every test of the package, set up once by TestMain.
var (
	cluster *localcluster.Cluster
	// admin is a client with the cluster admin's rights, for the tests' own reads and writes.
	admin client.WithWatch
	// operatorBinary is the operator, built from this checkout.
	operatorBinary string
	// operatorKubeconfig authenticates as the operator's ServiceAccount.
	operatorKubeconfig string
	// runner runs the cache pods' servers.
	runner *podrunner.Runner
	// webhooks plays the webhook Service: the API server's conversion requests reach the
	// running operators' webhooks through it.
	webhooks *testenv.Balancer
	// realCluster is a second cluster, whose pods run as containers on real nodes (package
	// realnode), from images built here; the operator is installed in it from its image. The
	// first test that needs it makes it (useRealCluster).
	realCluster     *localcluster.Cluster
	realClusterErr  error
	realClusterOnce sync.Once
	// workdir holds the clusters' directories, the binaries and the images built for the run.
	workdir string
)

// realNodes is how many real nodes realCluster has: a Cluster's shards spread over three.
const realNodes = 3

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests that run beside the others (runBeside) wait on servers, elections and timeouts
	// more than they compute: more of them at once than Go's default of one per core, unless
	// the command line says otherwise.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(besideAtOnce)); err != nil {
			os.Exit(fail(err))
		}
	}
	os.Exit(run(m))
}

// besideAtOnce is how many tests run beside each other by default: four on two cores starved
// the servers' readiness probes, and a scale-out beside two others crawled (it runs alone).
const besideAtOnce = 3

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if workdir, err = os.MkdirTemp("", "cache-operator-e2e-"); err != nil {
		return fail(err)
	}
	defer os.RemoveAll(workdir) //nolint:errcheck
	// Before the directory goes: the nodes run from it.
	defer deleteRealCluster()

	if operatorBinary, err = testenv.BuildOperator(ctx, workdir); err != nil {
		return fail(err)
	}

	cluster = &localcluster.Cluster{
		Name:       fmt.Sprintf("e2e-%d", os.Getpid()),
		Workdir:    workdir,
		BinDir:     testenv.BinDir(),
		RealValkey: true,
	}
	// Removed however the tests end; a failed create may have left parts behind too.
	defer func() {
		if err := cluster.Delete(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "deleting the e2e cluster:", err)
		}
	}()
	if err := cluster.Create(ctx, 4); err != nil {
		return fail(err)
	}
	if err := cluster.InstallOperatorAccess(ctx, testenv.Root()); err != nil {
		return fail(err)
	}
	if webhooks, err = testenv.NewBalancer(); err != nil {
		return fail(err)
	}
	defer webhooks.Close() //nolint:errcheck
	if err := cluster.ServeWebhooksAt(ctx, testenv.Root(), webhooks.Port()); err != nil {
		return fail(err)
	}
	operatorKubeconfig = filepath.Join(workdir, "operator.kubeconfig")
	if err := cluster.WriteOperatorKubeconfig(ctx, operatorKubeconfig); err != nil {
		return fail(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig())
	if err != nil {
		return fail(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	if admin, err = client.NewWithWatch(cfg, client.Options{Scheme: controller.NewScheme()}); err != nil {
		return fail(err)
	}
	stopRunner, err := startRunner(cfg, filepath.Join(workdir, "pods"))
	if err != nil {
		return fail(err)
	}
	defer stopRunner()
	return m.Run()
}

// useRealCluster makes realCluster, once, for the tests that run on real nodes: the others
// neither wait for its three nodes nor share the machine with them until then.
func useRealCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	realClusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		realCluster, realClusterErr = newRealCluster(ctx)
	})
	if realClusterErr != nil {
		t.Fatal("making the cluster with real nodes:", realClusterErr)
	}
	return realCluster
}

// deleteRealCluster deletes realCluster if a test made it, whether making it succeeded or not.
func deleteRealCluster() {
	if realCluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := realCluster.Delete(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "deleting the e2e cluster with real nodes:", err)
	}
}

// newRealCluster creates realCluster, with the images of this checkout. It returns the cluster
// whenever it started making it, for deleteRealCluster.
func newRealCluster(ctx context.Context) (*localcluster.Cluster, error) {
	nodeBinary, err := testenv.Build(ctx, "./hack/localcluster", filepath.Join(workdir, "localcluster"))
	if err != nil {
		return nil, err
	}
	archives, err := localcluster.BuildImages(testenv.Root(), testenv.BinDir(), filepath.Join(workdir, "images"))
	if err != nil {
		return nil, err
	}
	c := &localcluster.Cluster{
		Name: fmt.Sprintf("e2e-real-%d", os.Getpid()), Workdir: workdir, BinDir: testenv.BinDir(),
		RealNodes: realNodes, NodeBinary: nodeBinary, Images: archives,
	}
	return c, c.Create(ctx, 0)
}

// startRunner starts the pod runner; the function it returns stops it, which kills every server
// it started, and reports what starting a pod cost.
func startRunner(cfg *rest.Config, workdir string) (stop func(), err error) {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	runner = &podrunner.Runner{Client: clientset, BinDir: testenv.BinDir(), OperatorBinary: operatorBinary,
		Workdir: workdir, Log: ctrl.Log.WithName("podrunner")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "pod runner:", err)
		}
		fmt.Fprintln(os.Stderr, "pod runner:", runner.StartupSummary())
	}, nil
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "e2e setup:", err)
	return 1
}
