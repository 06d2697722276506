package catalog

import (
	"reflect"
	"testing"
)

var layout = Layout{Prefix: "/skydns", Zone: "caches.example.internal", TTL: 30}

func TestLayoutFollowsSkyDNS(t *testing.T) {
	cache := Key{Namespace: "default", Name: "orders-cache"}

	if got := layout.Name(cache); got != "orders-cache.default.caches.example.internal" {
		t.Errorf("Name = %q", got)
	}
	if got := layout.Dir(cache); got != "/skydns/internal/example/caches/default/orders-cache/" {
		t.Errorf("Dir = %q", got)
	}
	if got := (Layout{Prefix: "/skydns/", Zone: "z"}).Dir(cache); got != "/skydns/z/default/orders-cache/" {
		t.Errorf("Dir with a trailing slash in the prefix = %q", got)
	}

	nodes := StatefulSetNodes(cache, 2, "cluster.local", 6379)
	want := map[string]string{
		"/skydns/internal/example/caches/default/orders-cache/node-0": `{"host":"orders-cache-0.orders-cache.default.svc.cluster.local","port":6379,"ttl":30}`,
		"/skydns/internal/example/caches/default/orders-cache/node-1": `{"host":"orders-cache-1.orders-cache.default.svc.cluster.local","port":6379,"ttl":30}`,
	}
	if got := layout.Records(cache, nodes); !reflect.DeepEqual(got, want) {
		t.Errorf("Records =\n%v\nwant\n%v", got, want)
	}
}

func TestDirNeverCoversASiblingCache(t *testing.T) {
	short := layout.Dir(Key{Namespace: "default", Name: "orders"})
	long := layout.Dir(Key{Namespace: "default", Name: "orders-eu"})
	if len(long) >= len(short) && long[:len(short)] == short {
		t.Errorf("the records of orders (%s) would include those of orders-eu (%s)", short, long)
	}
}

// A record's key names its Cache; a key of the zone that is no Cache's record names none.
func TestCacheOfReadsARecordsKeyBack(t *testing.T) {
	cache := Key{Namespace: "default", Name: "orders-cache"}
	for key := range layout.Records(cache, StatefulSetNodes(cache, 2, "cluster.local", 6379)) {
		if got, ok := layout.CacheOf(key); !ok || got != cache {
			t.Errorf("CacheOf(%q) = %v, %v; want %v", key, got, ok, cache)
		}
	}
	for _, key := range []string{"/skydns/internal/example/caches/default/orders-cache", "/skydns/internal/example/other/default/orders/node-0",
		"/skydns/internal/example/caches/default//node-0", "/skydns/internal/example/caches/a/b/c/node-0"} {
		if got, ok := layout.CacheOf(key); ok {
			t.Errorf("CacheOf(%q) = %v; want none", key, got)
		}
	}
}
