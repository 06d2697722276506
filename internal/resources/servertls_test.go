package resources

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/readiness"
)

// A Cache with TLS listens over TLS only, with the certificate of its Secret mounted from the
// Secret without the CA's key; a Cluster's replication and bus, and a Replicated Cache's
// replication, speak TLS too. The readiness
// agent, the hook and the exporter reach their own server through its Unix socket, and the hook asks the
// replica over TLS.
func TestTLSNodesServeTLSOnlyAndReachTheirOwnServerThroughItsSocket(t *testing.T) {
	for _, mode := range []cachev2.Mode{cachev2.ModeStandalone, cachev2.ModeCluster, cachev2.ModeReplicated} {
		cache := tlsCache(24 * time.Hour)
		cache.Spec.Mode = mode
		cache.Spec.Auth = &cachev2.Auth{}
		cache.Spec.Metrics = &cachev2.Metrics{Enabled: true}
		template := StatefulSet(cache, DefaultImages).Spec.Template
		pod := template.Spec
		valkey, agent, exporter := pod.Containers[0], container(&template, ReadinessContainerName), container(&template, ExporterContainerName)
		args := strings.Join(valkey.Args, " ")
		for _, want := range []string{"--port 0 --tls-port 6379", "--tls-cert-file /tls/tls.crt", "--tls-key-file /tls/tls.key",
			"--tls-ca-cert-file /tls/ca.crt", "--tls-auth-clients optional", "--unixsocket valkey.sock --unixsocketperm 700"} {
			if !strings.Contains(args, want) {
				t.Errorf("%s: args %q lack %q", mode, args, want)
			}
		}
		if replication := strings.Contains(args, "--tls-replication yes"); replication != (mode != cachev2.ModeStandalone) {
			t.Errorf("%s: args %q: replication over TLS %v", mode, args, replication)
		}
		if bus := strings.Contains(args, "--tls-cluster yes"); bus != (mode == cachev2.ModeCluster) {
			t.Errorf("%s: args %q: the bus over TLS %v", mode, args, bus)
		}
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == TLSVolume })
		if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != "orders-cache-tls" {
			t.Fatalf("%s: volumes %+v, want the TLS Secret", mode, pod.Volumes)
		}
		for _, item := range pod.Volumes[i].Secret.Items {
			if item.Key == tlsCAKey {
				t.Errorf("%s: the pods mount the CA's key", mode)
			}
		}
		if !slices.ContainsFunc(valkey.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == TLSVolume && m.MountPath == TLSPath && m.ReadOnly }) {
			t.Errorf("%s: mounts %+v", mode, valkey.VolumeMounts)
		}
		if options, err := readiness.ParseArgs(agent.Command[1:]); err != nil || options.Socket != "/data/valkey.sock" ||
			len(agent.VolumeMounts) != 1 || agent.VolumeMounts[0].Name != dataVolume || agent.VolumeMounts[0].MountPath != "/data" {
			t.Errorf("%s: the readiness agent runs %q (%v) with %+v, want it on the socket in the data volume", mode, agent.Command, err, agent.VolumeMounts)
		}
		if mode == cachev2.ModeCluster {
			// Valkey prints port 0 to the hook's plain-text connection: the replica's TLS port is
			// Port.
			calls := handOver(t, valkey.Lifecycle.PreStop.Exec.Command, "198.18.1.2:0@16379")
			if want := "--user node --tls --cacert /tls/ca.crt --cert /tls/tls.crt --key /tls/tls.key -p 6379 -h 198.18.1.2 CLUSTER FAILOVER"; !slices.Contains(calls, want) {
				t.Errorf("the preStop hook ran valkey-cli %q, want the replica asked over TLS: %q", calls, want)
			}
			for _, call := range calls {
				if !strings.HasPrefix(call, "--user node -s valkey.sock ") && !strings.Contains(call, "CLUSTER FAILOVER") {
					t.Errorf("the preStop hook ran valkey-cli %q, not through its own server's socket", call)
				}
			}
		}
		if mode == cachev2.ModeReplicated {
			// A Replicated primary's FAILOVER names no replica: every call goes to its own server.
			calls := handOver(t, valkey.Lifecycle.PreStop.Exec.Command, "")
			if !slices.Contains(calls, "--user node -s valkey.sock FAILOVER TIMEOUT 5000") {
				t.Errorf("the preStop hook ran valkey-cli %q, want FAILOVER through its own server's socket", calls)
			}
			for _, call := range calls {
				if !strings.HasPrefix(call, "--user node -s valkey.sock ") {
					t.Errorf("the preStop hook ran valkey-cli %q, not through its own server's socket", call)
				}
			}
		}
		if exporter.Args[0] != "--redis.addr=unix:///data/valkey.sock" || len(exporter.VolumeMounts) != 1 || exporter.VolumeMounts[0].Name != dataVolume {
			t.Errorf("%s: exporter %q %+v, want it on the socket in the data volume", mode, exporter.Args, exporter.VolumeMounts)
		}
	}
}
