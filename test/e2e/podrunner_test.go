//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/testenv"
)

// These tests hold the pod runner to what the kubelet does with the parts of a pod that the
// backup, restore and exporter features build on: init containers, more than one container, and
// the pods of Jobs. They use the Valkey image's own programs, as the operator's pods do.

// runnerPodMeta names a pod (or a pod template) that the local cluster leaves to the pod runner.
func runnerPodMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{resources.LabelName: resources.AppName}}
}

// shell is a container of the Valkey image that runs script with the image's shell, in the data
// volume.
func shell(name, script string) corev1.Container {
	return corev1.Container{Name: name, Image: resources.DefaultImageRepository + ":8.1.1", Command: []string{"sh", "-c", script}}
}

// serverOn is a container of the Valkey image whose server listens on port, ready once it answers.
func serverOn(name string, port int32) corev1.Container {
	return corev1.Container{
		Name: name, Image: resources.DefaultImageRepository + ":8.1.1",
		Command: []string{"valkey-server", "--port", fmt.Sprint(port), "--save", ""},
		Ports:   []corev1.ContainerPort{{ContainerPort: port}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
			Exec: &corev1.ExecAction{Command: []string{"valkey-cli", "-p", fmt.Sprint(port), "ping"}}}},
	}
}

// Init containers run one after the other, each to completion, in the pod's data volume, before
// the pod's containers start; one that fails is restarted in place. The pod's containers then
// run side by side, and the pod is Ready only when each is.
func TestInitContainersRunInOrderBeforeThePodsContainers(t *testing.T) {
	runBeside(t, 1)
	ns := newNamespace(t)
	pod := &corev1.Pod{ObjectMeta: runnerPodMeta(ns, "restore"), Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			// Fails on its first run, as a download that breaks off would.
			shell("fetch", `[ -f fetched ] && echo second >>order || { touch fetched; echo first >>order; exit 1; }`),
			shell("check", `test -f fetched && echo check >>order`),
		},
		Containers: []corev1.Container{
			serverOn("server", resources.Port),
			serverOn("sidecar", resources.Port+1),
		},
	}}
	// A pod made directly, not by a controller that retries, needs its namespace's default
	// service account, which the API server refuses the pod without.
	testenv.WaitFor(t, time.Minute, "the namespace's default service account", func() (bool, string) {
		err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, fmt.Sprint(err)
	})
	if err := admin.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the pod Ready with both containers", func() (bool, string) {
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		return podReady(pod), fmt.Sprintf("%s %+v", pod.Status.Phase, pod.Status.Conditions)
	})

	inits := pod.Status.InitContainerStatuses
	if len(inits) != 2 || inits[0].RestartCount != 1 || inits[1].RestartCount != 0 {
		t.Fatalf("init container statuses %+v; want fetch restarted once, check not at all", inits)
	}
	for _, s := range inits {
		if done := s.State.Terminated; done == nil || done.ExitCode != 0 {
			t.Errorf("init container %s is %+v, want completed", s.Name, s.State)
		}
	}
	if last := inits[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 1 {
		t.Errorf("fetch's last run %+v, want exit code 1", last)
	}
	if len(pod.Status.ContainerStatuses) != 2 {
		t.Fatalf("container statuses %+v, want the server's and the sidecar's", pod.Status.ContainerStatuses)
	}
	for _, s := range pod.Status.ContainerStatuses {
		if !s.Ready || s.State.Running == nil {
			t.Errorf("container %s is %+v, ready %v; want running and ready", s.Name, s.State, s.Ready)
		}
	}
	// The server reads the volume the init containers wrote: it runs in it.
	server := testenv.Valkey(t, pod.Status.PodIP, resources.Port)
	dir, err := server.Do(context.Background(), server.B().ConfigGet().Parameter("dir").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	order, err := os.ReadFile(filepath.Join(dir["dir"], "order"))
	if err != nil || string(order) != "first\nsecond\ncheck\n" {
		t.Errorf("the init containers wrote %q (%v) into the pod's volume; want first, second, check", order, err)
	}

	// A container that crashes makes the pod not ready, and restarts alone.
	if err := runner.Crash(ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the server restarted in place, the sidecar not", func() (bool, string) {
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		cs := pod.Status.ContainerStatuses
		return len(cs) == 2 && cs[0].RestartCount == 1 && cs[1].RestartCount == 0 && podReady(pod),
			fmt.Sprintf("%+v", cs)
	})
}

// A Job's pod runs to the end: under restartPolicy OnFailure a failed container restarts in the
// same pod, with its volume, and the Job completes; under Never a failure fails the pod, with
// its exit code, and the Job.
func TestJobsPodsRunToTheirEnd(t *testing.T) {
	runBeside(t, 1)
	ns := newNamespace(t)
	job := func(name string, policy corev1.RestartPolicy, script string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{ObjectMeta: runnerPodMeta("", ""), Spec: corev1.PodSpec{
				RestartPolicy: policy,
				Containers:    []corev1.Container{shell("backup", script)},
			}},
		}}
		if err := admin.Create(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	retried := job("retried", corev1.RestartPolicyOnFailure, `[ -f tried ] || { touch tried; exit 1; }`)
	failed := job("failed", corev1.RestartPolicyNever, `exit 3`)

	for _, tc := range []struct {
		job       *batchv1.Job
		condition batchv1.JobConditionType
		phase     corev1.PodPhase
		restarts  int32
		exitCode  int32
	}{
		{retried, batchv1.JobComplete, corev1.PodSucceeded, 1, 0},
		{failed, batchv1.JobFailed, corev1.PodFailed, 0, 3},
	} {
		testenv.WaitFor(t, time.Minute, fmt.Sprintf("Job %s %s", tc.job.Name, tc.condition), func() (bool, string) {
			if err := admin.Get(context.Background(), client.ObjectKeyFromObject(tc.job), tc.job); err != nil {
				return false, err.Error()
			}
			for _, c := range tc.job.Status.Conditions {
				if c.Type == tc.condition && c.Status == corev1.ConditionTrue {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", tc.job.Status)
		})
		var pods corev1.PodList
		if err := admin.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"job-name": tc.job.Name}); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Fatalf("Job %s made %d pods, want 1", tc.job.Name, len(pods.Items))
		}
		pod := pods.Items[0]
		cs := pod.Status.ContainerStatuses
		if pod.Status.Phase != tc.phase || len(cs) != 1 || cs[0].RestartCount != tc.restarts ||
			cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != tc.exitCode {
			t.Errorf("Job %s's pod is %s with %+v; want %s, %d restarts, exit code %d", tc.job.Name,
				pod.Status.Phase, cs, tc.phase, tc.restarts, tc.exitCode)
		}
	}
}
