package resources

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/gcpacing"
)

const (
	// OperatorImageRepository is where the operator's own image comes from, unless the install
	// says otherwise: its backup Jobs run it too.
	OperatorImageRepository = "example.com/cache-operator"
	// DefaultAgentImage is the operator's image of this release, which its backup Jobs and the
	// cache pods' readiness agents run unless the operator is told otherwise (--agent-image):
	// the install sets it to the image it runs the operator from.
	DefaultAgentImage = OperatorImageRepository + ":v0.1.0"

	// BackupAppName is the value of app.kubernetes.io/name on a backup's Job and its pod.
	BackupAppName = "cache-backup"
	// BackupContainerName is the name of the container that takes a backup.
	BackupContainerName = "backup"
	// BackupDeadline bounds a backup's Job: one that has not ended by then is stopped and fails.
	// Each snapshot fails on its own much sooner if its server stops sending (snapshot.DefaultStall).
	BackupDeadline = 6 * 60 * 60

	// terminationMessagePath is where a container writes what its pod's status reports when it
	// ends: the kubelet's default.
	terminationMessagePath = "/dev/termination-log"
	// agentUID is the non-root user of the operator's distroless image.
	agentUID = 65532
)

// BackupJobName is the name of the Job that takes a backup.
func BackupJobName(b *cachev1alpha1.CacheBackup) string { return b.Name + "-backup" }

// BackupLabels are the labels of a backup's Job and its pod. The operator's informer caches the
// Jobs that carry them.
func BackupLabels(b *cachev1alpha1.CacheBackup) map[string]string {
	return map[string]string{LabelName: BackupAppName, LabelInstance: b.Name, LabelManagedBy: ManagedBy}
}

// BackupJob is the Job that takes a backup as the plan says, in a pod of the operator's own
// image (agentImage) running its agent mode (backup.RunAgent). The pod reads the bucket's
// credentials from the user's Secret, and has no access to the API server: it reaches the Cache's
// servers and the bucket, nothing else. It runs once: a backup that fails is retried as a new
// CacheBackup, which takes a new, whole snapshot. The plan's result file is set here. For a Cache
// with auth, the pod also reads the backup user's password from the Cache's ACL Secret, and for
// one with TLS the CA's certificate from its TLS Secret.
func BackupJob(b *cachev1alpha1.CacheBackup, cache *cachev2.Cache, plan backup.Plan, agentImage string) *batchv1.Job {
	plan.ResultFile = terminationMessagePath
	env := bucketCredentials(b)
	if cache.Spec.Auth != nil {
		env = append(env, corev1.EnvVar{Name: backup.EnvValkeyUser, Value: BackupUser},
			secretKey(backup.EnvValkeyPassword, ACLSecretName(cache), BackupUser, false))
	}
	if cache.Spec.TLS != nil {
		env = append(env, secretKey(backup.EnvValkeyCA, cache.TLSSecretName(), TLSCAKey, false),
			corev1.EnvVar{Name: backup.EnvValkeyServerName, Value: ServerName(cache)})
	}
	// Each shard's upload holds one part in memory (backup.MaxParallelShards at once).
	return agentJob(b, BackupJobName(b), BackupDeadline, agentContainer(BackupContainerName, agentImage, backup.AgentCommand,
		plan.Args(), env, "128Mi", "256Mi"))
}

// BackupDeletionJobName is the name of the Job that removes a deleted backup's objects.
func BackupDeletionJobName(b *cachev1alpha1.CacheBackup) string { return b.Name + "-delete" }

// BackupDeletionJob is the Job that removes a deleted backup's objects from the bucket
// (backup.RunDelete), with the backup's own credentials, as BackupJob takes it. The operator
// retries one that fails; it runs once.
func BackupDeletionJob(b *cachev1alpha1.CacheBackup, place backup.Place, agentImage string) *batchv1.Job {
	return placeJob(b, BackupDeletionJobName(b), backup.DeleteCommand, place, agentImage)
}

// BackupImportJob is the Job that reads an imported backup's manifest (backup.RunInspect): its
// report is the backup's status. It takes the name of a backup's Job, which an imported backup
// has none of.
func BackupImportJob(b *cachev1alpha1.CacheBackup, place backup.Place, agentImage string) *batchv1.Job {
	return placeJob(b, BackupJobName(b), backup.InspectCommand, place, agentImage)
}

// placeJobDeadline bounds a Job that lists, reads or deletes a few objects.
const placeJobDeadline = 10 * 60

// placeJob is a Job that runs the agent of the command on a backup's place in the bucket.
func placeJob(b *cachev1alpha1.CacheBackup, name, command string, place backup.Place, agentImage string) *batchv1.Job {
	place.ResultFile = terminationMessagePath
	return agentJob(b, name, placeJobDeadline, agentContainer(BackupContainerName, agentImage, command,
		place.Args(), bucketCredentials(b), "32Mi", "64Mi"))
}

// agentJob is a Job of a backup that runs one agent container once, with no access to the API
// server, within the deadline (seconds). The Go runtime is told its share of the container's
// memory limit (GOMEMLIMIT, gcpacing.SoftLimit), so that it collects garbage harder near the
// limit rather than let the heap double past it.
func agentJob(b *cachev1alpha1.CacheBackup, name string, deadline int64, agent corev1.Container) *batchv1.Job {
	agent.Env = append(agent.Env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(gcpacing.SoftLimit(agent.Resources.Limits.Memory().Value()), 10)})
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace, Labels: BackupLabels(b)},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(deadline),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: BackupLabels(b)},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](agentUID),
						RunAsGroup:     ptr.To[int64](agentUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{agent},
				},
			},
		},
	}
}

// bucketCredentials are the variables an agent reads the backup's bucket credentials from,
// taken from the user's Secret.
func bucketCredentials(b *cachev1alpha1.CacheBackup) []corev1.EnvVar {
	secret := b.Spec.Storage.CredentialsSecret
	return []corev1.EnvVar{
		secretKey(backup.EnvAccessKeyID, secret, cachev1alpha1.SecretKeyAccessKeyID, false),
		secretKey(backup.EnvSecretAccessKey, secret, cachev1alpha1.SecretKeySecretAccessKey, false),
		secretKey(backup.EnvCABundle, secret, cachev1alpha1.SecretKeyCABundle, true),
	}
}

// agentContainer is a container of the operator's own image in one of its agent modes (command),
// with the memory given: the restricted security context, and its result or failure written to
// the termination message file, which the kubelet reports in the pod's status.
func agentContainer(name, image, command string, args []string, env []corev1.EnvVar, memoryRequest, memoryLimit string) corev1.Container {
	return corev1.Container{
		Name:    name,
		Image:   image,
		Command: []string{"/cache-operator", command},
		Args:    args,
		Env:     env,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse(memoryRequest)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memoryLimit)},
		},
		TerminationMessagePath:   terminationMessagePath,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          containerSecurityContext(),
	}
}

// secretKey is an environment variable that holds a key of a Secret.
func secretKey(name, secret, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key, Optional: ptr.To(optional),
	}}}
}
