package podrunner

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// containerEnv is the container's environment as the kubelet makes it: literal values, values
// that refer to variables defined before them, and the pod fields a container may read through
// the downward API. Values from ConfigMaps, Secrets and resources are not supported.
func containerEnv(pod *corev1.Pod, c *corev1.Container) (map[string]string, error) {
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
		default:
			return nil, fmt.Errorf("env %s: the runner supports literal values and pod fields only", e.Name)
		}
	}
	return env, nil
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
