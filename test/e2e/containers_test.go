//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// crashServer kills the server of the named pod (its first container) with SIGKILL, as a crash
// or the kernel's OOM killer would: the kubelet then restarts the container in place.
func crashServer(namespace, name string) error {
	return signalServer(namespace, name, syscall.SIGKILL)
}

// signalServer sends sig to every process of the named pod's first container: SIGSTOP, say, for
// a server that hangs and ignores SIGTERM.
func signalServer(namespace, name string, sig syscall.Signal) error {
	id, err := serverContainerID(namespace, name)
	if err != nil {
		return err
	}
	return cluster.SignalContainer(id, sig)
}

// serverPID is the process ID of the named pod's first container's main process: a measurement
// reads its memory from /proc, as the kubelet's cAdvisor would.
func serverPID(namespace, name string) (int, error) {
	id, err := serverContainerID(namespace, name)
	if err != nil {
		return 0, err
	}
	pids, err := cluster.ContainerProcesses(id)
	if err != nil {
		return 0, err
	}
	return pids[0], nil
}

// serverContainerID is the ID of the named pod's first container, as the pod's status gives it
// while the container runs.
func serverContainerID(namespace, name string) (string, error) {
	pod := &corev1.Pod{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return "", err
	}
	first := pod.Spec.Containers[0].Name
	for _, status := range pod.Status.ContainerStatuses {
		if status.Name == first && status.State.Running != nil {
			return status.ContainerID, nil
		}
	}
	return "", fmt.Errorf("container %s of pod %s/%s is not running", first, namespace, name)
}

// serverStatus is the status of the pod's Valkey container, its first, or nil: the kubelet lists
// the containers' statuses by name, not in the pod's order.
func serverStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if s := &pod.Status.ContainerStatuses[i]; s.Name == pod.Spec.Containers[0].Name {
			return s
		}
	}
	return nil
}
