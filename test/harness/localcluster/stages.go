package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"sigs.k8s.io/yaml"

	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/podrunner"
)

// valkeyPodLabelPath is, as kwok's stage selectors address it, the label that marks the pods a
// cluster with RealValkey leaves to the pod runner: every pod that runs Valkey, and the backups'
// pods (podrunner.Apps).
var valkeyPodLabelPath = fmt.Sprintf(".metadata.labels[%q]", resources.LabelName)

const valkeyPodStartStage = "valkey-pod-start"

// valkeyPodStart is the stage through which kwok starts a Valkey pod on one of its nodes: it
// gives the pod its IP, once, and leaves it Pending with its containers being created. The rest
// is the pod runner's to report, as it runs the pod's containers: the init containers, the phase,
// readiness from the pod's own probes against real servers, restarts, the end of the pod, and the
// end of a deletion once its processes have stopped.
var valkeyPodStart = map[string]any{
	"apiVersion": "kwok.x-k8s.io/v1alpha1",
	"kind":       "Stage",
	"metadata":   map[string]any{"name": valkeyPodStartStage},
	"spec": map[string]any{
		"resourceRef": map[string]any{"apiGroup": "v1", "kind": "Pod"},
		"selector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
			map[string]any{"key": ".status.phase", "operator": "In", "values": []any{"Pending"}},
			map[string]any{"key": ".status.podIP", "operator": "DoesNotExist"},
			map[string]any{"key": valkeyPodLabelPath, "operator": "In", "values": runnerApps()},
		}},
		"next": map[string]any{"statusTemplate": `{{ $now := Now }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state: {waiting: {reason: ContainerCreating}}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName false ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Pending
startTime: {{ $now | Quote }}
`},
	},
}

// stagesLeftToRunner are kwok's default pod stages that must pass over Valkey pods: the one
// that marks a pod Running and Ready, the one that marks a Job's pod Succeeded at once, and the
// one that deletes a terminating pod at once.
var stagesLeftToRunner = []string{"pod-ready", "pod-complete", "pod-delete"}

// leaveValkeyPodsToRunner rewrites the stages in the kwok configuration that kwokctl wrote at
// creation (its defaults, for this kwok version) so that kwok's defaults pass over Valkey pods
// and valkeyPodStart starts them instead, then restarts the cluster for kwok to load them. kwok
// takes stages from its configuration file or from Stage objects, never both, and kwokctl
// writes its default stages into that file only when it is given none; so editing the file it
// wrote keeps every other default as kwok ships it.
func (c *Cluster) leaveValkeyPodsToRunner(ctx context.Context) error {
	path := c.kwokConfig()
	config, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	config, err = withValkeyPodStages(config)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, config, 0o600); err != nil {
		return err
	}
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return c.Start(ctx)
}

// EtcdEndpoint is the client URL of the cluster's own etcd, where the API server stores
// objects: for tests that must see how an object is stored, not how the API server serves it.
func (c *Cluster) EtcdEndpoint() (string, error) {
	config, err := os.ReadFile(c.kwokConfig())
	if err != nil {
		return "", err
	}
	for _, doc := range bytes.Split(config, []byte("\n---\n")) {
		var obj struct {
			Kind    string `json:"kind"`
			Options struct {
				EtcdPort int `json:"etcdPort"`
			} `json:"options"`
		}
		if err := yaml.Unmarshal(doc, &obj); err == nil && obj.Kind == "KwokctlConfiguration" && obj.Options.EtcdPort != 0 {
			return fmt.Sprintf("http://127.0.0.1:%d", obj.Options.EtcdPort), nil
		}
	}
	return "", fmt.Errorf("%s names no etcd port", c.kwokConfig())
}

func (c *Cluster) kwokConfig() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "kwok.yaml")
}

// withValkeyPodStages returns the kwok configuration with a selector term that excludes Valkey
// pods added to each of stagesLeftToRunner, and valkeyPodStart appended.
func withValkeyPodStages(config []byte) ([]byte, error) {
	var out bytes.Buffer
	excluded := map[string]bool{}
	for _, doc := range bytes.Split(config, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if name := stageName(obj); name != "" && slices.Contains(stagesLeftToRunner, name) {
			if err := excludeValkeyPods(obj); err != nil {
				return nil, fmt.Errorf("stage %s: %w", name, err)
			}
			excluded[name] = true
		}
		if err := appendDocument(&out, obj); err != nil {
			return nil, err
		}
	}
	for _, name := range stagesLeftToRunner {
		if !excluded[name] {
			return nil, fmt.Errorf("kwok's default stage %s is not there: this kwok version's stages differ from those the pod runner was written against", name)
		}
	}
	if err := appendDocument(&out, valkeyPodStart); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func stageName(obj map[string]any) string {
	if obj["kind"] != "Stage" {
		return ""
	}
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	return name
}

// runnerApps are podrunner.Apps, as a stage's selector lists them.
func runnerApps() []any {
	apps := make([]any, len(podrunner.Apps))
	for i, app := range podrunner.Apps {
		apps[i] = app
	}
	return apps
}

func excludeValkeyPods(stage map[string]any) error {
	spec, _ := stage["spec"].(map[string]any)
	selector, _ := spec["selector"].(map[string]any)
	if selector == nil {
		return fmt.Errorf("no selector")
	}
	terms, _ := selector["matchExpressions"].([]any)
	selector["matchExpressions"] = append(terms, map[string]any{
		"key": valkeyPodLabelPath, "operator": "NotIn", "values": runnerApps(),
	})
	return nil
}

func appendDocument(out *bytes.Buffer, obj map[string]any) error {
	doc, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	out.WriteString("---\n")
	out.Write(doc)
	return nil
}
