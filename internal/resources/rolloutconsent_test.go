package resources

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
)

// Only a rollout that would empty every node waits for consent: a change of version or memory,
// in a Cache with no replica to keep a node's keys, without the annotation.
func TestAwaitsRolloutConsent(t *testing.T) {
	cache := func(mode cachev2.Mode, replicas int32, version string, consent bool) *cachev2.Cache {
		c := &cachev2.Cache{
			ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: "default"},
			Spec: cachev2.CacheSpec{Mode: mode, Shards: 3, Version: version, Memory: resource.MustParse("64Mi"),
				ReplicasPerShard: ptr.To(replicas)},
		}
		if consent {
			c.Annotations = map[string]string{cachev2.AnnotationRolloutEmptiesNodes: cachev2.RolloutEmptiesNodesAllowed}
		}
		return c
	}
	for _, tc := range []struct {
		name string
		was  *cachev2.Cache
		now  *cachev2.Cache
		// byHand: the StatefulSet was written for now, then edited to was's template.
		byHand bool
		waits  bool
	}{
		{"standalone, new version", cache(cachev2.ModeStandalone, 0, "8.1.1", false), cache(cachev2.ModeStandalone, 0, "8.1.2", false), false, true},
		{"standalone, new version, consented", cache(cachev2.ModeStandalone, 0, "8.1.1", false), cache(cachev2.ModeStandalone, 0, "8.1.2", true), false, false},
		{"standalone, same spec", cache(cachev2.ModeStandalone, 0, "8.1.1", false), cache(cachev2.ModeStandalone, 0, "8.1.1", false), false, false},
		{"cluster without replicas, new version", cache(cachev2.ModeCluster, 0, "8.1.1", false), cache(cachev2.ModeCluster, 0, "8.1.2", false), false, true},
		{"cluster with replicas, new version", cache(cachev2.ModeCluster, 1, "8.1.1", false), cache(cachev2.ModeCluster, 1, "8.1.2", false), false, false},
		{"cluster dropping its replicas with a new version", cache(cachev2.ModeCluster, 1, "8.1.1", false), cache(cachev2.ModeCluster, 0, "8.1.2", false), false, true},
		{"standalone, its image edited by hand", cache(cachev2.ModeStandalone, 0, "7.2.0", false), cache(cachev2.ModeStandalone, 0, "8.1.1", false), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sts := StatefulSet(tc.was, DefaultImages)
			if tc.byHand {
				sts.Annotations = StatefulSet(tc.now, DefaultImages).Annotations
			}
			if got := awaitsRolloutConsent(tc.now, sts, StatefulSet(tc.now, DefaultImages)); got != tc.waits {
				t.Errorf("awaitsRolloutConsent = %v, want %v", got, tc.waits)
			}
		})
	}
}
