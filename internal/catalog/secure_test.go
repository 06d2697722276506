//go:build integration

package catalog_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/test/harness/testenv"
)

// A catalogue as production runs it: etcd over TLS that requires a client certificate from its
// CA, with authentication on, and the operator's user in a role that covers only the
// catalogue's prefix. The operator's client, configured from files as cmd/main.go does, registers
// and deregisters a Cache; it cannot write outside its prefix; and a client without the
// certificate, or with a wrong password, gets nothing.
func TestTheCatalogueWorksOverTLSWithAUserLimitedToItsPrefix(t *testing.T) {
	layout := catalog.Layout{Prefix: "/skydns", Zone: "caches.example.internal", TTL: 30}
	etcd := testenv.StartSecureEtcd(t, "cache-operator", layout.Prefix+"/")
	cfg := catalog.EtcdConfig{Endpoints: []string{etcd.Endpoint}, DialTimeout: 5 * time.Second,
		CAFile: etcd.CAFile, CertFile: etcd.CertFile, KeyFile: etcd.KeyFile, UsernameFile: etcd.UsernameFile, PasswordFile: etcd.PasswordFile}
	client, err := cfg.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close() //nolint:errcheck
	cat := &catalog.Etcd{Client: client, Layout: layout, Timeout: 5 * time.Second}
	ctx := context.Background()
	cache := catalog.Key{Namespace: "shop", Name: "orders"}
	if _, err := cat.Sync(ctx, cache, catalog.StatefulSetNodes(cache, 3, "cluster.local", 6379), nil); err != nil {
		t.Fatalf("registering over TLS as the catalogue's user: %v", err)
	}
	admin := etcd.Client(t)
	defer admin.Close() //nolint:errcheck
	if records := testenv.KeyValues(t, admin, layout.Prefix+"/"); len(records) != 3 {
		t.Errorf("the catalogue holds %d records, want the Cache's 3: %v", len(records), records)
	}

	// The role covers the catalogue's prefix and nothing else.
	outside, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := client.Put(outside, "/registry/secret", "x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a write outside the catalogue's prefix: %v; want permission denied", err)
	}

	if err := cat.Deregister(ctx, cache); err != nil {
		t.Fatalf("deregistering: %v", err)
	}
	if records := testenv.KeyValues(t, admin, layout.Prefix+"/"); len(records) != 0 {
		t.Errorf("after deregistering the catalogue holds %v", records)
	}

	for _, refused := range []struct {
		name, why string
		edit      func(*catalog.EtcdConfig)
	}{
		// The client says only that its deadline passed; the server's reason, "certificate
		// required", is in the client's log.
		{"no client certificate", "deadline exceeded", func(c *catalog.EtcdConfig) { c.CertFile, c.KeyFile = "", "" }},
		{"a wrong password", "authentication failed", func(c *catalog.EtcdConfig) { c.PasswordFile = etcd.UsernameFile }},
	} {
		bad := cfg
		refused.edit(&bad)
		c, err := bad.NewClient()
		if err == nil {
			badCat := &catalog.Etcd{Client: c, Layout: layout, Timeout: 3 * time.Second}
			_, err = badCat.Sync(ctx, cache, catalog.StatefulSetNodes(cache, 1, "cluster.local", 6379), nil)
			_ = c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), refused.why) {
			t.Errorf("%s: %v; want refused: %s", refused.name, err, refused.why)
		}
	}
	if records := testenv.KeyValues(t, admin, layout.Prefix+"/"); len(records) != 0 {
		t.Errorf("the refused clients left %v", records)
	}
}
