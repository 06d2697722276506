package resources

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	cachev2 "example.com/cache-operator/api/v2"
)

// This file is the Valkey settings a user chooses (spec.config), as the server's arguments. They
// are part of what a pod template takes from the spec (specInputs), so a change of them rolls
// out like a change of version.

// configFlags are the server's flags that carry the user's settings.
var configFlags = []string{"--maxmemory-policy", "--timeout", "--notify-keyspace-events"}

// valkeyConfigArgs are the server's arguments for the user's settings: the eviction policy always
// (EvictionPolicy unless chosen), the others only when set, so that a Cache without settings
// starts its servers with the arguments it had before there were settings, and an operator
// upgrade restarts none of them.
func valkeyConfigArgs(config *cachev2.ValkeyConfig) []string {
	policy := EvictionPolicy
	if config != nil && config.MaxmemoryPolicy != "" {
		policy = config.MaxmemoryPolicy
	}
	args := []string{"--maxmemory-policy", policy}
	if config == nil {
		return args
	}
	if config.Timeout != nil {
		args = append(args, "--timeout", strconv.Itoa(int(*config.Timeout)))
	}
	if config.NotifyKeyspaceEvents != "" {
		args = append(args, "--notify-keyspace-events", config.NotifyKeyspaceEvents)
	}
	return args
}

// configInputs names the user's settings that the container's arguments carry, for specInputs.
func configInputs(c *corev1.Container) string {
	var inputs []string
	for i, arg := range c.Args {
		if slices.Contains(configFlags, arg) && i+1 < len(c.Args) {
			inputs = append(inputs, arg+"="+c.Args[i+1])
		}
	}
	return strings.Join(inputs, " ")
}
