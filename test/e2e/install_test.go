//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/testenv"
)

func TestMetricsEndpointServesOnlyTheMetricsReader(t *testing.T) {
	o := startOperator(t, "secure", "", "--metrics-secure=true")
	ctx := context.Background()
	ns := newNamespace(t)
	for _, sa := range []string{"prometheus", "stranger"} {
		if err := cluster.Kubectl(ctx, "create", "serviceaccount", sa, "--namespace", ns); err != nil {
			t.Fatal(err)
		}
	}
	binding := "metrics-reader-" + ns
	if err := cluster.Kubectl(ctx, "create", "clusterrolebinding", binding,
		"--clusterrole", "cache-operator-metrics-reader", "--serviceaccount", ns+":prometheus"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Kubectl(ctx, "delete", "clusterrolebinding", binding) })
	token := func(sa string) string {
		out, err := cluster.KubectlOutput(ctx, "create", "token", sa, "--namespace", ns)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}

	// The certificate is self-signed; what is checked here is who may read, not the chain.
	httpClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed test certificate
	}}
	scrape := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+o.MetricsAddr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close() //nolint:errcheck
		return resp.StatusCode, resp.Status
	}
	testenv.WaitFor(t, time.Minute, "the metrics endpoint to serve", func() (bool, string) {
		code, status := scrape("")
		return code != 0, status
	})

	for _, tc := range []struct {
		who   string
		token string
		want  int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a ServiceAccount without the metrics-reader role", token("stranger"), http.StatusForbidden},
		{"a ServiceAccount bound to the metrics-reader role", token("prometheus"), http.StatusOK},
	} {
		// RBAC changes reach the authorizer within moments; wait rather than race it.
		testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("a scrape with %s to get %d", tc.who, tc.want), func() (bool, string) {
			code, status := scrape(tc.token)
			return code == tc.want, status
		})
	}
}

// objects decodes a multi-document YAML stream.
func objects(t *testing.T, stream string) []unstructured.Unstructured {
	t.Helper()
	var out []unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// byIdentity indexes objects by kind, namespace and name.
func byIdentity(objs []unstructured.Unstructured) map[string]unstructured.Unstructured {
	index := map[string]unstructured.Unstructured{}
	for _, o := range objs {
		index[fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())] = o
	}
	return index
}

func helmTemplate(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(testenv.BinDir(), "helm"), append([]string{"template", "cache-operator",
		filepath.Join(testenv.Root(), "charts", "cache-operator"), "--namespace", localcluster.OperatorNamespace}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return string(out)
}

// The Helm chart and the kustomize install are two doors to the same operator: the same
// objects, accepted by the same API server, and the same alerts at the chart's defaults. Serving
// v2 only is a value of the one and an overlay of the other, and they agree on it too.
func TestHelmChartInstallsWhatKustomizeInstalls(t *testing.T) {
	for _, install := range []struct {
		overlay string
		values  []string
	}{
		{"default", nil},
		{"v2-only", []string{"--set", "serveV1=false"}},
	} {
		t.Run(install.overlay, func(t *testing.T) {
			compareInstalls(t, filepath.Join(testenv.Root(), "config", install.overlay),
				helmTemplate(t, append([]string{"--include-crds", "--set", "createNamespace=true"}, install.values...)...))
		})
	}

	// The monitoring objects need the Prometheus Operator's CRDs, which the local cluster
	// lacks; compare them with config/prometheus instead.
	var shipped []unstructured.Unstructured
	for _, file := range []string{"monitor.yaml", "alerts.yaml"} {
		b, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "prometheus", file))
		if err != nil {
			t.Fatal(err)
		}
		shipped = append(shipped, objects(t, string(b))...)
	}
	monitoring := map[string]map[string]any{}
	for _, o := range objects(t, helmTemplate(t, "--set", "prometheus.enabled=true", "--show-only", "templates/monitoring.yaml")) {
		monitoring[o.GetKind()] = o.Object
	}
	if len(monitoring) != len(shipped) {
		t.Fatalf("the chart renders %d monitoring objects, config/prometheus has %d", len(monitoring), len(shipped))
	}
	for _, want := range shipped {
		if !reflect.DeepEqual(want.Object, monitoring[want.GetKind()]) {
			t.Errorf("the chart's %s differs from config/prometheus at the chart's defaults", want.GetKind())
		}
	}
}

// compareInstalls checks that the chart, rendered, installs what the kustomize overlay does, and
// that the API server accepts it.
func compareInstalls(t *testing.T, overlay, rendered string) {
	t.Helper()
	ctx := context.Background()
	kustomized, err := cluster.KubectlOutput(ctx, "kustomize", overlay)
	if err != nil {
		t.Fatal(err)
	}

	k, h := byIdentity(objects(t, kustomized)), byIdentity(objects(t, rendered))
	// Only the chart needs to say that uninstalling keeps the CRDs, and every Cache and backup
	// with them.
	for _, name := range []string{"caches.cache.example.com", "cachebackups.cache.example.com", "cachebackupschedules.cache.example.com"} {
		if crd, ok := h["CustomResourceDefinition /"+name]; ok {
			annotations := crd.GetAnnotations()
			if annotations["helm.sh/resource-policy"] != "keep" {
				t.Errorf("the chart's CRD %s lacks helm.sh/resource-policy: keep; helm uninstall would delete every object of it", name)
			}
			delete(annotations, "helm.sh/resource-policy")
			crd.SetAnnotations(annotations)
		}
	}
	if ks, hs := slices.Sorted(maps.Keys(k)), slices.Sorted(maps.Keys(h)); !slices.Equal(ks, hs) {
		t.Errorf("kustomize installs\n%s\nthe Helm chart\n%s", strings.Join(ks, "\n"), strings.Join(hs, "\n"))
	}
	for id, want := range k {
		if got, ok := h[id]; ok && !reflect.DeepEqual(want.Object, got.Object) {
			t.Errorf("%s differs between kustomize and the Helm chart:\n%s", id, cmp.Diff(want.Object, got.Object))
		}
	}
	chart := filepath.Join(t.TempDir(), "chart.yaml")
	if err := os.WriteFile(chart, []byte(rendered), 0o600); err != nil {
		t.Fatal(err)
	}
	// Forced: the tests have pointed the CRD's conversion webhook elsewhere (ServeWebhooksAt).
	if err := cluster.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", chart); err != nil {
		t.Errorf("the API server refuses the rendered chart: %v", err)
	}
}

// Step 1 of an upgrade of a cluster that serves v2 only applies config/v2-only/crd: the same
// CRD as the whole v2-only install, so that step 2 changes nothing in it.
func TestTheV2OnlyCRDIsTheV2OnlyInstallsCRD(t *testing.T) {
	crd := map[string]unstructured.Unstructured{}
	for _, overlay := range []string{"v2-only", filepath.Join("v2-only", "crd")} {
		out, err := cluster.KubectlOutput(context.Background(), "kustomize", filepath.Join(testenv.Root(), "config", overlay))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objects(t, out) {
			if o.GetKind() == "CustomResourceDefinition" {
				crd[overlay] = o
			}
		}
	}
	whole, alone := crd["v2-only"], crd[filepath.Join("v2-only", "crd")]
	if whole.Object == nil || !reflect.DeepEqual(whole.Object, alone.Object) {
		t.Errorf("config/v2-only/crd differs from the CRD of config/v2-only:\n%s", cmp.Diff(whole.Object, alone.Object))
	}
}
