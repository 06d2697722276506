package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/internal/localcluster"
	"example.com/cache-operator/internal/testenv"
)

// The install manifests are accepted by a real API server, and the Deployment's pods pass the
// restricted Pod Security admission that the namespace enforces.
func TestDefaultInstallIsAcceptedAndPodsAreRestricted(t *testing.T) {
	ctx := context.Background()
	if err := cluster.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(testenv.Root(), "config", "default")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kubectl(ctx, "delete", "deployment/cache-operator", "--namespace", localcluster.OperatorNamespace)
	})
	waitFor(t, 2*time.Minute, "the operator Deployment to be available", func() (bool, string) {
		var d appsv1.Deployment
		if err := admin.Get(ctx, client.ObjectKey{Namespace: localcluster.OperatorNamespace, Name: "cache-operator"}, &d); err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == 2, fmt.Sprintf("%d/2 available, conditions %+v", d.Status.AvailableReplicas, d.Status.Conditions)
	})
}

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
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+o.metricsAddr+"/metrics", nil)
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
	waitFor(t, time.Minute, "the metrics endpoint to serve", func() (bool, string) {
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
		waitFor(t, 30*time.Second, fmt.Sprintf("a scrape with %s to get %d", tc.who, tc.want), func() (bool, string) {
			code, status := scrape(tc.token)
			return code == tc.want, status
		})
	}
}
