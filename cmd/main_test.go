package main

import (
	"slices"
	"testing"
)

func TestNamespaceListIsTheNamespacesEachOnceAndRefusesWhatIsNoName(t *testing.T) {
	for flagValue, want := range map[string][]string{
		"":                     nil,
		"orders":               {"orders"},
		" orders , payments,":  {"orders", "payments"},
		"orders,orders,,carts": {"orders", "carts"},
	} {
		got, err := namespaceList(flagValue)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("namespaceList(%q) = %q, %v; want %q", flagValue, got, err, want)
		}
	}
	for _, bad := range []string{"Orders", "orders/x", "orders,-payments"} {
		if got, err := namespaceList(bad); err == nil {
			t.Errorf("namespaceList(%q) = %q, want an error", bad, got)
		}
	}
}

// The runtime's memory limit is three quarters of the container's, which the installs pass,
// unless GOMEMLIMIT is set; with no limit passed, or one that is no number, there is none.
func TestTheSoftMemoryLimitIsAShareOfTheContainersUnlessGOMEMLIMITIsSet(t *testing.T) {
	for _, tc := range []struct {
		env    map[string]string
		want   int64
		wantOK bool
	}{
		{map[string]string{envMemoryLimit: "268435456"}, 192 << 20, true},
		{map[string]string{envMemoryLimit: "268435456", "GOMEMLIMIT": "100MiB"}, 0, false},
		{map[string]string{}, 0, false},
		{map[string]string{envMemoryLimit: "256Mi"}, 0, false},
		{map[string]string{envMemoryLimit: "0"}, 0, false},
	} {
		got, ok := softMemoryLimit(func(name string) (string, bool) { v, set := tc.env[name]; return v, set })
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("environment %v: soft limit %d, %t; want %d, %t", tc.env, got, ok, tc.want, tc.wantOK)
		}
	}
}
