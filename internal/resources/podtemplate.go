package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
)

// This file is the pod template's life after StatefulSet builds it: what the operator owns of it
// (ownedTemplateDigest), what it took from the spec (specInputs), whether it was edited by hand
// (templateAsWritten), whether the stored one is kept (TemplateHold), and whether anything is to
// be written (JudgeStatefulSet); the controller calls JudgeStatefulSet once per pass, and
// UpdateStatefulSet when it writes.

// TemplateHold is why a StatefulSet keeps a pod template other than the one the Cache's spec
// builds now.
type TemplateHold int

const (
	// TemplateCurrent: the StatefulSet gets the template the spec builds now.
	TemplateCurrent TemplateHold = iota
	// TemplateHeldForRelease: the template is an earlier operator release's, built from the same
	// spec; an upgrade of the operator alone restarts no cache pod (holdsReleaseTemplate).
	TemplateHeldForRelease
	// TemplateHeldForConsent: a change of the spec would empty every node, and waits for the
	// user's consent (awaitsRolloutConsent).
	TemplateHeldForConsent
	// TemplateHeldForFleet: the new template would start a rollout, and as many Caches as the
	// operator lets roll at once are rolling (--max-concurrent-rollouts); it waits its turn.
	TemplateHeldForFleet
	// TemplateHeldForDowngrade: the spec's Valkey release cannot read the RDB format of the
	// release that a primary runs (Valkey 8 that of 9): a replica on it could not sync from the
	// primary (refusesDowngrade). The StatefulSet keeps the template it has, and waits for a
	// version that can.
	TemplateHeldForDowngrade
)

// StatefulSetVerdict is what a pass makes of the Cache's StatefulSet as it is.
type StatefulSetVerdict struct {
	Hold TemplateHold
	// UpToDate: there is nothing to write: the StatefulSet is as desired, or as desired besides
	// a template that is held.
	UpToDate bool
	// StartsRollout: the write would give a StatefulSet that is not rolling out a new pod
	// template, so that its pods restart (ask the fleet's gate first, then UpdateStatefulSet).
	StartsRollout bool
	// UpToDateBesidesTemplate: were the template held, there would be nothing to write.
	UpToDateBesidesTemplate bool
}

// JudgeStatefulSet is the verdict on sts, which exists (stored, or the informer's copy reduced by
// StripStatefulSet), against desired, what the Cache's spec builds now; running is the newest
// Valkey release that the Cache's primaries run, the release whose data it holds ("" if unknown:
// a Standalone Cache's servers are not asked, and a restart empties them anyway).
func JudgeStatefulSet(cache *cachev2.Cache, sts, desired *appsv1.StatefulSet, running string) StatefulSetVerdict {
	hold := holdOf(cache, sts, desired, running)
	besides := statefulSetUpToDateBesidesTemplate(sts, desired)
	changesTemplate := ownedTemplateDigest(&sts.Spec.Template) != ownedTemplateDigest(&desired.Spec.Template)
	return StatefulSetVerdict{
		Hold:                    hold,
		UpToDate:                besides && (!changesTemplate || hold != TemplateCurrent),
		StartsRollout:           hold == TemplateCurrent && changesTemplate && !RollingOut(sts),
		UpToDateBesidesTemplate: besides,
	}
}

// RollingOut reports whether the StatefulSet (stored, or the informer's copy) is rolling a new
// pod template out: its controller has not seen its latest spec yet, or some of its pods run an
// earlier template, or, in a rolling update, the new pods are not all ready yet (the StatefulSet
// controller makes the new revision the current one only then; an OnDelete StatefulSet's, a
// Cluster's, never moves, and its rollout is over once every pod runs the new template). New
// pods of a scale-out start with the current template and are no rollout; nor is a pod that
// is not ready for another reason, which would otherwise keep the rollouts that might mend it
// waiting.
func RollingOut(sts *appsv1.StatefulSet) bool {
	return sts.Status.ObservedGeneration < sts.Generation || PodsRunEarlierTemplate(sts)
}

// PodsRunEarlierTemplate is RollingOut as the StatefulSet's status reports it, for the generation
// the status has observed: some pods run an earlier template, or, in a rolling update, the new
// ones are not all ready yet.
func PodsRunEarlierTemplate(sts *appsv1.StatefulSet) bool {
	if sts.Status.UpdatedReplicas < sts.Status.Replicas {
		return true
	}
	return sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType &&
		sts.Status.UpdateRevision != "" && sts.Status.CurrentRevision != sts.Status.UpdateRevision
}

// UpdateStatefulSet makes sts, the stored StatefulSet or a new empty one, match desired, keeping
// its pod template if it is held, or if keepTemplate (the fleet's gate said wait: the caller
// reports TemplateHeldForFleet); it returns the hold, decided on sts as it was, and running as
// JudgeStatefulSet's.
func UpdateStatefulSet(cache *cachev2.Cache, sts, desired *appsv1.StatefulSet, running string, keepTemplate bool) TemplateHold {
	want := desired
	hold := holdOf(cache, sts, desired, running)
	if hold != TemplateCurrent || keepTemplate && !sts.CreationTimestamp.IsZero() {
		want = desired.DeepCopy()
		want.Spec.Template = *sts.Spec.Template.DeepCopy()
	}
	mergeStatefulSet(sts, want)
	return hold
}

// holdOf is why the StatefulSet keeps its pod template rather than desired's; one not created yet
// keeps nothing.
func holdOf(cache *cachev2.Cache, sts, desired *appsv1.StatefulSet, running string) TemplateHold {
	switch {
	case sts.CreationTimestamp.IsZero():
		return TemplateCurrent
	case refusesDowngrade(cache, running):
		return TemplateHeldForDowngrade
	case holdsReleaseTemplate(cache, sts, desired):
		return TemplateHeldForRelease
	case awaitsRolloutConsent(cache, sts, desired):
		return TemplateHeldForConsent
	}
	return TemplateCurrent
}

// refusesDowngrade reports whether the spec's Valkey release cannot read the RDB format of
// running, the newest release that the Cache's primaries run.
func refusesDowngrade(cache *cachev2.Cache, running string) bool {
	return running != "" && valkey.RDBFormat(cache.Spec.Version) < valkey.RDBFormat(running)
}

// awaitsRolloutConsent reports whether a change of the spec's version, memory, pod settings or
// metrics is held because rolling it out would empty every node: no replica holds a node's keys
// while it restarts (a Standalone Cache; a Cluster or Replicated Cache without replicas), and the Cache does not carry
// the consent (AnnotationRolloutEmptiesNodes). Persistence is off, so a restarted node comes
// back empty; a user who changes a version should not find the cache cold without having said
// so. A template edited by hand is no change of the spec: it is undone, as ever.
func awaitsRolloutConsent(cache *cachev2.Cache, sts, desired *appsv1.StatefulSet) bool {
	noReplicas := cache.Spec.Mode == cachev2.ModeStandalone || cache.Spec.ReplicasOrZero() == 0
	return noReplicas && cache.Annotations[cachev2.AnnotationRolloutEmptiesNodes] != cachev2.RolloutEmptiesNodesAllowed &&
		templateAsWritten(sts) && specInputs(&sts.Spec.Template) != specInputs(&desired.Spec.Template)
}

// holdsReleaseTemplate reports whether the StatefulSet's pod template is to be kept although
// this release would build it differently: it is as an operator release wrote it (a hand edit is
// undone) and was built from the same spec (specInputs), so the difference is the operator
// release's, and an upgrade of the operator alone restarts no cache pod. The newer template goes
// out with the next change of those, or at once when the Cache carries AnnotationPodTemplate:
// latest.
func holdsReleaseTemplate(cache *cachev2.Cache, sts, desired *appsv1.StatefulSet) bool {
	return cache.Annotations[cachev2.AnnotationPodTemplate] != cachev2.PodTemplateLatest &&
		templateAsWritten(sts) &&
		specInputs(&sts.Spec.Template) == specInputs(&desired.Spec.Template) &&
		ownedTemplateDigest(&sts.Spec.Template) != ownedTemplateDigest(&desired.Spec.Template)
}

// statefulSetUpToDate reports whether mergeStatefulSet(sts, desired) would leave sts as it is,
// so that there is nothing to write. sts may be a stored StatefulSet or the informer's copy,
// reduced by StripStatefulSet.
func statefulSetUpToDate(sts, desired *appsv1.StatefulSet) bool {
	return ownedTemplateDigest(&sts.Spec.Template) == ownedTemplateDigest(&desired.Spec.Template) &&
		statefulSetUpToDateBesidesTemplate(sts, desired)
}

// statefulSetUpToDateBesidesTemplate is statefulSetUpToDate for everything but the pod template.
func statefulSetUpToDateBesidesTemplate(sts, desired *appsv1.StatefulSet) bool {
	merged := sts.DeepCopy()
	mergeStatefulSet(merged, desired)
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
// specInputs. They exist only on the operator's cached copies and are never sent to the API
// server: a template without containers would not pass validation anyway.
const (
	templateDigestAnnotation = "cache.example.com/owned-template-digest"
	specInputsAnnotation     = "cache.example.com/spec-inputs"
)

// StripStatefulSet reduces a StatefulSet to what the reconciler reads of it, for the informer
// to keep: the metadata CachedMeta keeps, with the generation and the record of the written
// template; the fields mergeStatefulSet sets on a StatefulSet that exists (not the selector, the
// governing Service or the pod management policy, which are immutable); the digest of the pod
// template's owned fields rather than the template, which is most of a StatefulSet's size; and
// the status without its conditions. statefulSetUpToDate gives the same answer for it as for the
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
				templateDigestAnnotation: ownedTemplateDigest(&sts.Spec.Template),
				specInputsAnnotation:     specInputs(&sts.Spec.Template),
			}}},
		},
		Status: sts.Status,
	}
	stripped.Status.Conditions = nil
	return stripped
}

// AnnotationTemplateWritten, on a StatefulSet, is the digest of its pod template's owned fields
// as the operator last wrote them (ownedTemplateDigest). A template that no longer has it was
// edited by someone else; one without it was written by a release from before the annotation.
const AnnotationTemplateWritten = "cache.example.com/pod-template-written"

// templateAsWritten reports whether the StatefulSet's pod template is as an operator release
// wrote it: not edited since, as far as the owned fields go.
func templateAsWritten(sts *appsv1.StatefulSet) bool {
	written, ok := sts.Annotations[AnnotationTemplateWritten]
	return !ok || written == ownedTemplateDigest(&sts.Spec.Template)
}

// specInputs names what a pod template took from its Cache's spec: the Valkey image (the
// version), the memory limit, the Valkey settings (configInputs), the pod settings, if any
// (AnnotationPodSettings), and whether it runs the metrics exporter (not which image: that is the
// operator's). Two templates with the same inputs that differ otherwise were built by different
// operator releases, which is how the reconciler tells an upgrade of itself, which restarts no
// pod, from a change of the spec. A template stripped by StripStatefulSet gives the inputs it
// kept.
func specInputs(template *corev1.PodTemplateSpec) string {
	if inputs, ok := template.Annotations[specInputsAnnotation]; ok && len(template.Spec.Containers) == 0 {
		return inputs
	}
	for _, c := range template.Spec.Containers {
		if c.Name == ContainerName {
			inputs := c.Image + " " + c.Resources.Limits.Memory().String() + " " + configInputs(&c)
			if settings, ok := template.Annotations[AnnotationPodSettings]; ok {
				inputs += " " + settings
			}
			if hasExporter(template) {
				inputs += " metrics"
			}
			return inputs
		}
	}
	return ""
}

// ownedTemplateDigest is a digest of the pod template fields the operator owns: two templates
// have the same digest exactly when merging one's owned fields into the other changes nothing. A
// template stripped by StripStatefulSet gives the digest it kept.
func ownedTemplateDigest(template *corev1.PodTemplateSpec) string {
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
