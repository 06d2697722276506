// Package catalog keeps each Cache's record in the external service catalogue, which lets
// clients outside Kubernetes discover a Cache's nodes. The catalogue is etcd, in the record
// layout that CoreDNS's etcd plugin serves (the SkyDNS layout external-dns also writes), so an
// SRV query for <cache>.<namespace>.<zone> answers with the cache's nodes and their port.
package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Catalog stores and removes the records of Caches. Both operations are idempotent, so the
// reconciler can repeat them after a crash at any point.
type Catalog interface {
	// Sync makes the records stored for cache exactly nodes: it adds missing ones, rewrites
	// changed ones and removes stale ones, and writes nothing when they already match. It
	// reports whether it wrote. When there is something to write, it first calls mayWrite, if
	// given, and writes nothing if that fails: the caller's last check that the records are
	// still wanted, made only on the rare pass that changes them.
	Sync(ctx context.Context, cache Key, nodes []Node, mayWrite func(context.Context) error) (changed bool, err error)
	// Deregister removes every record of cache. A cache with no records is success.
	Deregister(ctx context.Context, cache Key) error
	// Listed is every Cache that has records, once each.
	Listed(ctx context.Context) ([]Key, error)
}

// Key names a Cache.
type Key struct {
	Namespace, Name string
}

// Node is one cache node as the catalogue lists it.
type Node struct {
	// ID tells the node's record apart from its siblings'; it is a DNS label.
	ID string
	// Host is the node's DNS name.
	Host string
	// Port is the node's client port.
	Port int
}

// Layout maps Caches to keys and values in the SkyDNS layout.
type Layout struct {
	// Prefix is the root of every key, /skydns by default (CoreDNS's etcd plugin `path`).
	Prefix string
	// Zone is the DNS zone the records are served in, such as caches.example.internal.
	Zone string
	// TTL is the time to live, in seconds, that DNS answers carry.
	TTL int
}

// Name is the DNS name under which a Cache's nodes are listed: <name>.<namespace>.<zone>.
func (l Layout) Name(cache Key) string {
	return cache.Name + "." + cache.Namespace + "." + l.Zone
}

// Dir is the key prefix that holds all of a Cache's records, with a trailing slash so that it
// never matches a sibling Cache whose name extends this one's ("orders" and "orders-eu").
func (l Layout) Dir(cache Key) string {
	return l.ZoneDir() + cache.Namespace + "/" + cache.Name + "/"
}

// ZoneDir is the key prefix of the zone, under which every Cache's records are, as
// <namespace>/<name>/<node>.
func (l Layout) ZoneDir() string {
	labels := strings.Split(l.Zone, ".")
	slices.Reverse(labels)
	return strings.TrimSuffix(l.Prefix, "/") + "/" + strings.Join(labels, "/") + "/"
}

// CacheOf is the Cache whose record a key is, and false for a key of no Cache's record.
func (l Layout) CacheOf(key string) (Key, bool) {
	rest, ok := strings.CutPrefix(key, l.ZoneDir())
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || slices.Contains(parts, "") {
		return Key{}, false
	}
	return Key{Namespace: parts[0], Name: parts[1]}, true
}

// record is the value CoreDNS's etcd plugin reads (msg.Service in its sources).
type record struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	TTL  int    `json:"ttl"`
}

// Records are the keys and values that list nodes for a Cache.
func (l Layout) Records(cache Key, nodes []Node) map[string]string {
	dir := l.Dir(cache)
	out := make(map[string]string, len(nodes))
	for _, n := range nodes {
		v, _ := json.Marshal(record{Host: n.Host, Port: n.Port, TTL: l.TTL}) // cannot fail
		out[dir+n.ID] = string(v)
	}
	return out
}

// StatefulSetNodes lists the nodes of a Cache run by a StatefulSet with a governing headless
// Service of the same name: <name>-<ordinal>.<name>.<namespace>.svc.<clusterDomain>.
func StatefulSetNodes(cache Key, replicas int32, clusterDomain string, port int) []Node {
	nodes := make([]Node, replicas)
	for i := range nodes {
		ordinal := strconv.Itoa(i)
		nodes[i] = Node{
			ID:   "node-" + ordinal,
			Host: fmt.Sprintf("%s-%s.%s.%s.svc.%s", cache.Name, ordinal, cache.Name, cache.Namespace, clusterDomain),
			Port: port,
		}
	}
	return nodes
}
