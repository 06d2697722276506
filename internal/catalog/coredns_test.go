//go:build integration

package catalog_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/test/harness/testenv"
)

// The records are only worth what their consumer makes of them: a real CoreDNS, with its etcd
// plugin on the same etcd, must answer an SRV query for the Cache with its nodes.
func TestCoreDNSAnswersSRVQueriesFromTheRecords(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	client := etcd.Client(t)
	defer client.Close() //nolint:errcheck
	layout := catalog.Layout{Prefix: "/skydns", Zone: "caches.example.internal", TTL: 30}
	cat := &catalog.Etcd{Client: client, Layout: layout, Timeout: 5 * time.Second}
	cache := catalog.Key{Namespace: "default", Name: "orders-cache"}
	if _, err := cat.Sync(context.Background(), cache, catalog.StatefulSetNodes(cache, 3, "cluster.local", 6379), nil); err != nil {
		t.Fatal(err)
	}
	// A sibling whose name extends this one's must not show up in its answer.
	sibling := catalog.Key{Namespace: "default", Name: "orders-cache-eu"}
	if _, err := cat.Sync(context.Background(), sibling, catalog.StatefulSetNodes(sibling, 1, "cluster.local", 6379), nil); err != nil {
		t.Fatal(err)
	}

	server := startCoreDNS(t, layout, etcd.Endpoint)

	var answer []string
	query := new(dns.Msg)
	query.SetQuestion(dns.Fqdn(layout.Name(cache)), dns.TypeSRV)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			resp, _, err := (&dns.Client{Net: "tcp", Timeout: time.Second}).Exchange(query, server)
			if err != nil || resp.Rcode != dns.RcodeSuccess {
				return false, nil // CoreDNS is still starting
			}
			answer = answer[:0]
			for _, rr := range resp.Answer {
				if srv, ok := rr.(*dns.SRV); ok {
					answer = append(answer, fmt.Sprintf("%s:%d", srv.Target, srv.Port))
				}
			}
			return true, nil
		})
	if err != nil {
		t.Fatalf("CoreDNS at %s never answered the SRV query for %s", server, layout.Name(cache))
	}

	slices.Sort(answer)
	want := []string{
		"orders-cache-0.orders-cache.default.svc.cluster.local.:6379",
		"orders-cache-1.orders-cache.default.svc.cluster.local.:6379",
		"orders-cache-2.orders-cache.default.svc.cluster.local.:6379",
	}
	if !slices.Equal(answer, want) {
		t.Errorf("SRV answer = %v, want %v", answer, want)
	}
}

// startCoreDNS runs the toolchain's CoreDNS, serving zone from etcd, and returns its address.
func startCoreDNS(t *testing.T, layout catalog.Layout, etcdEndpoint string) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	corefile := filepath.Join(t.TempDir(), "Corefile")
	config := fmt.Sprintf("%s:%s {\n\tbind 127.0.0.1\n\tetcd {\n\t\tpath %s\n\t\tendpoint %s\n\t}\n}\n",
		layout.Zone, port, layout.Prefix, etcdEndpoint)
	if err := os.WriteFile(corefile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(testenv.BinDir(), "coredns"), "-conf", corefile)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting CoreDNS (run `make tools` first?): %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return addr
}
