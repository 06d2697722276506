package resources

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
)

// This file is how a Cache's pods serve TLS (spec.tls): the server's TLS settings, the TLS
// Secret mounted in the pod, and the Unix socket through which the pod's own probes, hook and
// exporter reach their server without a certificate.

const (
	// TLSVolume is the volume of the TLS Secret in a Cache's pods, mounted at TLSPath.
	TLSVolume = "valkey-tls"
	TLSPath   = "/tls"

	// socketFile is the server's Unix socket, in its data directory, its working directory:
	// readable by the pod's own containers only (unixsocketperm 700, the valkey user's).
	socketFile = "valkey.sock"
)

// Where a node finds its certificate, its key and the CA's certificate, in the TLS volume.
var (
	tlsCertFile = TLSPath + "/" + TLSCertKey
	tlsKeyFile  = TLSPath + "/" + TLSKeyKey
	tlsCAFile   = TLSPath + "/" + TLSCAKey
)

// tlsClientArgs make valkey-cli speak TLS to another node, with the node's certificate.
var tlsClientArgs = []string{"--tls", "--cacert", tlsCAFile, "--cert", tlsCertFile, "--key", tlsKeyFile}

// listening is where a server accepts clients: on Port, in plain text without TLS, and over TLS
// only with it.
func listening(cache *cachev2.Cache) []string {
	if cache.Spec.TLS == nil {
		return []string{"--port", strconv.Itoa(Port)}
	}
	return []string{"--port", "0", "--tls-port", strconv.Itoa(Port)}
}

// servingTLS makes the container's server speak TLS with the certificate of the TLS Secret: to
// clients, which need no certificate of their own (tls-auth-clients optional: they authenticate
// with a password, spec.auth), to its replicas, and, in a Cluster, on the cluster bus, where
// every node must show a certificate of the Cache's CA (Valkey asks one of every connection to
// the bus, whatever tls-auth-clients says): a process without one cannot MEET the cluster. The
// operator has the servers read the files again after the Secret changes (CONFIG SET), so a
// renewed certificate is served without a restart.
func servingTLS(c *corev1.Container, cache *cachev2.Cache) {
	c.Args = append(c.Args,
		"--tls-cert-file", tlsCertFile,
		"--tls-key-file", tlsKeyFile,
		"--tls-ca-cert-file", tlsCAFile,
		"--tls-auth-clients", "optional",
		"--unixsocket", socketFile,
		"--unixsocketperm", "700")
	switch cache.Spec.Mode { //nolint:exhaustive // a Standalone node has no replicas and no bus
	case cachev2.ModeCluster:
		c.Args = append(c.Args, "--tls-replication", "yes", "--tls-cluster", "yes")
	case cachev2.ModeReplicated:
		c.Args = append(c.Args, "--tls-replication", "yes")
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: TLSVolume, MountPath: TLSPath, ReadOnly: true})
}

// tlsVolumeSource is the TLS Secret as the pods mount it: the certificate, its key and the CA's
// certificate, never the CA's key, readable by the valkey group (the pod's fsGroup) only. The
// kubelet updates the files in place when the Secret changes.
func tlsVolumeSource(cache *cachev2.Cache) corev1.Volume {
	return corev1.Volume{
		Name: TLSVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: cache.TLSSecretName(),
			Items: []corev1.KeyToPath{
				{Key: TLSCertKey, Path: TLSCertKey},
				{Key: TLSKeyKey, Path: TLSKeyKey},
				{Key: TLSCAKey, Path: TLSCAKey},
			},
			DefaultMode: ptr.To[int32](0o440),
		}},
	}
}
