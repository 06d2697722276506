package localcluster

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kwokConfig is the shape of the configuration kwokctl writes: its own configuration, then
// stages, each with a selector.
const kwokConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: .status.phase, operator: DoesNotExist}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
  next:
    statusTemplate: "phase: Running"
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Running]}
    - {key: '.metadata.ownerReferences.[].kind', operator: In, values: [Job]}
  next:
    statusTemplate: "phase: Succeeded"
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
  next:
    delete: true
`

func stages(t *testing.T, config []byte) map[string][]any {
	t.Helper()
	terms := map[string][]any{}
	for _, doc := range strings.Split(string(config), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if name := stageName(obj); name != "" {
			selector := obj["spec"].(map[string]any)["selector"].(map[string]any)
			terms[name] = selector["matchExpressions"].([]any)
		}
	}
	return terms
}

func TestValkeyPodsPassKwoksPodStagesAndGetTheirOwn(t *testing.T) {
	out, err := withValkeyPodStages([]byte(kwokConfig))
	if err != nil {
		t.Fatal(err)
	}
	got := stages(t, out)
	excludes := map[string]any{"key": valkeyPodLabelPath, "operator": "NotIn", "values": []any{"valkey", "cache-backup"}}
	for name, want := range map[string]int{"node-initialize": 1, "pod-ready": 2, "pod-complete": 4, "pod-delete": 2, "valkey-pod-start": 4} {
		if len(got[name]) != want {
			t.Errorf("stage %s has %d selector terms, want %d: %v", name, len(got[name]), want, got[name])
		}
	}
	for _, name := range stagesLeftToRunner {
		if terms := got[name]; len(terms) == 0 || !equalJSON(t, terms[len(terms)-1], excludes) {
			t.Errorf("stage %s does not pass over Valkey pods: %v", name, terms)
		}
	}
	if !strings.Contains(string(out), "KwokctlConfiguration") {
		t.Errorf("kwokctl's own configuration was dropped:\n%s", out)
	}
}

func TestAKwokWithoutThePodStagesIsRefused(t *testing.T) {
	withoutDelete := kwokConfig[:strings.LastIndex(kwokConfig, "---")]
	if _, err := withValkeyPodStages([]byte(withoutDelete)); err == nil || !strings.Contains(err.Error(), "pod-delete") {
		t.Errorf("a configuration without pod-delete gave %v, want an error naming it", err)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
