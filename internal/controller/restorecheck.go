package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
)

// Checking a restore once the Cache would be Ready: whether every shard holds what the backup held.

// checkRestore, once the Cache would be Ready, asks the server that holds each shard of the
// backup now (shardHolder) what it holds. It returns the Restored condition: True when every
// shard is whole, and then the ConfigMap is deleted. A shard is whole when its server holds as
// many keys as the backup, or loaded them all at start and evicted none since (keys with a TTL
// expire); a server that evicted keys holds less than the backup, whatever it loaded.
func (r *CacheReconciler) checkRestore(ctx context.Context, cache *cachev2.Cache, rs restore, members []clusterMember, primary string, auth valkey.Auth, ready bool) (*metav1.Condition, error) {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return nil, err
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
		if failed := failedFetch(&pods.Items[i]); failed != "" {
			return restoreCondition(cache, cachev2.ReasonRestoreFailed, fmt.Sprintf(
				"pod %s cannot fetch its shard of CacheBackup %s (it retries): %s", pods.Items[i].Name, rs.record.Backup, failed)), nil
		}
	}
	if !ready {
		return restoreCondition(cache, cachev2.ReasonRestoring,
			fmt.Sprintf("the nodes start with the data of CacheBackup %s; they are checked once they are all up", rs.record.Backup)), nil
	}
	var total int64
	for i, want := range rs.record.Keys {
		name, err := shardHolder(cache, rs.record, members, primary, i)
		if err != nil {
			return nil, err
		}
		pod := byName[name]
		if pod == nil || pod.Status.PodIP == "" {
			return restoreCondition(cache, cachev2.ReasonRestoring, fmt.Sprintf("waiting for pod %s, which holds shard-%d, to be checked", name, i)), nil
		}
		held, loaded, err := shardHeld(ctx, pod.Status.PodIP, auth)
		if err != nil {
			return nil, err
		}
		if why := notWhole(held, loaded, want); why != "" {
			return restoreCondition(cache, cachev2.ReasonRestoreFailed, fmt.Sprintf(
				"pod %s's server, which holds shard-%d of CacheBackup %s, %s: the Cache is not Ready with keys missing; create it again",
				name, i, rs.record.Backup, why)), nil
		}
		total += want
	}
	// The ConfigMap goes in the next pass, once this is stored (prepareRestore).
	return restoreCondition(cache, cachev2.ReasonRestoreVerified, fmt.Sprintf("every shard of CacheBackup %s is whole: %d keys", rs.record.Backup, total)), nil
}

// notWhole says why a shard of want keys is not whole on a server that holds what held says and
// read loaded keys from the RDB it last loaded, or nothing: it is whole when the server holds as
// many keys, or loaded them all and evicted none since (keys with a TTL expire).
func notWhole(held valkey.Dataset, loaded, want int64) string {
	switch {
	case held.Evicted > 0:
		return fmt.Sprintf("evicted %d keys: its maxmemory is too small for the data (give it more spec.memory)", held.Evicted)
	case held.Keys < want && loaded != want:
		return fmt.Sprintf("holds %d keys and loaded %d at start; the backup holds %d", held.Keys, loaded, want)
	}
	return ""
}

// shardHolder is the pod whose server holds shard i of the restore now: a Standalone Cache's node
// of ordinal i, which took it; in a Cluster, the primary serving the shard's slots, which is the
// node that took it or, if that one restarted (empty, as a new node), the replica that took over
// from it; in a Replicated Cache, its primary (primary), which is the first node, which took its
// one shard, or a replica that took over from it.
func shardHolder(cache *cachev2.Cache, record restoreRecord, members []clusterMember, primary string, i int) (string, error) {
	took := cache.Name + "-" + strconv.Itoa(i)
	if cache.Spec.Mode == cachev2.ModeReplicated && primary != "" {
		return primary, nil
	}
	if cache.Spec.Mode != cachev2.ModeCluster || i >= len(record.Slots) {
		return took, nil
	}
	slots, err := valkey.ParseSlots(record.Slots[i])
	if err != nil {
		return "", fmt.Errorf("the restore's record of shard %d: %w", i, err)
	}
	if len(slots) == 0 {
		return took, nil
	}
	for _, m := range members {
		if self, ok := valkey.Myself(m.Nodes); ok && slices.ContainsFunc(self.Slots, func(r valkey.SlotRange) bool {
			return r.Start <= slots[0].Start && slots[0].Start <= r.End
		}) {
			return m.Pod, nil
		}
	}
	return took, nil
}

// shardHeld asks the server at ip what it holds, and how many keys it read from the RDB it last
// loaded.
func shardHeld(ctx context.Context, ip string, auth valkey.Auth) (valkey.Dataset, int64, error) {
	server, err := valkey.Connect(ip, resources.Port, auth)
	if err != nil {
		return valkey.Dataset{}, 0, err
	}
	defer server.Close()
	held, err := server.Dataset(ctx)
	if err != nil {
		return valkey.Dataset{}, 0, err
	}
	loaded, err := server.LoadedAtStart(ctx)
	return held, loaded, err
}

// failedFetch is why the pod's restore step failed last, if it did and has not succeeded since:
// what it wrote as its termination message (a backup not whole, the bucket unreachable).
func failedFetch(pod *corev1.Pod) string {
	for _, c := range pod.Status.InitContainerStatuses {
		if c.Name != resources.RestoreContainerName || c.State.Terminated != nil && c.State.Terminated.ExitCode == 0 {
			continue
		}
		for _, ended := range []*corev1.ContainerStateTerminated{c.State.Terminated, c.LastTerminationState.Terminated} {
			if ended != nil && ended.ExitCode != 0 {
				return strings.TrimSpace(ended.Message)
			}
		}
	}
	return ""
}
