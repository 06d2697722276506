package resources

import (
	"encoding/json"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
)

// AnnotationPodSettings, on a Cache's pod template, records the spec.pod it was built from, as
// JSON. It is how a template tells which of its scheduling fields, labels and annotations are
// the operator's (those the record names; a template without a record has none, so that a
// nodeSelector someone set by hand on a StatefulSet of an earlier release is left alone and an
// operator upgrade restarts nothing), and part of the inputs that tell a change of the spec
// from an upgrade of the operator (specInputs).
const AnnotationPodSettings = "cache.example.com/pod-settings"

// defaultCPURequest is the Valkey container's CPU request unless spec.pod.cpu says otherwise.
var defaultCPURequest = resource.MustParse("100m")

// applyPodSettings sets on a new pod template what the user's settings ask for, and the record
// of them. Nil settings set nothing.
func applyPodSettings(template *corev1.PodTemplateSpec, settings *cachev2.PodSettings) {
	if settings == nil {
		return
	}
	// JSON of API types is deterministic; marshalling them cannot fail.
	record, _ := json.Marshal(settings)
	mergeAnnotations(&template.Annotations, map[string]string{AnnotationPodSettings: string(record)})
	mergeAnnotations(&template.Annotations, settings.Annotations)
	mergeLabels(&template.Labels, labelMap(settings.Labels))
	template.Spec.NodeSelector = labelMap(settings.NodeSelector)
	template.Spec.Tolerations = settings.Tolerations
	template.Spec.PriorityClassName = settings.PriorityClassName
}

// cpuResources are the Valkey container's CPU request and limit: 100m and none, unless the
// settings say otherwise.
func cpuResources(settings *cachev2.PodSettings) (request resource.Quantity, limit *resource.Quantity) {
	request = defaultCPURequest.DeepCopy()
	if settings == nil || settings.CPU == nil {
		return request, nil
	}
	if settings.CPU.Request != nil {
		request = settings.CPU.Request.DeepCopy()
	}
	if settings.CPU.Limit != nil {
		limit = ptr.To(settings.CPU.Limit.DeepCopy())
	}
	return request, limit
}

// recordedPodSettings are the settings a template records it was built from; nil for one with
// no record, or a record that is not the operator's JSON (then nothing in it is the operator's).
func recordedPodSettings(template *corev1.PodTemplateSpec) *cachev2.PodSettings {
	record, ok := template.Annotations[AnnotationPodSettings]
	if !ok {
		return nil
	}
	var settings cachev2.PodSettings
	if json.Unmarshal([]byte(record), &settings) != nil {
		return nil
	}
	return &settings
}

// mergePodSettings copies into dst what src's record says the settings put on src, as src has
// it, after taking off dst what dst's own record says they put there: the scheduling fields, the
// settings' labels and annotations, and the record itself. Labels and annotations that neither
// record names are someone else's and stay; so do the scheduling fields of a template that
// neither records.
func mergePodSettings(dst, src *corev1.PodTemplateSpec) {
	had, want := recordedPodSettings(dst), recordedPodSettings(src)
	if had == nil && want == nil {
		return
	}
	if had != nil {
		for key := range had.Labels {
			delete(dst.Labels, key)
		}
		for key := range had.Annotations {
			delete(dst.Annotations, key)
		}
		delete(dst.Annotations, AnnotationPodSettings)
	}
	if want != nil {
		copyEntries(&dst.Labels, src.Labels, keysOf(want.Labels))
		copyEntries(&dst.Annotations, src.Annotations, append(keysOf(want.Annotations), AnnotationPodSettings))
	}
	dst.Spec.NodeSelector = src.Spec.NodeSelector
	dst.Spec.Tolerations = src.Spec.Tolerations
	dst.Spec.PriorityClassName = src.Spec.PriorityClassName
}

// copyEntries sets in *dst the entries of src under the keys given that src has.
func copyEntries(dst *map[string]string, src map[string]string, keys []string) {
	for _, key := range keys {
		if value, ok := src[key]; ok {
			mergeAnnotations(dst, map[string]string{key: value})
		}
	}
}

// keysOf are the keys of a map of labels or annotations.
func keysOf[V any](entries map[string]V) []string {
	return slices.Collect(maps.Keys(entries))
}

// labelMap is a map of label values as the pod's fields have it; nil for none.
func labelMap(values map[string]cachev2.LabelValue) map[string]string {
	if values == nil {
		return nil
	}
	labels := make(map[string]string, len(values))
	for key, value := range values {
		labels[key] = string(value)
	}
	return labels
}
