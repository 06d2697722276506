package resources

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
)

func someValkeyConfig() *cachev2.ValkeyConfig {
	return &cachev2.ValkeyConfig{MaxmemoryPolicy: "volatile-ttl", Timeout: ptr.To[int32](300), NotifyKeyspaceEvents: "Ex$"}
}

// The server starts with the settings the user chose; without any (or with config: {}) it starts
// with the arguments it had before there were settings, the eviction policy a cache's.
func TestTheServerStartsWithTheValkeySettingsChosen(t *testing.T) {
	args := func(config *cachev2.ValkeyConfig) []string {
		c := testCache()
		c.Spec.Config = config
		return StatefulSet(c, DefaultImages).Spec.Template.Spec.Containers[0].Args
	}
	plain := args(nil)
	if !slices.Equal(args(&cachev2.ValkeyConfig{}), plain) {
		t.Errorf("config: {} gives the server other arguments than no config: %q, %q", args(&cachev2.ValkeyConfig{}), plain)
	}
	for _, flag := range []string{"--timeout", "--notify-keyspace-events"} {
		if slices.Contains(plain, flag) {
			t.Errorf("without settings the server is given %s: %q", flag, plain)
		}
	}
	for flag, want := range map[string]string{"--maxmemory-policy": EvictionPolicy} {
		if i := slices.Index(plain, flag); i < 0 || plain[i+1] != want {
			t.Errorf("without settings: %q, want %s %s", plain, flag, want)
		}
	}
	chosen := args(someValkeyConfig())
	for flag, want := range map[string]string{"--maxmemory-policy": "volatile-ttl", "--timeout": "300", "--notify-keyspace-events": "Ex$"} {
		if i := slices.Index(chosen, flag); i < 0 || chosen[i+1] != want {
			t.Errorf("with settings: %q, want %s %s", chosen, flag, want)
		}
	}
}

// A change of the settings is a change of the spec: a Cluster with replicas rolls it out, a
// Standalone Cache waits for consent, as its restart empties the nodes.
func TestAChangeOfValkeySettingsIsAChangeOfTheSpec(t *testing.T) {
	withConfig := func(c *cachev2.Cache, config *cachev2.ValkeyConfig) *cachev2.Cache {
		c.Spec.Config = config
		return c
	}
	other := someValkeyConfig()
	other.MaxmemoryPolicy = "allkeys-lfu"
	for name, pair := range map[string][2]*cachev2.ValkeyConfig{
		"settings added":     {nil, someValkeyConfig()},
		"settings removed":   {someValkeyConfig(), nil},
		"the policy changed": {someValkeyConfig(), other},
	} {
		was := StatefulSet(withConfig(settingsCache(nil), pair[0]), DefaultImages)
		now := StatefulSet(withConfig(settingsCache(nil), pair[1]), DefaultImages)
		if specInputs(&was.Spec.Template) == specInputs(&now.Spec.Template) {
			t.Errorf("%s: the spec inputs did not change", name)
		}
		if hold := holdOf(withConfig(settingsCache(nil), pair[1]), stored(was), now, ""); hold != TemplateCurrent {
			t.Errorf("%s: the template is held (%v), want it rolled out", name, hold)
		}
	}
	standalone := withConfig(testCache(), someValkeyConfig())
	if hold := holdOf(standalone, serverDefaulted(StatefulSet(testCache(), DefaultImages)), StatefulSet(standalone, DefaultImages), ""); hold != TemplateHeldForConsent {
		t.Errorf("settings added to a Standalone Cache: hold %v, want it to wait for consent", hold)
	}
}
