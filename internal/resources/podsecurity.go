package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// podSecurityContext meets the restricted Pod Security Standard.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](valkeyUID),
		RunAsGroup:     ptr.To[int64](valkeyUID),
		FSGroup:        ptr.To[int64](valkeyUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurityContext is a container's part of the restricted Pod Security Standard, with a
// read-only root filesystem: what a container writes goes to a volume.
func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}
