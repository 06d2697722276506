package podrunner

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpandLikeTheKubelet(t *testing.T) {
	env := map[string]string{"POD_IP": "127.64.0.7", "PORT": "6379"}
	for in, want := range map[string]string{
		"--cluster-announce-ip=$(POD_IP)": "--cluster-announce-ip=127.64.0.7",
		"$(POD_IP):$(PORT)":               "127.64.0.7:6379",
		"$(UNDEFINED)":                    "$(UNDEFINED)",
		"$$(POD_IP)":                      "$(POD_IP)",
		"cost: 5$":                        "cost: 5$",
		"$(POD_IP":                        "$(POD_IP",
		"":                                "",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContainerEnvReadsThePodAndEarlierVariables(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-cache-1", Namespace: "default"},
		Status:     corev1.PodStatus{PodIP: "127.64.0.7"},
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "ANNOUNCE", Value: "$(POD_NAME) at $(POD_IP)"},
	}}
	env, err := containerEnv(pod, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"POD_IP": "127.64.0.7", "POD_NAME": "orders-cache-1", "ANNOUNCE": "orders-cache-1 at 127.64.0.7"}
	if !maps.Equal(env, want) {
		t.Errorf("env = %v, want %v", env, want)
	}

	c.Env = append(c.Env, corev1.EnvVar{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "p"}}})
	if _, err := containerEnv(pod, c, nil); err == nil {
		t.Error("an env var from a Secret was accepted; the runner cannot resolve it")
	}
}
