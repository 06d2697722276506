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
// downward API, and keys of Secrets and ConfigMaps (from sources, as sourcesOf read them). A
// Secret, a ConfigMap or a key that is missing, and not optional, is a configError. Values from
// resources are not supported.
func containerEnv(pod *corev1.Pod, c *corev1.Container, sources envSources) (map[string]string, error) {
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
		case e.ValueFrom.SecretKeyRef != nil, e.ValueFrom.ConfigMapKeyRef != nil:
			kind, name, key, optional := keyRef(e.ValueFrom)
			data, found := sources[kind+"/"+name]
			value, ok := data[key]
			switch {
			case ok:
				env[e.Name] = value
			case optional:
			case !found:
				return nil, configError(fmt.Sprintf("%s %q not found", strings.ToLower(kind), name))
			default:
				return nil, configError(fmt.Sprintf("couldn't find key %s in %s %s/%s", key, kind, pod.Namespace, name))
			}
		default:
			return nil, fmt.Errorf("env %s: the runner supports literal values, pod fields and keys of Secrets and ConfigMaps only", e.Name)
		}
	}
	return env, nil
}

// keyRef is what a variable from a Secret's or a ConfigMap's key names.
func keyRef(from *corev1.EnvVarSource) (kind, name, key string, optional bool) {
	if ref := from.SecretKeyRef; ref != nil {
		return "Secret", ref.Name, ref.Key, ref.Optional != nil && *ref.Optional
	}
	ref := from.ConfigMapKeyRef
	return "ConfigMap", ref.Name, ref.Key, ref.Optional != nil && *ref.Optional
}

// configError is why a container's configuration cannot be made from what the cluster holds, in
// the kubelet's words: the container waits with the reason CreateContainerConfigError.
type configError string

func (e configError) Error() string { return string(e) }

// envSources are the data of the Secrets and ConfigMaps a pod's variables come from, by
// "Kind/name"; one that could not be read is absent.
type envSources map[string]map[string]string

// sourcesOf reads the Secrets and ConfigMaps that the pod's containers take variables from, and
// the Secrets of its Secret volumes, as the kubelet does when it starts the pod.
func (r *Runner) sourcesOf(ctx context.Context, pod *corev1.Pod) envSources {
	sources := envSources{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			if data, err := r.read(ctx, pod.Namespace, "Secret", v.Secret.SecretName); err == nil {
				sources["Secret/"+v.Secret.SecretName] = data
			}
		}
	}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil && e.ValueFrom.ConfigMapKeyRef == nil {
				continue
			}
			kind, name, _, _ := keyRef(e.ValueFrom)
			if _, read := sources[kind+"/"+name]; read {
				continue
			}
			if data, err := r.read(ctx, pod.Namespace, kind, name); err == nil {
				sources[kind+"/"+name] = data
			}
		}
	}
	return sources
}

// read reads the data of a Secret or a ConfigMap.
func (r *Runner) read(ctx context.Context, namespace, kind, name string) (map[string]string, error) {
	if kind == "ConfigMap" {
		cm, err := r.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return cm.Data, nil
	}
	secret, err := r.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	data := map[string]string{}
	for k, v := range secret.Data {
		data[k] = string(v)
	}
	return data, nil
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
