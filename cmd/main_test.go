package main

import (
	"flag"
	"slices"
	"strings"
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

// The command line, completed: the defaults hold together, the webhook's DNS name follows its
// namespace, the catalogue's endpoints are a list and its zone loses its dots; what no flag's
// type can check is refused with the flag's name.
func TestTheCommandLineIsCompletedAndWhatCannotWorkIsRefused(t *testing.T) {
	parse := func(args ...string) (*options, []string, error) {
		var o options
		fs := flag.NewFlagSet("cache-operator", flag.ContinueOnError)
		o.bindFlags(fs)
		if err := fs.Parse(append([]string{"--webhook-cert-namespace", "ops"}, args...)); err != nil {
			t.Fatal(err)
		}
		watched, err := o.complete()
		return &o, watched, err
	}
	o, watched, err := parse("--catalog-endpoints", "http://a:2379, http://b:2379", "--catalog-zone", ".caches.example.", "--watch-namespaces", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if o.webhookCert.DNSName != "cache-operator-webhook.ops.svc" || o.layout.Zone != "caches.example" ||
		!slices.Equal(o.etcd.Endpoints, []string{"http://a:2379", "http://b:2379"}) || !slices.Equal(watched, []string{"orders"}) {
		t.Errorf("completed: DNS name %q, zone %q, endpoints %q, watched %q", o.webhookCert.DNSName, o.layout.Zone, o.etcd.Endpoints, watched)
	}
	for _, bad := range [][]string{
		{"--webhook-cert-renew-before", "8760h"},
		{"--rollout-progress-deadline", "0s"},
		{"--catalog-endpoints", "http://a:2379", "--catalog-zone", "."},
		{"--watch-namespaces", "Orders"},
	} {
		if _, _, err := parse(bad...); err == nil || !strings.Contains(err.Error(), bad[len(bad)-2]) {
			t.Errorf("%q: %v, want an error that names the flag", bad, err)
		}
	}
}
