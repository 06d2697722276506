//go:build bench

package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditPolicy records every request of the operator's ServiceAccount, and nothing else: an
// independent count of its API requests by verb and resource, which its own client metrics
// cannot split by resource.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:serviceaccount:cache-operator-system:cache-operator"]
- level: None
`

// auditLog reads the API server's audit log: audit.log in dir, and the files the API server
// rotates it into every 100 MB (audit-<time>.log), which a run of 10,000 Caches fills several
// times over.
type auditLog struct{ dir string }

type auditEvent struct {
	Verb      string `json:"verb"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	Received       time.Time `json:"requestReceivedTimestamp"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// requestCounts counts requests by "verb resource[/subresource]".
type requestCounts map[string]int

// files are the audit log's files, the rotated ones included.
func (a *auditLog) files(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(a.dir, "audit*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no audit log in %s: %v", a.dir, err)
	}
	return files
}

// keep copies the audit log into -keep-logs.
func (a *auditLog) keep(t *testing.T) {
	t.Helper()
	for _, file := range a.files(t) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		keep(t, filepath.Base(file), f)
		_ = f.Close()
	}
}

// requests counts the operator's requests received in [from, to].
func (a *auditLog) requests(t *testing.T, from, to time.Time) requestCounts {
	t.Helper()
	counts := requestCounts{}
	for _, file := range a.files(t) {
		if err := countFile(file, from, to, counts); err != nil {
			t.Fatal(err)
		}
	}
	return counts
}

func countFile(path string, from, to time.Time, counts requestCounts) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Received.Before(from) || e.Received.After(to) {
			continue
		}
		resource := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			resource += "/" + e.ObjectRef.Subresource
		}
		counts[e.Verb+" "+resource]++
		if e.ResponseStatus.Code == http.StatusConflict {
			counts[conflictPrefix+e.Verb+" "+resource]++
		}
	}
	return sc.Err()
}

// conflictPrefix marks the counts of requests that failed with a conflict (409), which are
// counted among the requests too.
const conflictPrefix = "409 "

// conflicts are the counts of the requests that failed with a conflict, by "verb resource".
func (c requestCounts) conflicts() requestCounts {
	out := requestCounts{}
	for key, n := range c {
		if rest, ok := strings.CutPrefix(key, conflictPrefix); ok {
			out[rest] = n
		}
	}
	return out
}

// withoutConflicts are the counts of requests by "verb resource", conflicts included once.
func (c requestCounts) withoutConflicts() requestCounts {
	out := requestCounts{}
	for key, n := range c {
		if !strings.HasPrefix(key, conflictPrefix) {
			out[key] = n
		}
	}
	return out
}

var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// writes counts the mutating requests, without the leader's Lease renewals (one per retry
// period, the price of leader election rather than of any Cache) and Events.
func (c requestCounts) writes() requestCounts {
	out := requestCounts{}
	for key, n := range c.withoutConflicts() {
		var verb, resource string
		fmt.Sscanf(key, "%s %s", &verb, &resource) //nolint:errcheck
		if slices.Contains(writeVerbs, verb) && resource != "leases" && resource != "events" {
			out[key] = n
		}
	}
	return out
}

// perCache divides every count by the number of Caches.
func (c requestCounts) perCache(n int) map[string]float64 {
	out := map[string]float64{}
	for key, v := range c.withoutConflicts() {
		out[key] = float64(v) / float64(n)
	}
	return out
}
