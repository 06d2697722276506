package backupcontroller

import (
	"context"
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/bucket"
	"example.com/cache-operator/internal/resources"
)

// start starts the backup's Job once its Cache is Ready, and records it Running with the shards
// it copies; until then the backup is Pending, with the reason. A backup whose Cache does not
// exist fails.
func (r *Reconciler) start(ctx context.Context, b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus) error {
	if b.Spec.ImportPath != "" {
		return r.startImport(ctx, b, status)
	}
	cache := &cachev2.Cache{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.CacheName}, cache); apierrors.IsNotFound(err) {
		setPhase(b, status, cachev1alpha1.BackupFailed, cachev1alpha1.ReasonCacheNotFound,
			fmt.Sprintf("Cache %s does not exist in namespace %s", b.Spec.CacheName, b.Namespace))
		return nil
	} else if err != nil {
		return err
	}
	ready := meta.FindStatusCondition(cache.Status.Conditions, cachev2.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != cache.Generation {
		message := "the Cache has not reported Ready yet"
		if ready != nil && ready.Status != metav1.ConditionTrue {
			message = fmt.Sprintf("the Cache is not Ready (%s: %s)", ready.Reason, ready.Message)
		}
		setPhase(b, status, cachev1alpha1.BackupPending, cachev1alpha1.ReasonCacheNotReady, message+"; the backup starts once it is")
		return nil
	}
	if waiting, err := r.backupUserPending(ctx, cache); err != nil {
		return err
	} else if waiting != "" {
		setPhase(b, status, cachev1alpha1.BackupPending, cachev1alpha1.ReasonCacheNotReady, waiting+"; the backup starts once they have")
		return nil
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return err
	}
	shards, err := sources(cache, pods.Items)
	if err != nil {
		setPhase(b, status, cachev1alpha1.BackupPending, cachev1alpha1.ReasonCacheNotReady, err.Error()+"; the backup starts once it does")
		return nil
	}
	location, backupPath := backup.PlaceOf(b)
	plan := backup.Plan{
		Location:      location,
		Path:          backupPath,
		ValkeyVersion: cache.Spec.Version,
		Mode:          cache.Spec.Mode,
		Shards:        shards,
		Stall:         r.Stall,
	}
	if made, err := r.createJob(ctx, b, status, resources.BackupJob(b, cache, plan, r.AgentImage)); err != nil || !made {
		return err
	}
	recordRunning(b, status, plan)
	return nil
}

// backupUserPending says why the servers of a Cache with auth may not let the backup agent in as
// the backup user yet, or "": its Job speaks as that user, whose password the Cache's ACL Secret
// must hold, and which every node running when the Secret was last written must have been given
// (resources.ACL.GivenToNodes). A Cache made by a release without that user gets it at its next
// pass after the upgrade.
func (r *Reconciler) backupUserPending(ctx context.Context, cache *cachev2.Cache) (string, error) {
	if cache.Spec.Auth == nil {
		return "", nil
	}
	secret := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: cache.Namespace, Name: resources.ACLSecretName(cache)}, secret)
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return "", err
	}
	if !resources.ReadACL(secret).GivenToNodes(cache, resources.BackupUser) {
		return fmt.Sprintf("the Cache's nodes have not all been given the user %s yet", resources.BackupUser), nil
	}
	return "", nil
}

// startImport starts the Job that reads an imported backup's manifest, and records it Running.
func (r *Reconciler) startImport(ctx context.Context, b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus) error {
	location, backupPath := backup.PlaceOf(b)
	place := backup.Place{Location: location, Path: backupPath}
	if made, err := r.createJob(ctx, b, status, resources.BackupImportJob(b, place, r.AgentImage)); err != nil || !made {
		return err
	}
	recordImporting(b, status, place)
	return nil
}

// createJob creates the backup's Job and reports whether it did. One of its name that exists
// was made by a pass whose status write did not land (the next pass follows it, from its own
// arguments), or is someone else's; one the API server refuses fails the backup.
func (r *Reconciler) createJob(ctx context.Context, b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus, job *batchv1.Job) (bool, error) {
	if err := controllerutil.SetControllerReference(b, job, r.Scheme()); err != nil {
		return false, err
	}
	err := r.Create(ctx, job)
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, r.nameTaken(ctx, b, status)
	case apierrors.IsInvalid(err):
		setPhase(b, status, cachev1alpha1.BackupFailed, cachev1alpha1.ReasonBackupFailed, "the backup's Job cannot be made: "+err.Error())
		return false, nil
	}
	return err == nil, err
}

// nameTaken fails the backup if the Job of its name is not its own; one that is goes on.
func (r *Reconciler) nameTaken(ctx context.Context, b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus) error {
	job := &batchv1.Job{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: resources.BackupJobName(b)}, job); err != nil {
		return client.IgnoreNotFound(err) // gone again: the next pass makes it
	}
	if !metav1.IsControlledBy(job, b) {
		foreignJob(b, status, job)
	}
	return nil
}

// foreignJob deals with a Job of the backup's Job's name that is not the backup's. One of an
// earlier backup of the same name is the garbage collector's to remove: the backup waits, and
// that Job's deletion, whose owner has the backup's name, brings it back. Someone else's fails it.
func foreignJob(b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus, job *batchv1.Job) {
	if owner := metav1.GetControllerOf(job); owner != nil && owner.Kind == "CacheBackup" && owner.Name == b.Name {
		return
	}
	setPhase(b, status, cachev1alpha1.BackupFailed, cachev1alpha1.ReasonBackupFailed, fmt.Sprintf(
		"a Job named %s exists and is not this backup's: make the backup under another name, or remove that Job", job.Name))
}

// recordRunning records the backup Running, with the mode of its Cache, the shards its Job
// copies and where to.
func recordRunning(b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus, plan backup.Plan) {
	if status.StartTime == nil {
		status.StartTime = ptrNow()
	}
	status.Location = locationURL(plan.Location, plan.Path)
	status.ValkeyVersion = plan.ValkeyVersion
	status.CacheMode = string(plan.Mode)
	status.Shards = nil
	for _, s := range plan.Shards {
		status.Shards = append(status.Shards, cachev1alpha1.BackupShard{Name: s.Name, Source: s.Source})
	}
	setPhase(b, status, cachev1alpha1.BackupRunning, cachev1alpha1.ReasonSnapshotting,
		fmt.Sprintf("Job %s streams %d snapshots to %s", resources.BackupJobName(b), len(plan.Shards), status.Location))
}

// locationURL is where a backup's objects are, as status.location says it: s3://<bucket>/<path>/.
func locationURL(loc bucket.Location, backupPath string) string {
	return "s3://" + path.Join(loc.Bucket, loc.Prefix, backupPath) + "/"
}

// recordImporting records an imported backup Running while its Job reads the manifest.
func recordImporting(b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus, place backup.Place) {
	if status.StartTime == nil {
		status.StartTime = ptrNow()
	}
	status.Location = locationURL(place.Location, place.Path)
	setPhase(b, status, cachev1alpha1.BackupRunning, cachev1alpha1.ReasonReadingManifest,
		fmt.Sprintf("Job %s reads the manifest at %s", resources.BackupJobName(b), status.Location))
}

// sources are the servers a backup of the Cache copies, one per shard: for a Cluster or a
// Replicated Cache, a ready replica of each primary when it has one (ready: in sync with it), so
// that the primary keeps serving undisturbed, or else the primary; for a Standalone Cache, every
// node. Shards are named in the order of their primaries' pods.
func sources(cache *cachev2.Cache, pods []corev1.Pod) ([]backup.Shard, error) {
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	var servers [][]string // each shard's pods, the preferred first
	if cache.Spec.Mode != cachev2.ModeStandalone {
		var primaries []string
		replicas := map[string][]string{}
		for _, n := range cache.Status.Nodes {
			switch n.Role {
			case cachev2.RolePrimary:
				primaries = append(primaries, n.Pod)
			case cachev2.RoleReplica:
				replicas[n.PrimaryPod] = append(replicas[n.PrimaryPod], n.Pod)
			}
		}
		slices.Sort(primaries)
		for _, p := range primaries {
			servers = append(servers, append(slices.Sorted(slices.Values(replicas[p])), p))
		}
	} else {
		for i := range cache.Spec.Nodes() {
			servers = append(servers, []string{fmt.Sprintf("%s-%d", cache.Name, i)})
		}
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("the Cache lists no primary")
	}
	shards := make([]backup.Shard, 0, len(servers))
	for i, candidates := range servers {
		pod := firstReady(candidates, byName)
		if pod == nil {
			return nil, fmt.Errorf("no pod of shard %d (%v) is ready", i, candidates)
		}
		shards = append(shards, backup.Shard{Name: "shard-" + strconv.Itoa(i), Source: pod.Name,
			Addr: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(resources.Port))})
	}
	return shards, nil
}

// firstReady is the first of the named pods that is ready and not going away.
func firstReady(names []string, pods map[string]*corev1.Pod) *corev1.Pod {
	for _, name := range names {
		if pod := pods[name]; pod != nil && resources.PodReady(pod) {
			return pod
		}
	}
	return nil
}
