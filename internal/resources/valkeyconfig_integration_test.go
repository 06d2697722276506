//go:build integration

package resources

import (
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

// Valkey takes the arguments the settings become, and says so in CONFIG GET.
func TestValkeyTakesTheSettingsArguments(t *testing.T) {
	ip := testenv.LoopbackIPs(12)[11]
	testenv.StartValkey(t, ip, Port, valkeyConfigArgs(someValkeyConfig())...)
	c := testenv.Valkey(t, ip, Port)
	for name, want := range map[string]string{"maxmemory-policy": "volatile-ttl", "timeout": "300", "notify-keyspace-events": "$xE"} {
		got, err := c.Do(t.Context(), c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		if got[name] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", name, got[name], want)
		}
	}
}
