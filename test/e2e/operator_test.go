package e2e

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"example.com/cache-operator/internal/localcluster"
	"example.com/cache-operator/internal/testenv"
)

// operator is one process of the operator's binary.
type operator struct {
	name        string
	cmd         *exec.Cmd
	log         string
	metricsAddr string
	exited      chan struct{}
	exitErr     error
	// allowForbidden is set by tests that take permissions away on purpose; for every other
	// test, a Forbidden error in the operator's log fails it.
	allowForbidden bool
}

// Lease timings of the e2e operators: short, so handovers are quick to observe.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
)

// startOperator starts an operator process under the operator's ServiceAccount, with the
// catalogue at catalogEndpoint (empty: none) and any extra flags. The test kills it when it
// ends, if nothing else has.
func startOperator(t *testing.T, name, catalogEndpoint string, extraArgs ...string) *operator {
	t.Helper()
	o := &operator{
		name:        name,
		log:         filepath.Join(t.TempDir(), name+".log"),
		metricsAddr: testenv.FreeAddr(t),
		exited:      make(chan struct{}),
	}
	args := []string{
		"--kubeconfig", operatorKubeconfig,
		"--leader-election-namespace", localcluster.OperatorNamespace,
		"--leader-elect-lease-duration", leaseDuration.String(),
		"--leader-elect-renew-deadline", renewDeadline.String(),
		"--leader-elect-retry-period", retryPeriod.String(),
		"--metrics-bind-address", o.metricsAddr,
		"--metrics-secure=false",
		"--health-probe-bind-address", testenv.FreeAddr(t),
		"--kube-api-qps", "200", "--kube-api-burst", "400",
		"--catalog-request-timeout", "2s",
	}
	if catalogEndpoint != "" {
		args = append(args, "--catalog-endpoints", catalogEndpoint)
	}
	args = append(args, extraArgs...)
	logFile, err := os.Create(o.log)
	if err != nil {
		t.Fatal(err)
	}
	o.cmd = exec.Command(operatorBinary, args...)
	o.cmd.Stdout, o.cmd.Stderr = logFile, logFile
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		o.exitErr = o.cmd.Wait()
		_ = logFile.Close()
		close(o.exited)
	}()
	t.Cleanup(func() {
		o.signal(syscall.SIGKILL)
		<-o.exited
		logs := o.logs(t)
		if !o.allowForbidden && strings.Contains(strings.ToLower(logs), "forbidden") {
			t.Errorf("operator %s was refused something under its ServiceAccount: the generated RBAC lacks a permission", o.name)
		}
		if t.Failed() {
			t.Logf("log of operator %s:\n%s", o.name, tail(logs, 60))
		}
	})
	return o
}

func (o *operator) signal(sig syscall.Signal) {
	select {
	case <-o.exited:
	default:
		_ = o.cmd.Process.Signal(sig)
	}
}

// stop kills the process with sig and waits until it has exited.
func (o *operator) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	o.signal(sig)
	select {
	case <-o.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("operator %s did not exit after %s", o.name, sig)
	}
}

func (o *operator) logs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(o.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metrics scrapes the operator's metrics endpoint. It returns nil while the endpoint is not up.
func (o *operator) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.metricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close() //nolint:errcheck
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the metrics of operator %s: %v", o.name, err)
	}
	return families
}

// sum adds up the samples of a counter or gauge whose labels include every given one.
func sum(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var total float64
	for _, m := range families[name].GetMetric() {
		if hasLabels(m, labels) {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// mutatingRequests is how many requests that change something the operator has sent to the
// API server, by its own client metrics.
func mutatingRequests(families map[string]*dto.MetricFamily) float64 {
	var n float64
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		n += sum(families, "rest_client_requests_total", map[string]string{"method": verb})
	}
	return n
}

// isLeader reports whether the operator holds the leader election Lease.
func (o *operator) isLeader(t *testing.T) bool {
	return sum(o.metrics(t), "leader_election_master_status", nil) == 1
}

func tail(s string, lines int) string {
	var all []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
