//go:build e2e

// Package e2e tests the operator as a whole on a real control plane and real nodes: a kwokctl
// cluster built from the toolchain, with the real StatefulSet controller, scheduler and garbage
// collector, and kubelets with containerd and runc (package realnode) that run the cache pods as
// containers of images built from this checkout. The operator runs as its real binary, in
// processes on the machine that the tests start and kill, under its own ServiceAccount so that
// only the generated RBAC applies; it reaches the pods at their addresses, as in-cluster, through
// the machine's routes to the nodes. A second cluster (installCluster), with real nodes too, runs
// the operator installed from its image as users install it (Helm, kustomize), for the tests of
// the install itself.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/releases"
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
	// webhooks plays the webhook Service: the API server's conversion requests reach the
	// running operators' webhooks through it.
	webhooks *testenv.Balancer
	// installCluster is a second cluster, where the operator is installed from its image, as
	// users install it, with CRDs and webhooks of its own: TestTheOperatorAsUsersInstallIt
	// makes it for its subtests and deletes it after them.
	installCluster *localcluster.Cluster
	// workdir holds the clusters' directories, the binaries and the images built for the run.
	workdir string
	// nodeBinary runs the real nodes (hack/localcluster), and images are the archives they
	// import.
	nodeBinary string
	images     []string
	// valkeys are the toolchain's Valkey releases, oldest first, each an image of the nodes;
	// valkeyVersion is the newest's version, which users run and every scenario runs unless it
	// is about another release.
	valkeys       []releases.Valkey
	valkeyVersion string
)

// missingVersion is a Valkey release that no node has an image of, nor a registry to pull one
// from: what a Cache meets on a cluster that cannot pull its version.
const missingVersion = "9.99.0"

// setUpTimeout bounds TestMain's set-up.
const setUpTimeout = 15 * time.Minute

// realNodes is how many real nodes the tests' cluster has for their pods: a Cluster's shards
// spread over three, and a drain needs a fourth to move a pod to. isolatedNodes more are for the
// tests that take whole nodes down (runOnIsolatedNodes): three, for the same spread, and a
// drain still leaves two, for a shard's primary and its replica.
const realNodes, isolatedNodes = 4, 3

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests that run beside the others (runBeside) wait on servers, elections and timeouts
	// more than they compute: more of them at once than Go's default of one per core, unless
	// the command line says otherwise. besideSlot hands their places out, the longest tests
	// first; Go's own limit is lifted so that it does not hand them out first.
	places.free = besideAtOnce
	if f := flag.Lookup("test.parallel"); f != nil {
		explicit := false
		flag.Visit(func(set *flag.Flag) { explicit = explicit || set == f })
		if n, err := strconv.Atoi(f.Value.String()); explicit && err == nil {
			places.free = n
		}
		if err := flag.Set("test.parallel", "1000"); err != nil {
			os.Exit(fail(err))
		}
	}
	os.Exit(run(m))
}

// besideAtOnce is how many tests run beside each other by default. With exec readiness probes,
// four on two cores starved the probes. With the readiness agent (HTTP probes) three at once
// leave the two cores about 40 % idle over the whole tier, but six failed five tests in one tier
// on two cores (pods not ready or not gone within their minute, a server not answering a
// connection within its timeout): the servers and the kubelets still share the cores. Four took
// the machine's load average to 98 and the tier's end only 58 s sooner (1,843 s against 1,901):
// beside each other the tests are bound by the two cores, not by waiting.
const besideAtOnce = 3

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	// The set-up builds the operator and the node runner, then the images, and creates the
	// cluster. On a fresh machine the builds compile from an empty Go build cache, on cores that
	// `go test ./...` shares with the other packages' tests: 5 minutes did not always do.
	ctx, cancel := context.WithTimeout(context.Background(), setUpTimeout)
	defer cancel()
	var err error
	if workdir, err = os.MkdirTemp("", "cache-operator-e2e-"); err != nil {
		return fail(err)
	}
	defer os.RemoveAll(workdir) //nolint:errcheck
	if operatorBinary, err = testenv.BuildOperator(ctx, workdir); err != nil {
		return fail(err)
	}
	if nodeBinary, err = testenv.Build(ctx, "./hack/localcluster", filepath.Join(workdir, "localcluster")); err != nil {
		return fail(err)
	}
	// The previous releases' operators, which the upgrade rehearsals start from, compile while
	// the images and the cluster are made; builtRelease hands each build to the tests that ask
	// for it. On a fresh machine each compiles its own versions of every module: the rehearsal
	// from v1, which runs alone, took 8 minutes there, and held back every test after it.
	previous, err := testenv.PreviousReleases()
	if err != nil {
		return fail(err)
	}
	for _, name := range previous {
		go builtRelease(name) //nolint:errcheck // the rehearsal that uses the build reports its error
	}
	if images, err = localcluster.BuildImages(testenv.Root(), testenv.BinDir(), filepath.Join(workdir, "images")); err != nil {
		return fail(err)
	}
	if valkeys, err = releases.Valkeys(testenv.BinDir()); err != nil {
		return fail(err)
	}
	valkeyVersion = valkeys[len(valkeys)-1].Version

	cluster = newRealCluster(fmt.Sprintf("e2e-%d", os.Getpid()), realNodes+isolatedNodes)
	cluster.IsolatedNodes = isolatedNodes
	deleteOnAbort(cluster, newRealCluster(installClusterName(), installNodes))
	// Removed however the tests end; a failed create may have left parts behind too.
	defer func() {
		if err := cluster.Delete(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "deleting the e2e cluster:", err)
		}
	}()
	if err := cluster.Create(ctx, 0); err != nil {
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
	return m.Run()
}

// newRealCluster is a cluster of the run with the given number of real nodes, which import the
// images of this checkout.
func newRealCluster(name string, nodes int) *localcluster.Cluster {
	return &localcluster.Cluster{Name: name, Workdir: workdir, BinDir: testenv.BinDir(),
		RealNodes: nodes, NodeBinary: nodeBinary, Images: images}
}

// installClusterName names installCluster, which has installNodes real nodes.
func installClusterName() string { return fmt.Sprintf("e2e-install-%d", os.Getpid()) }

const installNodes = 3

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "e2e setup:", err)
	return 1
}
