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
