package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
)

// Telling the nodes of a Cache with TLS to serve the certificate that ensurecertificates.go wrote,
// and the CertificateServed condition that says how far they are.

// serveCertificate has every node of a Cache with TLS serve the certificate its Secret holds,
// once the Secret holds one that the status does not say every node serves
// (status.certificateSerial): a node that serves another reads its files again
// (ReloadCertificates), and serves the new one if the kubelet has updated them. Once every node
// serves it, the status says so; until then the condition names the nodes waited on, and the
// Cache is looked at again after certificatesRecheck. Every pod with an IP counts, running or not
// yet: one whose server started before the kubelet updated its files serves the certificate
// before; one that starts later mounts the Secret as it is then. It sets the CertificateServed
// condition in status, and returns when to look again.
func (r *CacheReconciler) serveCertificate(ctx context.Context, cache *cachev2.Cache, certs certificates, auth valkey.Auth, status *cachev2.CacheStatus) (time.Duration, error) {
	switch {
	case cache.Spec.TLS == nil:
		return 0, nil
	case certs.invalid != nil:
		meta.SetStatusCondition(&status.Conditions, *certs.invalid)
		return certificatesRecheck, nil
	}
	renewal := "its filler renews it"
	if !certs.renewal.IsZero() {
		renewal = "renewed at " + certs.renewal.UTC().Format(time.RFC3339)
	}
	served := certificateCondition(cache, metav1.ConditionTrue, cachev2.ReasonCertificateServed, fmt.Sprintf(
		"every node serves the certificate of Secret %s, serial %s (%s)", cache.TLSSecretName(), certs.serial, renewal))
	if len(certs.distrusting) > 0 {
		var waiting []string
		for _, pod := range certs.distrusting {
			if err := reloadOn(ctx, pod.Status.PodIP, auth); err != nil {
				waiting = append(waiting, fmt.Sprintf("%s (%v)", pod.Name, err))
			} else {
				waiting = append(waiting, pod.Name+" (told to read its files again: the kubelet may not have updated them yet)")
			}
		}
		meta.SetStatusCondition(&status.Conditions, *certificateCondition(cache, metav1.ConditionFalse, cachev2.ReasonServingNewCertificate, fmt.Sprintf(
			"Secret %s gives the nodes a new CA beside the old, which these do not trust yet; they get a certificate of the new CA once all do: %v",
			cache.TLSSecretName(), waiting)))
		return certificatesRecheck, nil
	}
	if status.CertificateSerial == certs.serial {
		meta.SetStatusCondition(&status.Conditions, *served)
		return 0, nil
	}
	pods, err := livePods(ctx, r.APIReader, cache)
	if err != nil {
		return 0, err
	}
	var waiting []string
	for _, pod := range pods {
		if err := serveOn(ctx, pod.Status.PodIP, certs.serial, auth); err != nil {
			waiting = append(waiting, fmt.Sprintf("%s (%v)", pod.Name, err))
		}
	}
	if len(waiting) > 0 {
		meta.SetStatusCondition(&status.Conditions, *certificateCondition(cache, metav1.ConditionFalse, cachev2.ReasonServingNewCertificate, fmt.Sprintf(
			"Secret %s holds the certificate with serial %s, which these nodes do not serve yet: %v",
			cache.TLSSecretName(), certs.serial, waiting)))
		return certificatesRecheck, nil
	}
	status.CertificateSerial = certs.serial
	meta.SetStatusCondition(&status.Conditions, *served)
	if strings.Count(string(certs.caPEM), "BEGIN CERTIFICATE") > 1 {
		// A change of CA ends, the old CA gone, in a pass that sees this serial stored.
		return certificatesRecheck, nil
	}
	return 0, nil
}

// serveOn has the server at ip serve the certificate with the given serial, and fails if it
// serves another even after reading its files again.
func serveOn(ctx context.Context, ip, serial string, auth valkey.Auth) error {
	cert, err := valkey.ServedCertificate(ctx, ip, resources.Port, auth.TLS)
	if err == nil && cert.SerialNumber.String() == serial {
		return nil
	}
	if err := reloadOn(ctx, ip, auth); err != nil {
		return err
	}
	if cert, err = valkey.ServedCertificate(ctx, ip, resources.Port, auth.TLS); err != nil {
		return err
	}
	if got := cert.SerialNumber.String(); got != serial {
		return fmt.Errorf("serves serial %s: its files are not updated yet", got)
	}
	return nil
}

// reloadOn has the server at ip read its certificate, its key and its CAs again.
func reloadOn(ctx context.Context, ip string, auth valkey.Auth) error {
	server, err := valkey.Connect(ip, resources.Port, auth)
	if err != nil {
		return err
	}
	defer server.Close()
	return server.ReloadCertificates(ctx)
}

// certificateCondition is the Cache's CertificateServed condition.
func certificateCondition(cache *cachev2.Cache, status metav1.ConditionStatus, reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: cachev2.ConditionCertificateServed, Status: status, Reason: reason,
		Message: message, ObservedGeneration: cache.Generation}
}
