package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/internal/resources"
)

// A pod whose container waits on an image the node cannot pull, or on a configuration it cannot
// make, is named with what its kubelet says; a container that only starts, or crashes and is
// restarted, is none of that.
func TestPodsStuckNamesThePodsWhoseContainersCannotStart(t *testing.T) {
	waiting := func(name, container, reason, message string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: container, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}},
		}}}
	}
	if why := podsStuck([]corev1.Pod{waiting("orders-0", "valkey", "ContainerCreating", ""), waiting("orders-1", "valkey", "CrashLoopBackOff", "back-off")}); why != "" {
		t.Errorf("pods starting or restarting: %q, want nothing", why)
	}
	pull := `Back-off pulling image "docker.io/valkey/valkey:9.99.0"`
	why := podsStuck([]corev1.Pod{waiting("orders-1", "valkey", "ImagePullBackOff", pull), waiting("orders-0", "valkey", "ContainerCreating", "")})
	if !strings.HasPrefix(why, "1 pods cannot start: pod orders-1, container valkey: ImagePullBackOff: "+pull) || !strings.Contains(why, "spec.version") {
		t.Errorf("a pod that cannot pull its image: %q", why)
	}
	for _, container := range []string{resources.ReadinessContainerName, resources.RestoreContainerName} {
		agent := waiting("orders-1", container, "ErrImagePull", `pulling image "example.com/cache-operator:v0.1.0"`)
		if container == resources.RestoreContainerName {
			agent.Status.InitContainerStatuses, agent.Status.ContainerStatuses = agent.Status.ContainerStatuses, nil
		}
		if why := podsStuck([]corev1.Pod{agent}); !strings.Contains(why, "--agent-image") || strings.Contains(why, "spec.version") {
			t.Errorf("a pod whose %s container cannot pull the operator's image: %q", container, why)
		}
	}
	init := waiting("orders-2", "", "", "")
	init.Status.ContainerStatuses = nil
	init.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "restore", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "CreateContainerConfigError", Message: `secret "bucket" not found`}}}}
	if why := podsStuck([]corev1.Pod{init}); !strings.Contains(why, "orders-2, container restore: CreateContainerConfigError") || strings.Contains(why, "spec.version") {
		t.Errorf("an init container without its Secret: %q", why)
	}
}
