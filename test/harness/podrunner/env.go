package podrunner

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerEnv is the container's environment as the kubelet makes it: literal values, values
// that refer to variables defined before them, the pod fields a container may read through the
// downward API, and keys of Secrets (from secrets, the pod's Secrets by name, as secretsOf read
// them). A Secret or a key that is missing, and not optional, is a configError. Values from
// ConfigMaps and resources are not supported.
func containerEnv(pod *corev1.Pod, c *corev1.Container, secrets map[string]*corev1.Secret) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			value, err := podField(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			env[e.Name] = value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			optional := ref.Optional != nil && *ref.Optional
			secret := secrets[ref.Name]
			value, ok := []byte(nil), false
			if secret != nil {
				value, ok = secret.Data[ref.Key]
			}
			switch {
			case ok:
				env[e.Name] = string(value)
			case optional:
			case secret == nil:
				return nil, configError(fmt.Sprintf("secret %q not found", ref.Name))
			default:
				return nil, configError(fmt.Sprintf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name))
			}
		default:
			return nil, fmt.Errorf("env %s: the runner supports literal values and pod fields only", e.Name)
		}
	}
	return env, nil
}

// configError is why a container's configuration cannot be made from what the cluster holds, in
// the kubelet's words: the container waits with the reason CreateContainerConfigError.
type configError string

func (e configError) Error() string { return string(e) }

// secretsOf reads the Secrets that the pod's containers take variables from; one that cannot be
// read is left out, and the variables that need it make a configError.
func (r *Runner) secretsOf(ctx context.Context, pod *corev1.Pod) map[string]*corev1.Secret {
	secrets := map[string]*corev1.Secret{}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			name := e.ValueFrom.SecretKeyRef.Name
			if _, read := secrets[name]; read {
				continue
			}
			secret, err := r.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				secret = nil
			}
			secrets[name] = secret
		}
	}
	return secrets
}

func podField(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	}
	return "", fmt.Errorf("pod field %s is not supported by the runner", path)
}

func expandAll(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, env)
	}
	return out
}

// expand replaces each $(NAME) in s by the variable's value, as the kubelet does in a
// container's command, arguments and environment: a reference to an undefined variable stays as
// written, and $$ is a literal $.
func expand(s string, env map[string]string) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			out.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			out.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				out.WriteString(s[i:])
				return out.String()
			}
			name := s[i+2 : i+2+end]
			if value, ok := env[name]; ok {
				out.WriteString(value)
			} else {
				out.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			out.WriteByte('$')
		}
	}
	return out.String()
}
