package resources

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/readiness"
)

func testCache() *cachev2.Cache {
	return &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: "shop"},
		Spec: cachev2.CacheSpec{
			Mode:    cachev2.ModeStandalone,
			Shards:  3,
			Version: "8.1.1",
			Memory:  resource.MustParse("256Mi"),
		},
	}
}

// Valkey may use for data three quarters of the memory the server itself leaves, and MemoryFor
// is the smallest memory that holds a given amount of data.
func TestMaxMemoryLeavesHeadroom(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  int64
	}{
		{"64Mi", 42 << 20},
		{"256Mi", 186 << 20},
		{"1Gi", 762 << 20},
		{"64Gi", 48<<30 - 6<<20},
	} {
		limit := resource.MustParse(tc.limit)
		if got := MaxMemory(limit); got != tc.want {
			t.Errorf("MaxMemory(%s) = %d, want %d", tc.limit, got, tc.want)
		}
		if got := MemoryFor(tc.want); got.Cmp(limit) != 0 {
			t.Errorf("MemoryFor(%d) = %s, want %s", tc.want, got.String(), tc.limit)
		}
		if got := MemoryFor(tc.want + 1); got.Cmp(limit) <= 0 || MaxMemory(got) <= tc.want {
			t.Errorf("MemoryFor(%d) = %s, whose MaxMemory %d does not hold it", tc.want+1, got.String(), MaxMemory(got))
		}
	}
}

// A replica loads a full sync from the network, never through a file on the data volume, on
// every release that can (8.0 only into an empty server), and the data volume is bounded and
// requested for the RDBs that may still land there.
func TestAReplicaLoadsAFullSyncWithoutAFileAndTheDataVolumeIsBudgeted(t *testing.T) {
	for version, want := range map[string]string{"8.0.1": "on-empty-db", "8.1.1": "flush-before-load", "9.1.2": "flush-before-load"} {
		cache := testCache()
		cache.Spec.Version = version
		sts := StatefulSet(cache, DefaultImages)
		c := sts.Spec.Template.Spec.Containers[0]
		if i := slices.Index(c.Args, "--repl-diskless-load"); i < 0 || c.Args[i+1] != want {
			t.Errorf("%s: args %q, want --repl-diskless-load %s", version, c.Args, want)
		}
		if got := c.Resources.Requests[corev1.ResourceEphemeralStorage]; got.Cmp(cache.Spec.Memory) != 0 {
			t.Errorf("%s: ephemeral storage request %s, want the memory's, %s", version, got.String(), cache.Spec.Memory.String())
		}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name != dataVolume {
				continue
			}
			if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "512Mi" {
				t.Errorf("%s: data volume %+v, want an emptyDir of at most 512Mi, twice the memory", version, v.VolumeSource)
			}
		}
	}
}

func TestStatefulSetRunsValkeyFromTheSpec(t *testing.T) {
	cache := testCache()
	sts := StatefulSet(cache, Images{ValkeyRepository: "mirror.example/valkey", Exporter: DefaultExporterImage})

	if sts.Name != "orders-cache" || sts.Namespace != "shop" {
		t.Errorf("StatefulSet is %s/%s, want shop/orders-cache", sts.Namespace, sts.Name)
	}
	if sts.Spec.ServiceName != "orders-cache" {
		t.Errorf("serviceName = %q, want the headless Service orders-cache", sts.Spec.ServiceName)
	}
	if got := ptr.Deref(sts.Spec.Replicas, 0); got != 3 {
		t.Errorf("replicas = %d, want 3", got)
	}
	selector, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !selector.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("selector %s does not match pod labels %v", selector, sts.Spec.Template.Labels)
	}
	if sts.Labels[LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v lack %s=%s, which the operator's informers select on", sts.Labels, LabelManagedBy, ManagedBy)
	}

	c := sts.Spec.Template.Spec.Containers[0]
	if c.Image != "mirror.example/valkey:8.1.1" {
		t.Errorf("image = %q, want mirror.example/valkey:8.1.1", c.Image)
	}
	wantArgs := map[string]string{
		"--maxmemory":                  strconv.Itoa(186 << 20),
		"--maxmemory-policy":           "allkeys-lru",
		"--port":                       "6379",
		"--repl-backlog-size":          strconv.Itoa(248 << 20 / 16),
		"--client-output-buffer-limit": fmt.Sprintf("replica %d 0 0", 248<<20/8),
	}
	for flag, want := range wantArgs {
		i := slices.Index(c.Args, flag)
		if i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != want {
			t.Errorf("args %q: want %s %s", c.Args, flag, want)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 6379 {
		t.Errorf("ports = %v, want 6379", c.Ports)
	}
	mem := resource.MustParse("256Mi")
	if got := c.Resources.Requests[corev1.ResourceMemory]; got.Cmp(mem) != 0 {
		t.Errorf("memory request = %s, want 256Mi", got.String())
	}
	if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(mem) != 0 {
		t.Errorf("memory limit = %s, want 256Mi", got.String())
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Error("want readiness and liveness probes")
	}
}

func TestPodsMeetTheRestrictedPodSecurityStandard(t *testing.T) {
	pod := StatefulSet(testCache(), DefaultImages).Spec.Template.Spec
	psc := pod.SecurityContext
	if !ptr.Deref(psc.RunAsNonRoot, false) {
		t.Error("pod does not require a non-root user")
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod does not use the RuntimeDefault seccomp profile")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("container %s has no security context", c.Name)
		}
		if ptr.Deref(sc.AllowPrivilegeEscalation, true) {
			t.Errorf("container %s allows privilege escalation", c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s does not drop all capabilities", c.Name)
		}
		if !ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
			t.Errorf("container %s has a writable root filesystem", c.Name)
		}
	}
}

func TestPodsHoldNoAPITokenNorTheNamespacesServiceVariables(t *testing.T) {
	for _, mode := range []cachev2.Mode{cachev2.ModeStandalone, cachev2.ModeCluster} {
		cache := testCache()
		cache.Spec.Mode = mode
		pod := StatefulSet(cache, DefaultImages).Spec.Template.Spec
		if ptr.Deref(pod.AutomountServiceAccountToken, true) {
			t.Errorf("%s: the pods mount a ServiceAccount token, which nothing in them uses", mode)
		}
		if ptr.Deref(pod.EnableServiceLinks, true) {
			t.Errorf("%s: the pods get the namespace's Services as environment variables", mode)
		}
	}
}

// serverDefaulted returns a copy of desired as the API server would store it, plus what other
// tools add: a restart annotation, a foreign label, a sidecar.
func serverDefaulted(desired *appsv1.StatefulSet) *appsv1.StatefulSet {
	sts := desired.DeepCopy()
	sts.CreationTimestamp = metav1.Now()
	sts.ResourceVersion = "42"
	sts.Labels["team"] = "checkout"
	sts.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	sts.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{
		Type:          appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](0)},
	}
	pod := &sts.Spec.Template
	pod.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-29T10:00:00Z"}
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.DNSPolicy = corev1.DNSClusterFirst
	pod.Spec.SchedulerName = corev1.DefaultSchedulerName
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	c := &pod.Spec.Containers[0]
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "metrics-exporter", Image: "exporter:1"})
	return sts
}

func TestMergeStatefulSetOfAMatchingObjectChangesNothing(t *testing.T) {
	desired := StatefulSet(testCache(), DefaultImages)
	stored := serverDefaulted(desired)
	merged := stored.DeepCopy()

	mergeStatefulSet(merged, desired)

	if !equality.Semantic.DeepEqual(stored, merged) {
		t.Errorf("merging into a matching StatefulSet changed it; the reconciler would write on every pass")
	}
}

func TestMergeStatefulSetSetsOwnedFieldsOnly(t *testing.T) {
	cache := testCache()
	stored := serverDefaulted(StatefulSet(cache, DefaultImages))
	cache.Spec.Shards = 5
	cache.Spec.Version = "8.1.2"
	desired := StatefulSet(cache, DefaultImages)

	merged := stored.DeepCopy()
	mergeStatefulSet(merged, desired)

	if got := ptr.Deref(merged.Spec.Replicas, 0); got != 5 {
		t.Errorf("replicas = %d, want 5", got)
	}
	if got := merged.Spec.Template.Spec.Containers[0].Image; got != "valkey/valkey:8.1.2" {
		t.Errorf("image = %q, want valkey/valkey:8.1.2", got)
	}
	if got := merged.Spec.Template.Labels[LabelVersion]; got != "8.1.2" {
		t.Errorf("pod version label = %q, want 8.1.2", got)
	}
	// What others set survives.
	if merged.Labels["team"] != "checkout" {
		t.Error("a label added by another tool was dropped")
	}
	if merged.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" {
		t.Error("the kubectl rollout restart annotation was dropped")
	}
	if len(merged.Spec.Template.Spec.Containers) != 3 {
		t.Errorf("containers = %d, want the Valkey container, the readiness agent and the sidecar", len(merged.Spec.Template.Spec.Containers))
	}
	if merged.Spec.Template.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Error("a server-defaulted field of the Valkey container was cleared")
	}
	if !equality.Semantic.DeepEqual(merged.Spec.UpdateStrategy, stored.Spec.UpdateStrategy) {
		t.Error("the server-defaulted update strategy was changed")
	}
}

func TestMergeStatefulSetIntoANewObjectGivesTheDesiredSpec(t *testing.T) {
	desired := StatefulSet(testCache(), DefaultImages)
	created := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}

	mergeStatefulSet(created, desired)

	if !equality.Semantic.DeepEqual(created.Spec, desired.Spec) {
		t.Errorf("new StatefulSet spec differs from the desired one:\n got %+v\nwant %+v", created.Spec, desired.Spec)
	}
}

func TestMergeStatefulSetKeepsTheImmutableSelector(t *testing.T) {
	cache := testCache()
	stored := serverDefaulted(StatefulSet(cache, DefaultImages))
	stored.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"legacy": "selector"}}
	merged := stored.DeepCopy()

	mergeStatefulSet(merged, StatefulSet(cache, DefaultImages))

	if !equality.Semantic.DeepEqual(merged.Spec.Selector, stored.Spec.Selector) {
		t.Errorf("selector changed to %v; the API server rejects that", merged.Spec.Selector)
	}
}

func TestServiceIsHeadlessAndSelectsTheCachePods(t *testing.T) {
	cache := testCache()
	svc := Service(cache)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("clusterIP = %q, want None (headless)", svc.Spec.ClusterIP)
	}
	pods := StatefulSet(cache, DefaultImages).Spec.Template.Labels
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pods)) {
		t.Errorf("selector %v does not match pod labels %v", svc.Spec.Selector, pods)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != Port {
		t.Errorf("ports = %v, want %d", svc.Spec.Ports, Port)
	}
}

// storedService is desired as the API server stores it, with defaults filled in and a label and
// an annotation added by someone else.
func storedService(desired *corev1.Service) *corev1.Service {
	stored := desired.DeepCopy()
	stored.CreationTimestamp = metav1.Now()
	stored.Labels["team"] = "checkout"
	stored.Annotations = map[string]string{"note": "kept"}
	stored.Spec.Type = corev1.ServiceTypeClusterIP
	stored.Spec.SessionAffinity = corev1.ServiceAffinityNone
	stored.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	stored.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	stored.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	return stored
}

func TestMergeServiceOfAMatchingObjectChangesNothing(t *testing.T) {
	desired := Service(testCache())
	stored := storedService(desired)
	merged := stored.DeepCopy()

	MergeService(merged, desired)

	if !equality.Semantic.DeepEqual(stored, merged) {
		t.Error("merging into a matching Service changed it; the reconciler would write on every pass")
	}
}

// The informer keeps Services stripped; whether a write is needed must come out the same from
// the stripped copy as from the whole stored object.
func TestServiceUpToDateAgreesWhetherStrippedOrNot(t *testing.T) {
	desired := Service(testCache())
	stored := storedService(desired)
	for name, edit := range map[string]func(*corev1.Service){
		"unchanged":             func(*corev1.Service) {},
		"an owned label edited": func(s *corev1.Service) { s.Labels[LabelManagedBy] = "someone" },
		"selector edited":       func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "other"} },
		"port edited":           func(s *corev1.Service) { s.Spec.Ports[0].Port = 7000 },
		"a port added": func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9121})
		},
		"an annotation added":     func(s *corev1.Service) { s.Annotations["other"] = "x" },
		"session affinity set":    func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP },
		"not ready pods included": func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true },
	} {
		edited := stored.DeepCopy()
		edit(edited)
		whole, stripped := ServiceUpToDate(edited, desired), ServiceUpToDate(StripService(edited), desired)
		if whole != stripped {
			t.Errorf("%s: up to date %v from the stored Service, %v from the stripped one", name, whole, stripped)
		}
	}
	if !ServiceUpToDate(StripService(stored), desired) {
		t.Error("a matching Service, stripped, is not up to date")
	}
}

// A Cache's budget lets a voluntary disruption take one of its pods at a time, and a stored
// budget that matches is not written again, whatever the disruption controller put in its status.
func TestThePodDisruptionBudgetLetsOnePodGoAtATime(t *testing.T) {
	cache := testCache()
	pdb := PodDisruptionBudget(cache)
	selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if pods := StatefulSet(cache, DefaultImages).Spec.Template.Labels; !selector.Matches(labels.Set(pods)) {
		t.Errorf("the budget's selector %s misses the pods %v", selector, pods)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil ||
		pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("budget %+v, want maxUnavailable 1, unhealthy pods evicted always", pdb.Spec)
	}
	stored := pdb.DeepCopy()
	stored.Status.DisruptionsAllowed, stored.Status.CurrentHealthy = 1, 3
	if !PodDisruptionBudgetUpToDate(StripPodDisruptionBudget(stored), PodDisruptionBudget(cache)) {
		t.Error("a stored budget as built is not up to date")
	}
	stored.Spec.MaxUnavailable = nil
	stored.Spec.MinAvailable = ptr.To(intstr.FromInt32(3))
	if PodDisruptionBudgetUpToDate(StripPodDisruptionBudget(stored), PodDisruptionBudget(cache)) {
		t.Error("a budget edited to minAvailable 3 is up to date")
	}
	// A budget of an earlier release, with Kubernetes' default for unhealthy pods, is updated.
	stored = PodDisruptionBudget(cache)
	stored.Spec.UnhealthyPodEvictionPolicy = nil
	if PodDisruptionBudgetUpToDate(StripPodDisruptionBudget(stored), PodDisruptionBudget(cache)) {
		t.Error("a budget without the eviction policy for unhealthy pods is up to date")
	}
}

// A Cache's pods are spread evenly over nodes and zones, softly: the constraints select exactly
// the Cache's own pods, and a pod that cannot be placed apart is placed anyway.
func TestPodsSpreadOverNodesAndZones(t *testing.T) {
	template := StatefulSet(testCache(), DefaultImages).Spec.Template
	var keys []string
	for _, c := range template.Spec.TopologySpreadConstraints {
		keys = append(keys, c.TopologyKey)
		selector, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			t.Fatal(err)
		}
		other := StatefulSet(&cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "shop"}}, DefaultImages).Spec.Template.Labels
		if c.MaxSkew != 1 || c.WhenUnsatisfiable != corev1.ScheduleAnyway || !selector.Matches(labels.Set(template.Labels)) || selector.Matches(labels.Set(other)) {
			t.Errorf("spread over %s: %+v; want a soft skew of 1 over this Cache's pods only", c.TopologyKey, c)
		}
	}
	if !slices.Equal(keys, []string{corev1.LabelHostname, corev1.LabelTopologyZone}) {
		t.Errorf("spread over %v, want nodes and zones", keys)
	}
	if template.Spec.Affinity != nil {
		t.Errorf("affinity %+v beside the spread", template.Spec.Affinity)
	}
}

// Every Valkey container's readiness probe, whatever the Cache's mode, auth and TLS, asks the
// readiness agent beside it, which judges the server by the Cache's mode and gives up on a server
// that hangs before the probe's own timeout, so that it says why the server is not ready.
func TestEveryReadinessProbeAsksTheAgentBesideTheServer(t *testing.T) {
	for _, mode := range []cachev2.Mode{cachev2.ModeStandalone, cachev2.ModeCluster} {
		for _, auth := range []bool{false, true} {
			for _, tls := range []bool{false, true} {
				cache := testCache()
				cache.Spec.Mode = mode
				if auth {
					cache.Spec.Auth = &cachev2.Auth{}
				}
				if tls {
					cache.Spec.TLS = &cachev2.TLS{}
				}
				template := StatefulSet(cache, DefaultImages).Spec.Template
				probe := template.Spec.Containers[0].ReadinessProbe
				agent := container(&template, ReadinessContainerName)
				if agent == nil || probe.HTTPGet == nil || probe.HTTPGet.Port.IntValue() != readiness.Port || probe.HTTPGet.Path != readiness.Path {
					t.Fatalf("%s, auth %v, TLS %v: readiness probe %+v, agent %+v", mode, auth, tls, probe, agent)
				}
				options, err := readiness.ParseArgs(agent.Command[1:])
				if err != nil || agent.Image != DefaultImages.Agent || agent.Command[0] != readiness.Program || options.Cluster != (mode == cachev2.ModeCluster) {
					t.Errorf("%s: the readiness agent is %s running %q (%v)", mode, agent.Image, agent.Command, err)
				}
				if readiness.CheckTimeout >= time.Duration(probe.TimeoutSeconds)*time.Second {
					t.Errorf("the agent gives up after %s, not before the probe's timeout of %d s", readiness.CheckTimeout, probe.TimeoutSeconds)
				}
			}
		}
	}
}
