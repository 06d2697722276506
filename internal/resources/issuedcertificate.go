package resources

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cachev2 "example.com/cache-operator/api/v2"
)

// This file is the cert-manager Certificate of a Cache whose spec.tls names an issuer
// (spec.tls.issuerRef): it has that issuer fill the Cache's TLS Secret, which the nodes then
// serve as they serve a Secret the user names. The operator handles it as unstructured, so that
// it links none of cert-manager's code and runs where cert-manager is not installed.

// CertificateGVK is the kind of cert-manager's Certificate.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// IssuedCertificate is the Certificate that asks the issuer of the Cache's spec.tls.issuerRef
// for the nodes' certificate, in a cluster of the given DNS domain: the names of
// CertificateNames, good for server and client authentication (a node shows it on the cluster
// bus), valid for spec.tls.certificateValidity and renewed, by cert-manager's default, when a
// third of that is left, with a new key each time. cert-manager puts it in the Secret
// cache.TLSSecretName(), labelled so that the operator sees it.
func IssuedCertificate(cache *cachev2.Cache, clusterDomain string) *unstructured.Unstructured {
	ref := cache.Spec.TLS.IssuerRef
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": cache.TLSSecretName(), "namespace": cache.Namespace},
		"spec":     issuedCertificateSpec(cache, clusterDomain, ref),
	}}
	u.SetGroupVersionKind(CertificateGVK)
	u.SetLabels(Labels(cache))
	return u
}

func issuedCertificateSpec(cache *cachev2.Cache, clusterDomain string, ref *cachev2.IssuerRef) map[string]any {
	var dnsNames []any
	for _, name := range CertificateNames(cache, clusterDomain) {
		dnsNames = append(dnsNames, name)
	}
	labels := map[string]any{}
	for k, v := range credentialLabels(cache) {
		labels[k] = v
	}
	return map[string]any{
		"secretName":     cache.TLSSecretName(),
		"secretTemplate": map[string]any{"labels": labels},
		"issuerRef":      map[string]any{"name": ref.Name, "kind": ref.Kind, "group": ref.Group},
		"dnsNames":       dnsNames,
		"duration":       certificateValidity(cache).String(),
		"usages":         []any{"digital signature", "server auth", "client auth"},
		"privateKey":     map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
	}
}

// MergeIssuedCertificate makes dst, a stored Certificate or a new empty one, ask for what desired
// asks for: the fields of its spec that the operator sets, and its labels; the rest of the spec,
// and labels and annotations of others, stay.
func MergeIssuedCertificate(dst, desired *unstructured.Unstructured) {
	labels := dst.GetLabels()
	mergeLabels(&labels, desired.GetLabels())
	dst.SetLabels(labels)
	spec, _, _ := unstructured.NestedMap(dst.Object, "spec")
	if spec == nil {
		spec = map[string]any{}
	}
	for k, v := range desired.Object["spec"].(map[string]any) {
		spec[k] = v
	}
	dst.Object["spec"] = spec
}
