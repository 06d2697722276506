//go:build e2e

package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/test/harness/localcluster"
)

// A test that touches nothing cluster-wide (no node, no CRD, no install, no operator of another
// release, no unscoped operator, no Lease another test uses) runs beside the others: runBeside
// reserves the names of the namespaces it will create, newNamespace creates them in that order,
// and every operator it starts manages those namespaces only (--watch-namespaces). A test that
// takes whole nodes down does too, on nodes of its own (runOnIsolatedNodes). Go runs such tests
// together once the others, which run one at a time, are done.

// scope is what runBeside reserved for one test.
type scope struct {
	mu         sync.Mutex
	namespaces []string
	created    int
}

// scopes are the scopes of the tests running beside others, by test name; a subtest shares its
// parent's unless it has its own.
var scopes sync.Map // test name → *scope

// runBeside marks the test as one that runs beside the others, with namespaces namespaces.
func runBeside(t *testing.T, namespaces int) {
	t.Helper()
	besideSlot(t, false)
	reserve(t, namespaces)
}

// runBesideFirst is runBeside for a test that takes minutes: it gets a place before the shorter
// ones waiting (besideSlot).
func runBesideFirst(t *testing.T, namespaces int) {
	t.Helper()
	besideSlot(t, true)
	reserve(t, namespaces)
}

// runOnIsolatedNodes marks a test that takes whole nodes down (a drain, a stopped kubelet): it runs
// beside the others, one at a time with the other tests that do (isolatedNodesTaken), and puts its
// Caches on the cluster's isolated nodes (onIsolatedNodes), where no other test's pods are. It
// takes none of besideSlot's places: such a test mostly waits, on the control plane's grace
// periods, the evictions and the pods' hooks. It makes one namespace.
func runOnIsolatedNodes(t *testing.T) {
	t.Helper()
	t.Parallel()
	waited := time.Now()
	isolatedNodesTaken.Lock()
	t.Logf("a place on the isolated nodes after %s", time.Since(waited).Round(time.Second))
	t.Cleanup(isolatedNodesTaken.Unlock)
	reserve(t, 1)
}

// isolatedNodesTaken is held by the test on the isolated nodes.
var isolatedNodesTaken sync.Mutex

// onIsolatedNodes puts the Cache's pods on the cluster's isolated nodes, and there only.
func onIsolatedNodes(c *cachev2.Cache) {
	taint := localcluster.IsolatedTaint
	c.Spec.Pod = &cachev2.PodSettings{
		NodeSelector: map[string]cachev2.LabelValue{taint.Key: cachev2.LabelValue(taint.Value)},
		Tolerations:  []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect}},
	}
}

// reserve reserves the names of the namespaces that the test will create.
func reserve(t *testing.T, namespaces int) {
	t.Helper()
	s := &scope{}
	for range namespaces {
		s.namespaces = append(s.namespaces, "e2e-"+rand.String(8))
	}
	scopes.Store(t.Name(), s)
	t.Cleanup(func() { scopes.Delete(t.Name()) })
}

// scopeOf is the scope of the test or of the nearest test it is a subtest of, or nil for a
// test that runs alone.
func scopeOf(t *testing.T) *scope {
	name := t.Name()
	for {
		if s, ok := scopes.Load(name); ok {
			return s.(*scope)
		}
		parent := strings.LastIndex(name, "/")
		if parent < 0 {
			return nil
		}
		name = name[:parent]
	}
}

// nextNamespace is the name of the next namespace the test creates.
func (s *scope) nextNamespace(t *testing.T) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.created == len(s.namespaces) {
		t.Fatalf("the test creates more than the %d namespaces it reserved with runBeside", len(s.namespaces))
	}
	s.created++
	return s.namespaces[s.created-1]
}

// operatorArgs scope an operator to the test's namespaces, without leader election: such a test
// runs one operator at a time (it stops one before it starts the next), and a leader whose
// renewal the API server, busy with the tests beside it, answered too late for the short e2e
// Lease would exit, with nothing to restart it as a Deployment would. Leader election has tests
// of its own, which run alone.
func (s *scope) operatorArgs() []string {
	return []string{"--watch-namespaces", strings.Join(s.namespaces, ","), "--leader-elect=false"}
}

// besideSlot runs the test beside the others (t.Parallel) once one of besideAtOnce places is
// free, and frees it when the test ends. The places are handed out here rather than by Go's
// -parallel, which hands them out in whatever order the waiting tests happen to queue: a test of
// minutes that got its place last held the tier's end back by its whole length (the install
// test, 6 minutes, began 10 minutes into a 28-minute tier). Tests marked first (runBesideFirst:
// each takes minutes) get places before the others waiting.
func besideSlot(t *testing.T, first bool) {
	t.Helper()
	t.Parallel()
	waited := time.Now()
	places.acquire(first)
	// The tier's timeline reads when each test began from this line.
	t.Logf("a place after %s", time.Since(waited).Round(time.Second))
	t.Cleanup(places.release)
}

// placesQueue hands out the places of the tests beside each other: first tests before the
// others, each kind in the order they asked.
type placesQueue struct {
	mu            sync.Mutex
	free          int
	first, others []chan struct{}
}

// places has besideAtOnce places, or as many as -test.parallel says (TestMain).
var places = &placesQueue{}

func (q *placesQueue) acquire(first bool) {
	q.mu.Lock()
	if q.free > 0 {
		q.free--
		q.mu.Unlock()
		return
	}
	turn := make(chan struct{})
	if first {
		q.first = append(q.first, turn)
	} else {
		q.others = append(q.others, turn)
	}
	q.mu.Unlock()
	<-turn
}

func (q *placesQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, waiting := range []*[]chan struct{}{&q.first, &q.others} {
		if len(*waiting) > 0 {
			close((*waiting)[0])
			*waiting = (*waiting)[1:]
			return
		}
	}
	q.free++
}
