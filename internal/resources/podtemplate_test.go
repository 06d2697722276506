package resources

import (
	"fmt"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
)

// The informer keeps StatefulSets stripped of their pod template, so statefulSetUpToDate must
// reach the same verdict from a stripped copy as mergeStatefulSet does from the whole object:
// a change to an owned field is seen, a change to anything else is not.
func TestStatefulSetUpToDateAgreesWithTheMergeWhetherStrippedOrNot(t *testing.T) {
	valkey := func(sts *appsv1.StatefulSet) *corev1.Container { return &sts.Spec.Template.Spec.Containers[0] }
	pod := func(sts *appsv1.StatefulSet) *corev1.PodSpec { return &sts.Spec.Template.Spec }
	cases := []struct {
		change string
		owned  bool
		apply  func(*appsv1.StatefulSet)
	}{
		{"nothing", false, func(*appsv1.StatefulSet) {}},
		{"replicas", true, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](1) }},
		{"a StatefulSet label removed", true, func(s *appsv1.StatefulSet) { delete(s.Labels, LabelManagedBy) }},
		{"image", true, func(s *appsv1.StatefulSet) { valkey(s).Image = "valkey/valkey:7.2.0" }},
		{"args", true, func(s *appsv1.StatefulSet) { valkey(s).Args = valkey(s).Args[:2] }},
		{"port", true, func(s *appsv1.StatefulSet) { valkey(s).Ports[0].ContainerPort = 7000 }},
		{"memory limit", true, func(s *appsv1.StatefulSet) {
			valkey(s).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
		}},
		{"readiness probe period", true, func(s *appsv1.StatefulSet) { valkey(s).ReadinessProbe.PeriodSeconds = 30 }},
		{"liveness probe port", true, func(s *appsv1.StatefulSet) {
			valkey(s).LivenessProbe.TCPSocket.Port = intstr.FromInt32(6380)
		}},
		{"container security context", true, func(s *appsv1.StatefulSet) {
			valkey(s).SecurityContext.ReadOnlyRootFilesystem = ptr.To(false)
		}},
		{"volume mount", true, func(s *appsv1.StatefulSet) { valkey(s).VolumeMounts[0].MountPath = "/tmp" }},
		{"Valkey container renamed", true, func(s *appsv1.StatefulSet) { valkey(s).Name = "cache" }},
		{"pod security context", true, func(s *appsv1.StatefulSet) { pod(s).SecurityContext.RunAsUser = ptr.To[int64](0) }},
		{"an affinity (an earlier release's anti-affinity)", true, func(s *appsv1.StatefulSet) {
			pod(s).Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}
		}},
		{"spread removed", true, func(s *appsv1.StatefulSet) { pod(s).TopologySpreadConstraints = nil }},
		{"data volume", true, func(s *appsv1.StatefulSet) {
			pod(s).Volumes[0].EmptyDir = nil
			pod(s).Volumes[0].HostPath = &corev1.HostPathVolumeSource{Path: "/var/lib/valkey"}
		}},
		{"pod version label", true, func(s *appsv1.StatefulSet) { s.Spec.Template.Labels[LabelVersion] = "7.2.0" }},
		{"pod instance label removed", true, func(s *appsv1.StatefulSet) { delete(s.Spec.Template.Labels, LabelInstance) }},
		{"a foreign StatefulSet label", false, func(s *appsv1.StatefulSet) { s.Labels["cost-center"] = "42" }},
		{"a foreign pod label", false, func(s *appsv1.StatefulSet) { s.Spec.Template.Labels["sidecar.istio.io/inject"] = "false" }},
		{"a pod annotation", false, func(s *appsv1.StatefulSet) { s.Spec.Template.Annotations["note"] = "kept" }},
		{"image pull policy", false, func(s *appsv1.StatefulSet) { valkey(s).ImagePullPolicy = corev1.PullAlways }},
		{"termination message path", false, func(s *appsv1.StatefulSet) { valkey(s).TerminationMessagePath = "/tmp/log" }},
		{"another sidecar", false, func(s *appsv1.StatefulSet) {
			pod(s).Containers = append(pod(s).Containers, corev1.Container{Name: "log-shipper", Image: "shipper:2"})
		}},
		{"another volume", false, func(s *appsv1.StatefulSet) {
			pod(s).Volumes = append(pod(s).Volumes, corev1.Volume{Name: "tls"})
		}},
		{"update strategy", false, func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](1) }},
	}
	desired := StatefulSet(testCache(), DefaultImages)
	for _, tc := range cases {
		t.Run(tc.change, func(t *testing.T) {
			stored := serverDefaulted(desired)
			tc.apply(stored)
			merged := stored.DeepCopy()
			mergeStatefulSet(merged, desired)
			mergeChanges := !equality.Semantic.DeepEqual(merged, stored)
			if mergeChanges != tc.owned {
				t.Fatalf("the merge changes the StatefulSet: %v; this case expects %v", mergeChanges, tc.owned)
			}

			if got := statefulSetUpToDate(stored, desired); got != !tc.owned {
				t.Errorf("statefulSetUpToDate of the stored object = %v, want %v", got, !tc.owned)
			}
			if got := statefulSetUpToDate(StripStatefulSet(stored), desired); got != !tc.owned {
				t.Errorf("statefulSetUpToDate of the stripped object = %v, want %v", got, !tc.owned)
			}
		})
	}
}

func TestStripStatefulSetKeepsWhatTheReconcilerReads(t *testing.T) {
	stored := serverDefaulted(StatefulSet(testCache(), DefaultImages))
	stored.Generation = 4
	stored.Annotations = map[string]string{AnnotationTemplateWritten: ownedTemplateDigest(&stored.Spec.Template), "note": "dropped"}
	stored.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: 4, Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3,
		CurrentRevision: "orders-cache-1", UpdateRevision: "orders-cache-2",
		Conditions: []appsv1.StatefulSetCondition{{Type: "Note", Status: corev1.ConditionTrue}},
	}
	stripped := StripStatefulSet(stored)

	template := stripped.Spec.Template
	if len(template.Spec.Containers) != 0 || len(template.Spec.Volumes) != 0 || len(template.Labels) != 0 ||
		template.Spec.TopologySpreadConstraints != nil || template.Spec.SecurityContext != nil {
		t.Errorf("stripped template still holds %+v", template)
	}
	if got, want := ownedTemplateDigest(&template), ownedTemplateDigest(&stored.Spec.Template); got != want {
		t.Errorf("digest after stripping = %s, want %s", got, want)
	}
	if got, want := specInputs(&template), specInputs(&stored.Spec.Template); got != want {
		t.Errorf("spec inputs after stripping = %q, want %q", got, want)
	}
	if stripped.Spec.Selector != nil || stripped.Annotations["note"] != "" || len(stripped.Status.Conditions) != 0 {
		t.Errorf("kept what the reconciler never reads: selector %v, annotations %v, conditions %v",
			stripped.Spec.Selector, stripped.Annotations, stripped.Status.Conditions)
	}
	read := func(sts *appsv1.StatefulSet) any {
		status := sts.Status
		status.Conditions = nil
		return []any{sts.Name, sts.Namespace, sts.Labels, sts.OwnerReferences, sts.Generation,
			sts.Annotations[AnnotationTemplateWritten], templateAsWritten(sts), *sts.Spec.Replicas, sts.Spec.UpdateStrategy, status}
	}
	if !equality.Semantic.DeepEqual(read(stripped), read(stored)) {
		t.Errorf("stripping changed what the reconciler reads:\n%+v\nwant\n%+v", read(stripped), read(stored))
	}
}

// Every pod template field that the builder sets must be an owned field, which the digest the
// informer keeps covers: a field left out would never be rolled out, since the reconciler would
// see no difference.
func TestEveryTemplateFieldTheBuilderSetsCountsInTheDigest(t *testing.T) {
	desired := StatefulSet(testCache(), DefaultImages).Spec.Template
	digest := ownedTemplateDigest(&desired)
	counts := func(what string, clear func(*corev1.PodTemplateSpec)) {
		t.Helper()
		changed := desired.DeepCopy()
		clear(changed)
		if ownedTemplateDigest(changed) == digest {
			t.Errorf("the builder sets %s, but the digest of owned fields does not change without it", what)
		}
	}
	// mergeOwnedTemplate takes the Valkey container, the readiness agent and the data volume by
	// name: another one from the builder would be neither merged nor in the digest.
	for _, c := range desired.Spec.Containers {
		if c.Name != ContainerName && c.Name != ReadinessContainerName {
			t.Errorf("the builder makes container %s, which the merge does not own", c.Name)
		}
	}
	for _, v := range desired.Spec.Volumes {
		if v.Name != dataVolume {
			t.Errorf("the builder makes volume %s, which the merge does not own", v.Name)
		}
	}
	for key := range desired.Labels {
		counts("pod label "+key, func(p *corev1.PodTemplateSpec) { delete(p.Labels, key) })
	}
	for _, field := range setFields(desired.Spec) {
		if field == "Containers" {
			continue // field by field below
		}
		counts("spec."+field, func(p *corev1.PodTemplateSpec) { clearField(&p.Spec, field) })
	}
	for i, c := range desired.Spec.Containers {
		for _, field := range setFields(c) {
			counts(fmt.Sprintf("containers[%s].%s", c.Name, field), func(p *corev1.PodTemplateSpec) {
				clearField(&p.Spec.Containers[i], field)
			})
		}
	}
}

// setFields are the names of the struct's fields that are not zero.
func setFields(s any) []string {
	v := reflect.ValueOf(s)
	var names []string
	for i := range v.NumField() {
		if !v.Field(i).IsZero() {
			names = append(names, v.Type().Field(i).Name)
		}
	}
	return names
}

func clearField(ptr any, name string) {
	reflect.ValueOf(ptr).Elem().FieldByName(name).SetZero()
}

// A new template on a StatefulSet that is not rolling out starts a rollout, which the fleet's
// gate may hold back: the write then keeps the template and changes the rest.
func TestANewTemplateStartsARolloutThatMayBeHeldBack(t *testing.T) {
	was := stored(StatefulSet(settingsCache(nil), DefaultImages))
	was.Status = appsv1.StatefulSetStatus{ObservedGeneration: was.Generation, Replicas: 6, UpdatedReplicas: 6}
	cache := settingsCache(somePodSettings())
	desired := StatefulSet(cache, DefaultImages)

	verdict := JudgeStatefulSet(cache, was, desired, "")
	if !verdict.StartsRollout || verdict.UpToDate || !verdict.UpToDateBesidesTemplate {
		t.Errorf("a new template: %+v, want it to start a rollout, and nothing else to write", verdict)
	}
	rolling := was.DeepCopy()
	rolling.Status.UpdatedReplicas = 3
	if JudgeStatefulSet(cache, rolling, desired, "").StartsRollout {
		t.Errorf("a new template for a StatefulSet still rolling out counts as starting a rollout")
	}

	desired.Spec.Replicas = ptr.To[int32](8)
	held := was.DeepCopy()
	UpdateStatefulSet(cache, held, desired, "", true)
	if ownedTemplateDigest(&held.Spec.Template) != ownedTemplateDigest(&was.Spec.Template) || *held.Spec.Replicas != 8 {
		t.Errorf("held back, the write changed the template or left the replicas at %d", *held.Spec.Replicas)
	}
	UpdateStatefulSet(cache, held, desired, "", false)
	if ownedTemplateDigest(&held.Spec.Template) != ownedTemplateDigest(&desired.Spec.Template) {
		t.Errorf("admitted, the write did not give the new template")
	}
}

func TestRollingOutIsANewTemplateNotYetOnEveryPod(t *testing.T) {
	status := func(observed int64, replicas, updated int32, current, update string) appsv1.StatefulSetStatus {
		return appsv1.StatefulSetStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated,
			CurrentRevision: current, UpdateRevision: update}
	}
	for _, tc := range []struct {
		name     string
		strategy appsv1.StatefulSetUpdateStrategyType
		status   appsv1.StatefulSetStatus
		want     bool
	}{
		{"settled", appsv1.RollingUpdateStatefulSetStrategyType, status(2, 3, 3, "r2", "r2"), false},
		{"a new spec not yet seen", appsv1.RollingUpdateStatefulSetStrategyType, status(1, 3, 3, "r1", "r1"), true},
		{"pods on the old template", appsv1.RollingUpdateStatefulSetStrategyType, status(2, 3, 1, "r1", "r2"), true},
		{"new pods not all ready", appsv1.RollingUpdateStatefulSetStrategyType, status(2, 3, 3, "r1", "r2"), true},
		{"scaling out", appsv1.RollingUpdateStatefulSetStrategyType, status(2, 2, 2, "r2", "r2"), false},
		{"a Cluster with pods on the old template", appsv1.OnDeleteStatefulSetStrategyType, status(2, 6, 4, "r1", "r2"), true},
		{"a Cluster whose pods all run the new template", appsv1.OnDeleteStatefulSetStrategyType, status(2, 6, 6, "r1", "r2"), false},
	} {
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: tc.status}
		sts.Spec.UpdateStrategy.Type = tc.strategy
		if got := RollingOut(sts); got != tc.want {
			t.Errorf("%s: RollingOut = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A restored Cache's pods keep the restore's init step once the restore is over, until their
// next rollout removes it: its removal alone is no reason to restart them. A rollout during the
// restore gives it the running release's image; kept for good, the step would pin the release
// that made it, whose image a registry may prune.
func TestARestoresInitStepGoesWithTheNextRolloutOnceTheRestoreIsOver(t *testing.T) {
	cache := testCache()
	cache.Spec.RestoreFrom = &cachev2.RestoreSource{Backup: "nightly"}
	cache.Annotations = map[string]string{cachev2.AnnotationRolloutEmptiesNodes: cachev2.RolloutEmptiesNodesAllowed}
	restoring := func(c *cachev2.Cache, agentImage string) *appsv1.StatefulSet {
		sts := StatefulSet(c, DefaultImages)
		sts.Spec.Template.Spec.InitContainers = []corev1.Container{RestoreInitContainer(c, agentImage, "bucket")}
		return sts
	}
	was := stored(restoring(cache, "cache-operator:1.0.0"))
	initImages := func(sts *appsv1.StatefulSet) []string {
		var images []string
		for _, c := range sts.Spec.Template.Spec.InitContainers {
			images = append(images, c.Image)
		}
		return images
	}

	if v := JudgeStatefulSet(cache, was, StatefulSet(cache, DefaultImages), ""); !v.UpToDate {
		t.Errorf("the restore over and nothing else changed: %+v, want nothing to write", v)
	}
	more := cache.DeepCopy()
	more.Spec.Memory = resource.MustParse("512Mi")
	during := was.DeepCopy()
	UpdateStatefulSet(more, during, restoring(more, "cache-operator:1.1.0"), "", false)
	if got := initImages(during); len(got) != 1 || got[0] != "cache-operator:1.1.0" {
		t.Errorf("a rollout during the restore: init images %v, want the running release's", got)
	}
	after := was.DeepCopy()
	UpdateStatefulSet(more, after, StatefulSet(more, DefaultImages), "", false)
	if got := initImages(after); len(got) != 0 {
		t.Errorf("a rollout once the restore is over: init images %v, want none", got)
	}
}

// A change to a release that cannot read the data format of the release the primaries run (a
// Valkey 9's, from 8) is held, whatever else holds or lets it go; the same change while the
// primaries still run the older release, as halfway through an upgrade (replicas first), goes
// out; and one within a format goes out.
func TestAChangeToAReleaseThatCannotReadThePrimariesDataIsHeld(t *testing.T) {
	at := func(version string) *cachev2.Cache {
		c := settingsCache(nil)
		c.Spec.Version = version
		return c
	}
	upgraded := stored(StatefulSet(at("9.1.2"), DefaultImages))
	for _, c := range []struct {
		version, running string
		want             TemplateHold
	}{
		{"8.1.1", "9.1.2", TemplateHeldForDowngrade},
		{"8.0.1", "9.0.0", TemplateHeldForDowngrade},
		{"8.1.1", "8.1.1", TemplateCurrent}, // the upgrade's replicas run 9.1.2, its primaries not yet
		{"9.0.3", "9.1.2", TemplateCurrent},
		{"8.1.1", "", TemplateCurrent}, // no primary said
	} {
		cache := at(c.version)
		desired := StatefulSet(cache, DefaultImages)
		if hold := holdOf(cache, upgraded, desired, c.running); hold != c.want {
			t.Errorf("to %s with primaries on %q: hold %v, want %v", c.version, c.running, hold, c.want)
		}
		held := upgraded.DeepCopy()
		UpdateStatefulSet(cache, held, desired, c.running, false)
		kept := ownedTemplateDigest(&held.Spec.Template) == ownedTemplateDigest(&upgraded.Spec.Template)
		if kept != (c.want == TemplateHeldForDowngrade) {
			t.Errorf("to %s with primaries on %q: the template kept: %v", c.version, c.running, kept)
		}
	}
}
