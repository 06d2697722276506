package resources

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
)

// RestoreContainerName is the name of the init container that fetches a node's data from a
// backup.
const RestoreContainerName = "restore"

// restorePlanKey is the key of the restore ConfigMap that holds the backup.RestorePlan.
const restorePlanKey = "plan"

// RestoreConfigMapName names the ConfigMap that holds a Cache's restore plan while its restore
// lasts.
func RestoreConfigMapName(cache *cachev2.Cache) string { return cache.Name + "-restore" }

// RestoreConfigMap holds a Cache's restore plan while its restore lasts: the init step of each
// node reads it when the pod starts, and the operator deletes it once every node holds its data,
// so that a pod made after that starts empty, as a new node always does.
func RestoreConfigMap(cache *cachev2.Cache, plan backup.RestorePlan) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RestoreConfigMapName(cache), Namespace: cache.Namespace, Labels: Labels(cache)},
		Data:       map[string]string{restorePlanKey: plan.Encode()},
	}
}

// RestoreInitContainer is a restored Cache's init step: the operator's own image (agentImage),
// in its restore mode (backup.RunRestore), fetches the shard of the backup that the pod's ordinal
// names into the data directory before the server starts. It reads the plan from the restore
// ConfigMap and the bucket's credentials from the backup's Secret (secret), all optional: once the
// restore is over, and the ConfigMap gone, it does nothing, and a pod made then needs neither.
func RestoreInitContainer(cache *cachev2.Cache, agentImage, secret string) corev1.Container {
	c := agentContainer(RestoreContainerName, agentImage, backup.RestoreCommand,
		[]string{"--dir=.", "--pod=$(POD_NAME)", "--result-file=" + terminationMessagePath},
		[]corev1.EnvVar{
			podField("POD_NAME", "metadata.name"),
			{Name: backup.EnvRestorePlan, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: RestoreConfigMapName(cache)}, Key: restorePlanKey, Optional: ptr.To(true)}}},
			secretKey(backup.EnvAccessKeyID, secret, cachev1alpha1.SecretKeyAccessKeyID, true),
			secretKey(backup.EnvSecretAccessKey, secret, cachev1alpha1.SecretKeySecretAccessKey, true),
			secretKey(backup.EnvCABundle, secret, cachev1alpha1.SecretKeyCABundle, true),
		},
		// The download streams to the data directory: memory stays flat whatever its size.
		"64Mi", "128Mi")
	c.WorkingDir = dataPath
	c.VolumeMounts = []corev1.VolumeMount{{Name: dataVolume, MountPath: dataPath}}
	return c
}
