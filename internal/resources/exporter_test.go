package resources

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	cachev2 "example.com/cache-operator/api/v2"
)

func metricsCache(auth bool) *cachev2.Cache {
	c := settingsCache(nil)
	c.Spec.Metrics = &cachev2.Metrics{Enabled: true}
	if auth {
		c.Spec.Auth = &cachev2.Auth{}
	}
	return c
}

func container(template *corev1.PodTemplateSpec, name string) *corev1.Container {
	i := slices.IndexFunc(template.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return &template.Spec.Containers[i]
}

// A Cache with metrics runs the exporter beside Valkey on the port the PodMonitor scrapes, from
// the operator's image; with auth it connects as its own user, whose password only the ACL
// Secret holds. A Cache without metrics, or with metrics: {}, runs no exporter.
func TestTheExporterRunsBesideValkeyWhenMetricsAreEnabled(t *testing.T) {
	images := Images{ValkeyRepository: DefaultImageRepository, Exporter: "mirror.example/redis_exporter:v1.45.0"}
	for name, metrics := range map[string]*cachev2.Metrics{"no metrics": nil, "metrics: {}": {}} {
		cache := settingsCache(nil)
		cache.Spec.Metrics = metrics
		if template := StatefulSet(cache, images).Spec.Template; container(&template, ExporterContainerName) != nil {
			t.Errorf("%s: the pods run the exporter", name)
		}
	}

	template := StatefulSet(metricsCache(false), images).Spec.Template
	exporter := container(&template, ExporterContainerName)
	if exporter == nil {
		t.Fatalf("metrics enabled: no exporter among %d containers", len(template.Spec.Containers))
	}
	if exporter.Image != images.Exporter {
		t.Errorf("exporter image %q, want the operator's %q", exporter.Image, images.Exporter)
	}
	if len(exporter.Ports) != 1 || exporter.Ports[0].Name != MetricsPortName || exporter.Ports[0].ContainerPort != MetricsPort {
		t.Errorf("exporter ports %v, want %s on %d (the PodMonitor scrapes the port by name)", exporter.Ports, MetricsPortName, MetricsPort)
	}
	if exporter.ReadinessProbe != nil {
		t.Errorf("the exporter has a readiness probe: a node would leave its Service because its exporter did")
	}
	if sc := exporter.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("exporter security context %+v, want the restricted one", sc)
	}
	if len(exporter.Env) != 0 {
		t.Errorf("without auth the exporter gets credentials: %v", exporter.Env)
	}

	withAuth := StatefulSet(metricsCache(true), images).Spec.Template
	env := container(&withAuth, ExporterContainerName).Env
	user := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == envExporterUser && e.Value == ExporterUser })
	password := slices.IndexFunc(env, func(e corev1.EnvVar) bool {
		ref := e.ValueFrom
		return e.Name == envExporterPassword && ref != nil && ref.SecretKeyRef != nil &&
			ref.SecretKeyRef.Name == ACLSecretName(metricsCache(true)) && ref.SecretKeyRef.Key == ExporterUser
	})
	if user < 0 || password < 0 {
		t.Errorf("with auth the exporter's environment is %v, want user %s and its password from the ACL Secret", env, ExporterUser)
	}
}

// Turning metrics on or off is a change of the spec: it rolls out, and is undone exactly. A new
// exporter image alone is the operator's (a flag), so it is held like any new release's
// template, and an operator upgrade restarts no pod. A sidecar someone else added survives both.
func TestMetricsOnOrOffIsAChangeOfTheSpecAndTheExportersImageIsTheOperators(t *testing.T) {
	without := StatefulSet(settingsCache(nil), DefaultImages)
	with := StatefulSet(metricsCache(false), DefaultImages)
	if specInputs(&without.Spec.Template) == specInputs(&with.Spec.Template) {
		t.Errorf("metrics on: the spec inputs did not change")
	}
	if hold := holdOf(metricsCache(false), stored(without), with, ""); hold != TemplateCurrent {
		t.Errorf("metrics turned on: the template is held (%v), want it rolled out", hold)
	}

	sts := stored(without)
	mergeStatefulSet(sts, with)
	if container(&sts.Spec.Template, ExporterContainerName) == nil || container(&sts.Spec.Template, "metrics-exporter") == nil {
		t.Errorf("metrics on: containers %v, want the exporter added beside someone else's sidecar", sts.Spec.Template.Spec.Containers)
	}
	if !statefulSetUpToDate(sts, with) || !statefulSetUpToDate(StripStatefulSet(sts), with) {
		t.Errorf("metrics on and written, the StatefulSet is still not up to date")
	}
	mergeStatefulSet(sts, without)
	if container(&sts.Spec.Template, ExporterContainerName) != nil || container(&sts.Spec.Template, "metrics-exporter") == nil {
		t.Errorf("metrics off: containers %v, want the exporter gone and someone else's sidecar kept", sts.Spec.Template.Spec.Containers)
	}
	if !statefulSetUpToDate(sts, without) {
		t.Errorf("metrics off and written, the StatefulSet is still not up to date")
	}

	newer := StatefulSet(metricsCache(false), Images{ValkeyRepository: DefaultImageRepository, Exporter: "oliver006/redis_exporter:v1.69.0"})
	if hold := holdOf(metricsCache(false), stored(with), newer, ""); hold != TemplateHeldForRelease {
		t.Errorf("a new exporter image alone: hold %v, want it held as an operator release's template", hold)
	}
}
