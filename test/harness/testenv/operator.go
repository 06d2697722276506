package testenv

import (
	"bufio"
	"context"
	"fmt"
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
)

// BuildOperator builds the operator's binary from this checkout into dir.
func BuildOperator(ctx context.Context, dir string) (string, error) {
	return Build(ctx, "./cmd", filepath.Join(dir, "cache-operator"))
}

// Build builds the package pkg of this checkout (./hack/localcluster, say) into the binary bin.
func Build(ctx context.Context, pkg, bin string) (string, error) {
	if err := goBuild(ctx, Root(), pkg, bin); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return bin, nil
}

// goBuild builds the package pkg of the module in dir into bin, static and -trimpath as the
// images' programs are built (test/harness/images) and `make test` builds everything: Go's build
// cache keys a package by these flags, so the operator compiled here is the images' too.
func goBuild(ctx context.Context, dir, pkg, bin string) error {
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
	build.Dir, build.Stdout, build.Stderr = dir, os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	return build.Run()
}

// Operator is one process of the operator's binary, with its log in a file.
type Operator struct {
	Name string
	// MetricsAddr is where it serves metrics (plain HTTP unless the caller asks otherwise).
	MetricsAddr string
	// ProbeAddr is where it serves /healthz and /readyz.
	ProbeAddr string
	// WebhookAddr is where it serves the conversion webhook, when the caller gave it one.
	WebhookAddr string
	// Exited is closed when the process has exited; ExitErr is then its exit status.
	Exited  chan struct{}
	ExitErr error
	// AllowForbidden is set by tests that take permissions away on purpose; otherwise a
	// Forbidden error in the log fails the test.
	AllowForbidden bool

	cmd *exec.Cmd
	log string
}

// KeepOperatorLogs names the environment variable that, set to a directory, has every operator a
// test starts leave its whole log there, as TEST-NAME.log, whether the test passes or fails.
const KeepOperatorLogs = "CACHE_OPERATOR_KEEP_LOGS"

// StartOperator starts the binary with kubeconfig and the given flags, plus its own metrics and
// probe addresses. The test kills it when it ends, if nothing else has, and shows the end of
// its log if the test failed.
func StartOperator(t testing.TB, binary, name, kubeconfig string, args ...string) *Operator {
	t.Helper()
	o := &Operator{
		Name:        name,
		MetricsAddr: FreeAddr(t),
		ProbeAddr:   FreeAddr(t),
		Exited:      make(chan struct{}),
		log:         filepath.Join(t.TempDir(), name+".log"),
	}
	args = append([]string{
		"--kubeconfig", kubeconfig,
		"--metrics-bind-address", o.MetricsAddr,
		"--metrics-secure=false",
		"--health-probe-bind-address", o.ProbeAddr,
	}, args...)
	logFile, err := os.Create(o.log)
	if err != nil {
		t.Fatal(err)
	}
	o.cmd = exec.Command(binary, args...)
	o.cmd.Stdout, o.cmd.Stderr = logFile, logFile
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		o.ExitErr = o.cmd.Wait()
		_ = logFile.Close()
		close(o.Exited)
	}()
	t.Cleanup(func() {
		o.Signal(syscall.SIGKILL)
		<-o.Exited
		logs := o.Logs(t)
		// The whole log, kept for reading a passing run's steps (a failing run shows its end).
		if dir := os.Getenv(KeepOperatorLogs); dir != "" {
			file := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+o.Name+".log")
			err := os.MkdirAll(dir, 0o755)
			if err == nil {
				err = os.WriteFile(file, []byte(logs), 0o644)
			}
			if err != nil {
				t.Errorf("keeping the operator's log: %v", err)
			}
		}
		if line := refused(logs); !o.AllowForbidden && line != "" {
			t.Errorf("operator %s was refused something under its ServiceAccount: the generated RBAC lacks a permission: %s", o.Name, line)
		}
		if t.Failed() {
			t.Logf("log of operator %s:\n%s", o.Name, tail(logs, 60))
		}
	})
	return o
}

// Ready reports whether the process answers its readiness probe: for this operator, whether its
// conversion webhook serves.
func (o *Operator) Ready() bool {
	resp, err := http.Get("http://" + o.ProbeAddr + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Signal sends sig to the process if it still runs.
func (o *Operator) Signal(sig syscall.Signal) {
	select {
	case <-o.Exited:
	default:
		_ = o.cmd.Process.Signal(sig)
	}
}

// Stop sends sig and waits until the process has exited.
func (o *Operator) Stop(t testing.TB, sig syscall.Signal) {
	t.Helper()
	o.Signal(sig)
	select {
	case <-o.Exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("operator %s did not exit after %s", o.Name, sig)
	}
}

// Logs is what the process has logged so far.
func (o *Operator) Logs(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(o.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// PID is the process's ID.
func (o *Operator) PID() int { return o.cmd.Process.Pid }

// Metrics scrapes the operator's metrics endpoint. It returns nil while the endpoint is not up,
// and fails the test on metrics it cannot parse. Call it from the test's goroutine only.
func (o *Operator) Metrics(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := o.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// Scrape is Metrics for any goroutine: it returns the parse error rather than failing the test.
func (o *Operator) Scrape() (map[string]*dto.MetricFamily, error) {
	families, err := ScrapeMetrics("http://" + o.MetricsAddr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("operator %s: %w", o.Name, err)
	}
	return families, nil
}

// ScrapeMetrics reads the Prometheus metrics served at url. It returns nil while nothing serves
// them there: nothing answers, or the answer is not 200 OK, which holds no metrics (one such
// answer, just after an operator started, once failed a test as unparseable metrics). It returns
// an error for metrics it cannot parse.
func ScrapeMetrics(url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil // not up (yet, or any more)
	}
	defer resp.Body.Close() //nolint:errcheck
	if resp.StatusCode != http.StatusOK {
		return nil, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing the metrics at %s: %w", url, err)
	}
	return families, nil
}

// Sum adds up the samples of a counter or gauge whose labels include every given one.
func Sum(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
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

// MutatingVerbs are the HTTP methods of requests that change something stored.
var MutatingVerbs = []string{"POST", "PUT", "PATCH", "DELETE"}

// MutatingRequests is how many requests that change something the operator has sent to the
// API server, by its own client metrics.
func MutatingRequests(families map[string]*dto.MetricFamily) float64 {
	var n float64
	for _, verb := range MutatingVerbs {
		n += Sum(families, "rest_client_requests_total", map[string]string{"method": verb})
	}
	return n
}

// refused is the first line of the log in which the API server refused the operator something,
// or "". A write into a namespace being deleted is refused as Forbidden too, but says so: it is
// the namespace's end, not a permission the operator lacks (a pass that was under way when a
// test removed its namespace).
func refused(logs string) string {
	for line := range strings.Lines(logs) {
		if lower := strings.ToLower(line); strings.Contains(lower, "forbidden") && !strings.Contains(lower, "because it is being terminated") {
			return strings.TrimSpace(line)
		}
	}
	return ""
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

// PreviousRelease is the commit of the release of the given name in hack/previous-release: a
// release this one upgrades from.
func PreviousRelease(name string) (string, error) {
	releases, err := previousReleases()
	if err != nil {
		return "", err
	}
	for _, r := range releases {
		if r[0] == name {
			return r[1], nil
		}
	}
	return "", fmt.Errorf("%s names no release %q", previousReleasesFile(), name)
}

// PreviousReleases are the names of the releases in hack/previous-release.
func PreviousReleases() ([]string, error) {
	releases, err := previousReleases()
	var names []string
	for _, r := range releases {
		names = append(names, r[0])
	}
	return names, err
}

func previousReleasesFile() string { return filepath.Join(Root(), "hack", "previous-release") }

// previousReleases are hack/previous-release's lines, each a name and a commit.
func previousReleases() ([][2]string, error) {
	b, err := os.ReadFile(previousReleasesFile())
	if err != nil {
		return nil, err
	}
	var releases [][2]string
	for line := range strings.Lines(string(b)) {
		if fields := strings.Fields(line); len(fields) == 2 && !strings.HasPrefix(fields[0], "#") {
			releases = append(releases, [2]string{fields[0], fields[1]})
		}
	}
	return releases, nil
}

// BuildRelease extracts an earlier commit of this repository from its own history into
// dir/source and builds that commit's operator as dir/cache-operator (the same file name as
// the current one's, so that both write as the same field manager). It fails with a clear message
// when the clone lacks that history.
func BuildRelease(ctx context.Context, commit, dir string) (binary, source string, err error) {
	if out, err := exec.CommandContext(ctx, "git", "-C", Root(), "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("commit %s, the previous release, is not in this clone's history "+
			"(a shallow clone? `git fetch --unshallow` brings it): %w: %s", commit, err, out)
	}
	source = filepath.Join(dir, "source")
	if err := os.MkdirAll(source, 0o755); err != nil {
		return "", "", err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", Root(), commit, source)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("extracting %s: %w: %s", commit, err, out)
	}
	binary = filepath.Join(dir, "cache-operator")
	if err := goBuild(ctx, source, "./cmd", binary); err != nil {
		return "", "", fmt.Errorf("building the operator of %s: %w", commit, err)
	}
	return binary, source, nil
}
