package resources

import (
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
)

func settingsCache(settings *cachev2.PodSettings) *cachev2.Cache {
	c := testCache()
	c.Spec.Mode, c.Spec.ReplicasPerShard = cachev2.ModeCluster, ptr.To[int32](1)
	c.Spec.Pod = settings
	return c
}

// stored is the StatefulSet as the API server keeps it, with its Cluster update strategy.
func stored(sts *appsv1.StatefulSet) *appsv1.StatefulSet {
	s := serverDefaulted(sts)
	s.Spec.UpdateStrategy = sts.Spec.UpdateStrategy
	return s
}

func somePodSettings() *cachev2.PodSettings {
	return &cachev2.PodSettings{
		CPU:               &cachev2.CPU{Request: ptr.To(resource.MustParse("250m")), Limit: ptr.To(resource.MustParse("1"))},
		NodeSelector:      map[string]cachev2.LabelValue{"pool": "caches"},
		Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "caches", Effect: corev1.TaintEffectNoSchedule}},
		PriorityClassName: "caches-high",
		Labels:            map[string]cachev2.LabelValue{"team": "checkout"},
		Annotations:       map[string]string{"example.com/owner": "checkout"},
	}
}

func TestPodSettingsReachThePods(t *testing.T) {
	template := StatefulSet(settingsCache(somePodSettings()), DefaultImages).Spec.Template
	pod := template.Spec
	if pod.NodeSelector["pool"] != "caches" || len(pod.Tolerations) != 1 || pod.PriorityClassName != "caches-high" {
		t.Errorf("scheduling: nodeSelector %v, tolerations %v, priorityClassName %q", pod.NodeSelector, pod.Tolerations, pod.PriorityClassName)
	}
	if template.Labels["team"] != "checkout" || template.Annotations["example.com/owner"] != "checkout" {
		t.Errorf("labels %v, annotations %v: want the settings' among them", template.Labels, template.Annotations)
	}
	res := pod.Containers[0].Resources
	if res.Requests.Cpu().String() != "250m" || res.Limits.Cpu().String() != "1" {
		t.Errorf("CPU request %s, limit %s: want 250m and 1", res.Requests.Cpu(), res.Limits.Cpu())
	}

	plain := StatefulSet(settingsCache(nil), DefaultImages).Spec.Template
	if _, ok := plain.Annotations[AnnotationPodSettings]; ok || plain.Spec.NodeSelector != nil || plain.Spec.Tolerations != nil {
		t.Errorf("a Cache without pod settings got %v, %v, %v", plain.Annotations, plain.Spec.NodeSelector, plain.Spec.Tolerations)
	}
	if res := plain.Spec.Containers[0].Resources; res.Requests.Cpu().String() != "100m" || !res.Limits.Cpu().IsZero() {
		t.Errorf("CPU request %s, limit %s without settings: want 100m and none", res.Requests.Cpu(), res.Limits.Cpu())
	}
}

// A template's scheduling fields, and the labels and annotations of its settings, are the
// operator's only where it set them: one without settings keeps what someone else set there (so
// an operator upgrade restarts nothing), settings are applied and then removed cleanly, and a
// label of someone else's survives both.
func TestPodSettingsAreTheOperatorsOnlyWhereItSetThem(t *testing.T) {
	without := StatefulSet(settingsCache(nil), DefaultImages)
	with := StatefulSet(settingsCache(somePodSettings()), DefaultImages)

	sts := stored(without)
	sts.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	sts.Spec.Template.Labels["sidecar.istio.io/inject"] = "false"
	if !statefulSetUpToDate(sts, without) || !statefulSetUpToDate(StripStatefulSet(sts), without) {
		t.Errorf("a nodeSelector set by hand on a template without settings counts as a change")
	}

	mergeStatefulSet(sts, with)
	got := sts.Spec.Template
	if !equality.Semantic.DeepEqual(got.Spec.NodeSelector, with.Spec.Template.Spec.NodeSelector) ||
		got.Spec.PriorityClassName != "caches-high" || got.Labels["team"] != "checkout" ||
		got.Annotations["example.com/owner"] != "checkout" || got.Labels["sidecar.istio.io/inject"] != "false" {
		t.Errorf("after the settings were applied: nodeSelector %v, priority %q, labels %v, annotations %v",
			got.Spec.NodeSelector, got.Spec.PriorityClassName, got.Labels, got.Annotations)
	}
	if !statefulSetUpToDate(sts, with) || !statefulSetUpToDate(StripStatefulSet(sts), with) {
		t.Errorf("the settings applied, the StatefulSet is still not up to date")
	}

	mergeStatefulSet(sts, without)
	got = sts.Spec.Template
	_, record := got.Annotations[AnnotationPodSettings]
	_, owner := got.Annotations["example.com/owner"]
	_, team := got.Labels["team"]
	if got.Spec.NodeSelector != nil || got.Spec.Tolerations != nil || got.Spec.PriorityClassName != "" || record || owner || team {
		t.Errorf("after the settings were removed: nodeSelector %v, tolerations %v, priority %q, labels %v, annotations %v",
			got.Spec.NodeSelector, got.Spec.Tolerations, got.Spec.PriorityClassName, got.Labels, got.Annotations)
	}
	if got.Labels["sidecar.istio.io/inject"] != "false" || got.Annotations["kubectl.kubernetes.io/restartedAt"] == "" {
		t.Errorf("someone else's label or annotation went with the settings: %v, %v", got.Labels, got.Annotations)
	}
	if !statefulSetUpToDate(sts, without) {
		t.Errorf("the settings removed, the StatefulSet is still not up to date")
	}
}

// A change of the settings is a change of the spec, which rolls out (with consent where a
// restart empties the nodes).
func TestAChangeOfPodSettingsIsAChangeOfTheSpec(t *testing.T) {
	build := func(settings *cachev2.PodSettings) *appsv1.StatefulSet {
		return StatefulSet(settingsCache(settings), DefaultImages)
	}
	other := somePodSettings()
	other.Labels = map[string]cachev2.LabelValue{"team": "payments"}
	for name, pair := range map[string][2]*cachev2.PodSettings{
		"settings added":   {nil, somePodSettings()},
		"settings removed": {somePodSettings(), nil},
		"a label changed":  {somePodSettings(), other},
	} {
		was, now := build(pair[0]), build(pair[1])
		if specInputs(&was.Spec.Template) == specInputs(&now.Spec.Template) {
			t.Errorf("%s: the spec inputs did not change", name)
		}
		if hold := holdOf(settingsCache(pair[1]), stored(was), now, ""); hold != TemplateCurrent {
			t.Errorf("%s: the template is held (%v), want it rolled out", name, hold)
		}
	}
	standalone := settingsCache(somePodSettings())
	standalone.Spec.Mode, standalone.Spec.ReplicasPerShard = cachev2.ModeStandalone, nil
	was := StatefulSet(testCache(), DefaultImages)
	if hold := holdOf(standalone, serverDefaulted(was), StatefulSet(standalone, DefaultImages), ""); hold != TemplateHeldForConsent {
		t.Errorf("settings added to a Standalone Cache: hold %v, want it to wait for consent (a restart empties its nodes)", hold)
	}
}

// The record is the only source of what the settings put on a template: labels with the same
// keys as the settings' that the record does not name are not taken off.
func TestRecordedPodSettingsOfATemplateWithoutOrWithABrokenRecordAreNone(t *testing.T) {
	var template corev1.PodTemplateSpec
	if recordedPodSettings(&template) != nil {
		t.Errorf("a template without a record has settings")
	}
	template.Annotations = map[string]string{AnnotationPodSettings: "{not json"}
	if recordedPodSettings(&template) != nil {
		t.Errorf("a broken record gives settings")
	}
	with := StatefulSet(settingsCache(somePodSettings()), DefaultImages).Spec.Template
	got := recordedPodSettings(&with)
	if got == nil || !maps.Equal(got.Labels, somePodSettings().Labels) {
		t.Errorf("the record of a built template gives %+v", got)
	}
}
