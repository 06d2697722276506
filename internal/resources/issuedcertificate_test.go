package resources

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	cachev2 "example.com/cache-operator/api/v2"
)

// The Certificate asks the issuer named for a certificate of the Cache's names, good on the
// cluster bus, valid as long as the spec says, in the Secret the nodes mount and labelled so
// that the operator sees it.
func TestTheIssuedCertificateAsksTheIssuerForTheCachesCertificate(t *testing.T) {
	cache := tlsCache(720 * time.Hour)
	cache.Spec.TLS.IssuerRef = &cachev2.IssuerRef{Name: "shop-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}
	u := IssuedCertificate(cache, "cluster.local")
	if u.GetName() != cache.TLSSecretName() || u.GetNamespace() != cache.Namespace || u.GroupVersionKind() != CertificateGVK {
		t.Errorf("the Certificate is %s %s/%s", u.GroupVersionKind(), u.GetNamespace(), u.GetName())
	}
	for _, f := range []struct {
		path []string
		want any
	}{
		{[]string{"secretName"}, cache.TLSSecretName()},
		{[]string{"secretTemplate", "labels", cachev2.LabelCredentialsOf}, cache.Name},
		{[]string{"issuerRef", "name"}, "shop-ca"},
		{[]string{"issuerRef", "kind"}, "ClusterIssuer"},
		{[]string{"duration"}, "720h0m0s"},
		{[]string{"privateKey", "rotationPolicy"}, "Always"},
	} {
		got, _, err := unstructured.NestedFieldNoCopy(u.Object, append([]string{"spec"}, f.path...)...)
		if err != nil || got != f.want {
			t.Errorf("spec.%v = %v (%v), want %v", f.path, got, err, f.want)
		}
	}
	names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "dnsNames")
	if !slices.Contains(names, ServerName(cache)) || !slices.Equal(names, CertificateNames(cache, "cluster.local")) {
		t.Errorf("dnsNames %v, want the Cache's names, %s among them", names, ServerName(cache))
	}
	usages, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "usages")
	if !slices.Contains(usages, "server auth") || !slices.Contains(usages, "client auth") {
		t.Errorf("usages %v: the nodes serve the certificate and show it on the cluster bus", usages)
	}

	// A Certificate as stored, with a field and a label of someone else's, and an old duration.
	stored := u.DeepCopy()
	stored.SetLabels(map[string]string{"team": "shop"})
	_ = unstructured.SetNestedField(stored.Object, "1h0m0s", "spec", "duration")
	_ = unstructured.SetNestedField(stored.Object, "15m", "spec", "renewBefore")
	MergeIssuedCertificate(stored, u)
	renewBefore, _, _ := unstructured.NestedString(stored.Object, "spec", "renewBefore")
	duration, _, _ := unstructured.NestedString(stored.Object, "spec", "duration")
	if stored.GetLabels()["team"] != "shop" || renewBefore != "15m" || duration != "720h0m0s" ||
		fmt.Sprint(stored.GetLabels()[LabelManagedBy]) != ManagedBy {
		t.Errorf("merged: labels %v, renewBefore %q, duration %q; want others' kept and ours set", stored.GetLabels(), renewBefore, duration)
	}
}
