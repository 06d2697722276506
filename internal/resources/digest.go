package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatefulSetUpToDate reports whether MergeStatefulSet(sts, desired) would leave sts as it is,
// so that there is nothing to write. sts may be a stored StatefulSet or the informer's copy,
// reduced by StripStatefulSet.
func StatefulSetUpToDate(sts, desired *appsv1.StatefulSet) bool {
	return OwnedTemplateDigest(&sts.Spec.Template) == OwnedTemplateDigest(&desired.Spec.Template) &&
		StatefulSetUpToDateBesidesTemplate(sts, desired)
}

// StatefulSetUpToDateBesidesTemplate is StatefulSetUpToDate for everything but the pod template.
func StatefulSetUpToDateBesidesTemplate(sts, desired *appsv1.StatefulSet) bool {
	merged := sts.DeepCopy()
	MergeStatefulSet(merged, desired)
	merged.Spec.Template = sts.Spec.Template
	// The record of the written template follows the template; alone it is no reason to write.
	if written, ok := sts.Annotations[AnnotationTemplateWritten]; ok {
		merged.Annotations[AnnotationTemplateWritten] = written
	} else {
		delete(merged.Annotations, AnnotationTemplateWritten)
	}
	return equality.Semantic.DeepEqual(merged, sts)
}

// templateDigestAnnotation holds a stripped pod template's digest, and specInputsAnnotation its
// SpecInputs. They exist only on the operator's cached copies and are never sent to the API
// server: a template without containers would not pass validation anyway.
const (
	templateDigestAnnotation = "cache.example.com/owned-template-digest"
	specInputsAnnotation     = "cache.example.com/spec-inputs"
)

// StripStatefulSet reduces a StatefulSet to what the reconciler reads of it, for the informer
// to keep: the metadata CachedMeta keeps, with the generation and the record of the written
// template; the fields MergeStatefulSet sets on a StatefulSet that exists (not the selector, the
// governing Service or the pod management policy, which are immutable); the digest of the pod
// template's owned fields rather than the template, which is most of a StatefulSet's size; and
// the status without its conditions. StatefulSetUpToDate gives the same answer for it as for the
// whole object, and an update starts from a fresh read of the whole object.
func StripStatefulSet(sts *appsv1.StatefulSet) *appsv1.StatefulSet {
	meta := CachedMeta(sts.ObjectMeta)
	meta.Generation = sts.Generation
	if written, ok := sts.Annotations[AnnotationTemplateWritten]; ok {
		meta.Annotations = map[string]string{AnnotationTemplateWritten: written}
	}
	stripped := &appsv1.StatefulSet{
		TypeMeta:   sts.TypeMeta,
		ObjectMeta: meta,
		Spec: appsv1.StatefulSetSpec{
			Replicas:       sts.Spec.Replicas,
			UpdateStrategy: sts.Spec.UpdateStrategy,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				templateDigestAnnotation: OwnedTemplateDigest(&sts.Spec.Template),
				specInputsAnnotation:     SpecInputs(&sts.Spec.Template),
			}}},
		},
		Status: sts.Status,
	}
	stripped.Status.Conditions = nil
	return stripped
}

// AnnotationTemplateWritten, on a StatefulSet, is the digest of its pod template's owned fields
// as the operator last wrote them (OwnedTemplateDigest). A template that no longer has it was
// edited by someone else; one without it was written by a release from before the annotation.
const AnnotationTemplateWritten = "cache.example.com/pod-template-written"

// TemplateAsWritten reports whether the StatefulSet's pod template is as an operator release
// wrote it: not edited since, as far as the owned fields go.
func TemplateAsWritten(sts *appsv1.StatefulSet) bool {
	written, ok := sts.Annotations[AnnotationTemplateWritten]
	return !ok || written == OwnedTemplateDigest(&sts.Spec.Template)
}

// SpecInputs names what a pod template took from its Cache's spec: the Valkey image (the
// version) and the memory limit. Two templates with the same inputs that differ otherwise were
// built by different operator releases, which is how the reconciler tells an upgrade of itself,
// which restarts no pod, from a change of the spec. A template stripped by StripStatefulSet
// gives the inputs it kept.
func SpecInputs(template *corev1.PodTemplateSpec) string {
	if inputs, ok := template.Annotations[specInputsAnnotation]; ok && len(template.Spec.Containers) == 0 {
		return inputs
	}
	for _, c := range template.Spec.Containers {
		if c.Name == ContainerName {
			return c.Image + " " + c.Resources.Limits.Memory().String()
		}
	}
	return ""
}

// OwnedTemplateDigest is a digest of the pod template fields the operator owns: two templates
// have the same digest exactly when merging one's owned fields into the other changes nothing. A
// template stripped by StripStatefulSet gives the digest it kept.
func OwnedTemplateDigest(template *corev1.PodTemplateSpec) string {
	if digest, ok := template.Annotations[templateDigestAnnotation]; ok && len(template.Spec.Containers) == 0 {
		return digest
	}
	var owned corev1.PodTemplateSpec
	mergeOwnedTemplate(&owned, template)
	// JSON of API types is deterministic: struct fields in order, map keys sorted, quantities
	// in canonical form. Marshalling them cannot fail.
	encoded, _ := json.Marshal(owned)
	sum := sha256.Sum256(encoded)
	return hex.EncodeToString(sum[:])
}
