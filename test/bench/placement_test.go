//go:build bench

package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/testenv"
)

var placementNodes = flag.Int("placement-nodes", 100, "simulated nodes of the placement measurement, in three zones")

// placementRule is a way to ask the scheduler to keep a Cache's pods apart.
type placementRule struct {
	name  string
	apply func(template *corev1.PodTemplateSpec, selector *metav1.LabelSelector)
}

// preferApart is a preferred pod anti-affinity term against the Cache's own pods, per domain
// of the topology key.
func preferApart(selector *metav1.LabelSelector, key string, weight int32) corev1.WeightedPodAffinityTerm {
	return corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: selector, TopologyKey: key}}
}

// spreadEvenly is a soft topology spread constraint of the Cache's pods over the domains of the
// topology key.
func spreadEvenly(selector *metav1.LabelSelector, key string) corev1.TopologySpreadConstraint {
	return corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: selector}
}

var placementRules = []placementRule{
	{"preferred anti-affinity: nodes", func(p *corev1.PodTemplateSpec, s *metav1.LabelSelector) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{preferApart(s, corev1.LabelHostname, 100)}}}
	}},
	{"preferred anti-affinity: nodes and zones", func(p *corev1.PodTemplateSpec, s *metav1.LabelSelector) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				preferApart(s, corev1.LabelHostname, 100), preferApart(s, corev1.LabelTopologyZone, 50)}}}
	}},
	{"topology spread (soft): nodes and zones", func(p *corev1.PodTemplateSpec, s *metav1.LabelSelector) {
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
			spreadEvenly(s, corev1.LabelHostname), spreadEvenly(s, corev1.LabelTopologyZone)}
	}},
}

// placementRound is one placement rule's measurement: -caches StatefulSets of -replicas pods
// each, created at once.
type placementRound struct {
	// Seconds is from the first create to the last pod bound to a node.
	Seconds float64
	// SchedulerCPUSeconds is the CPU the scheduler took meanwhile.
	SchedulerCPUSeconds float64
	// NodesApart and ZonesApart are the Caches whose pods are all on different nodes, and
	// spread over as many zones as they can be (all, up to three).
	NodesApart, ZonesApart int
}

// TestPlacementSchedulerCost measures what keeping each Cache's pods apart costs the
// scheduler, for each placement rule, in -rounds rounds, and how far apart the pods end up. It
// runs no operator: the StatefulSets are what the operator would make, with the rule's
// placement. `make bench-placement` writes docs/benchmark-placement.md.
func TestPlacementSchedulerCost(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()
	cluster := &localcluster.Cluster{Name: fmt.Sprintf("placement-%d", os.Getpid()), Workdir: work, BinDir: testenv.BinDir()}
	t.Cleanup(func() { _ = cluster.Delete(context.Background()) })
	if err := cluster.Create(ctx, *placementNodes); err != nil {
		t.Fatal(err)
	}
	scheduler, err := cluster.PID("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 2000, 4000
	admin, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}

	results := make([][]placementRound, len(placementRules))
	for round := range *rounds {
		for i, rule := range placementRules {
			ns := fmt.Sprintf("placement-%d-%d", round, i)
			r := measurePlacement(t, admin, scheduler, ns, rule)
			t.Logf("round %d, %s: %+v", round+1, rule.name, r)
			results[i] = append(results[i], r)
		}
	}
	report := placementReport(results)
	t.Log("\n" + report)
	dir := *outDir
	if dir == "" {
		dir = filepath.Join(testenv.Root(), "docs")
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmark-placement.md"), []byte(report), 0o644); err != nil { //nolint:gosec // a document
		t.Fatal(err)
	}
}

// measurePlacement creates the StatefulSets in a namespace of their own, waits until every pod
// is bound to a node, and removes them again.
func measurePlacement(t *testing.T, admin client.Client, scheduler int, ns string, rule placementRule) placementRound {
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	cpuBefore, err := cpuSeconds(scheduler)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	parallel(t, *caches, func(i int) error {
		c := benchCache(ns, i)
		sts := resources.StatefulSet(c, resources.DefaultImages)
		sts.Spec.Template.Spec.Affinity, sts.Spec.Template.Spec.TopologySpreadConstraints = nil, nil
		rule.apply(&sts.Spec.Template, &metav1.LabelSelector{MatchLabels: resources.SelectorLabels(c)})
		return admin.Create(ctx, sts)
	})
	want := *caches * *replicas
	var pods corev1.PodList
	err = wait.PollUntilContextTimeout(ctx, time.Second, *timeout, true, func(ctx context.Context) (bool, error) {
		if err := admin.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == want, nil
	})
	if err != nil {
		t.Fatalf("%s: not every pod was bound to a node: %v", rule.name, err)
	}
	r := placementRound{Seconds: time.Since(start).Seconds()}
	cpuAfter, err := cpuSeconds(scheduler)
	if err != nil {
		t.Fatal(err)
	}
	r.SchedulerCPUSeconds = cpuAfter - cpuBefore
	r.NodesApart, r.ZonesApart = apart(t, admin, pods.Items)

	if err := admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, *timeout, true, func(ctx context.Context) (bool, error) {
		err := admin.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the namespace %s was not removed: %v", ns, err)
	}
	return r
}

// apart counts the Caches whose pods are on as many nodes as they have pods, and on as many
// zones as they can be.
func apart(t *testing.T, admin client.Client, pods []corev1.Pod) (nodesApart, zonesApart int) {
	var nodes corev1.NodeList
	if err := admin.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	zoneOf := map[string]string{}
	for _, n := range nodes.Items {
		zoneOf[n.Name] = n.Labels[corev1.LabelTopologyZone]
	}
	byCache := map[string][]string{}
	for _, p := range pods {
		byCache[p.Labels[resources.LabelInstance]] = append(byCache[p.Labels[resources.LabelInstance]], p.Spec.NodeName)
	}
	distinct := func(values []string) int { return len(slices.Compact(slices.Sorted(slices.Values(values)))) }
	for _, onNodes := range byCache {
		zones := make([]string, len(onNodes))
		for i, n := range onNodes {
			zones[i] = zoneOf[n]
		}
		if distinct(onNodes) == len(onNodes) {
			nodesApart++
		}
		if distinct(zones) == min(len(onNodes), len(localcluster.Zones)) {
			zonesApart++
		}
	}
	return nodesApart, zonesApart
}

// placementReport is the measurement as a Markdown table: per rule, the median and the worst of
// the rounds.
func placementReport(results [][]placementRound) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Placement: the scheduler's cost\n\n%d StatefulSets of %d pods each (%d pods), created at once, "+
		"%d concurrent requests, on %d simulated nodes in %d zones; rounds per rule: %d, one rule after the other. "+
		"Median (worst) of the rounds. Written by `make bench-placement` (%s, %d CPUs).\n\n",
		*caches, *replicas, *caches**replicas, *concurrency, *placementNodes, len(localcluster.Zones), *rounds,
		time.Now().UTC().Format("2006-01-02"), machine().CPUs)
	b.WriteString("| rule | create → all bound, s | scheduler CPU, s | per pod, ms CPU | Caches on distinct nodes | Caches over 3 zones |\n|---|---|---|---|---|---|\n")
	for i, rule := range placementRules {
		rounds := results[i]
		stat := func(f func(placementRound) float64, worst func([]float64) float64) (float64, float64) {
			values := make([]float64, len(rounds))
			for j, r := range rounds {
				values[j] = f(r)
			}
			slices.Sort(values)
			return values[len(values)/2], worst(values)
		}
		highest := func(v []float64) float64 { return v[len(v)-1] }
		lowest := func(v []float64) float64 { return v[0] }
		seconds, secondsWorst := stat(func(r placementRound) float64 { return r.Seconds }, highest)
		cpu, cpuWorst := stat(func(r placementRound) float64 { return r.SchedulerCPUSeconds }, highest)
		nodes, nodesWorst := stat(func(r placementRound) float64 { return float64(r.NodesApart) }, lowest)
		zones, zonesWorst := stat(func(r placementRound) float64 { return float64(r.ZonesApart) }, lowest)
		perPod := 1000 / float64(*caches**replicas)
		fmt.Fprintf(&b, "| %s | %.1f (%.1f) | %.1f (%.1f) | %.2f (%.2f) | %.0f (%.0f) of %d | %.0f (%.0f) of %d |\n", rule.name,
			seconds, secondsWorst, cpu, cpuWorst, cpu*perPod, cpuWorst*perPod, nodes, nodesWorst, *caches, zones, zonesWorst, *caches)
	}
	return b.String()
}
