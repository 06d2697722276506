//go:build integration

package resources

import (
	"slices"
	"strings"
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

// A Replicated node's server, as its container starts it, takes no write and serves no replica's
// resynchronisation until the operator gives it a role: a primary restarted in place so neither
// takes writes through the primary's Service nor wipes a replica that still points at its address.
// On every release.
func TestAReplicatedNodeStartsRefusingWritesAndReplicas(t *testing.T) {
	ip := testenv.LoopbackIPs(31)[30]
	for _, release := range testenv.ValkeyReleases(t) {
		t.Run(release.Version, func(t *testing.T) {
			cache := replicatedCache()
			cache.Spec.Version = release.Version
			args := StatefulSet(cache, DefaultImages).Spec.Template.Spec.Containers[0].Args
			args = slices.Clone(args[slices.Index(args, "--maxmemory"):])
			// The kubelet's substitution of the pod's own fields.
			pod := strings.NewReplacer("$(POD_NAMESPACE)", "shop", "$(POD_NAME)", "orders-cache-0")
			for i := range args {
				args[i] = pod.Replace(args[i])
			}
			testenv.StartValkeyRelease(t, release, ip, Port, args...)
			held := testenv.Valkey(t, ip, Port)
			if err := held.Do(t.Context(), held.B().Set().Key("k").Value("v").Build()).Error(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
				t.Errorf("SET on a server given no role: %v, want READONLY", err)
			}
			psync := held.Do(t.Context(), held.B().Arbitrary("PSYNC").Args("?", "-1").Build()).Error()
			if psync == nil || !strings.Contains(psync.Error(), "NOMASTERLINK") {
				t.Errorf("PSYNC to a server given no role: %v, want NOMASTERLINK", psync)
			}
		})
	}
}
