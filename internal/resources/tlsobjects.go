package resources

import (
	"crypto/tls"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
)

// The objects that hold a Cache's certificates (certificates.go), and the TLS configuration of its
// clients.

// TLSSecret is the TLS Secret of a Cache that holds data (Certificates.TLS).
func TLSSecret(cache *cachev2.Cache, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cache.TLSSecretName(), Namespace: cache.Namespace, Labels: credentialLabels(cache)},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
}

// CASecret is the Secret of a Cache's CA that holds data (Certificates.CA).
func CASecret(cache *cachev2.Cache, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cache.CASecretName(), Namespace: cache.Namespace, Labels: credentialLabels(cache)},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// MergeTLSSecret makes dst, a stored TLS or CA Secret or a new empty one, hold what desired holds,
// and leaves labels and annotations of others alone.
func MergeTLSSecret(dst, desired *corev1.Secret) {
	mergeLabels(&dst.Labels, desired.Labels)
	if dst.CreationTimestamp.IsZero() {
		dst.Type = desired.Type // immutable
	}
	dst.Data = desired.Data
}

// CAConfigMap publishes, for clients, the certificates of the CAs they are to trust (caPEM: those
// the TLS Secret gives the nodes, and those of the nodes' certificates before, while a change of
// CA lasts).
func CAConfigMap(cache *cachev2.Cache, caPEM []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cache.CAConfigMapName(), Namespace: cache.Namespace, Labels: Labels(cache)},
		Data:       map[string]string{TLSCAKey: string(caPEM)},
	}
}

// MergeCAConfigMap makes dst, a stored CA ConfigMap or a new empty one, hold what desired holds,
// and leaves labels and annotations of others alone.
func MergeCAConfigMap(dst, desired *corev1.ConfigMap) {
	mergeLabels(&dst.Labels, desired.Labels)
	dst.Data = desired.Data
}

// TLSClientConfig is how the operator and a backup's agent speak TLS to the Cache's nodes, given
// the CA certificates to trust (valkey.TLSConfig): those of its TLS Secret, or those published.
func TLSClientConfig(cache *cachev2.Cache, caPEM []byte) (*tls.Config, error) {
	config, err := valkey.TLSConfig(caPEM, ServerName(cache))
	if err != nil {
		return nil, fmt.Errorf("the CA certificates of the Cache (%s of Secret %s, or ConfigMap %s): %w",
			TLSCAKey, cache.TLSSecretName(), cache.CAConfigMapName(), err)
	}
	return config, nil
}
