package realnode

import (
	"fmt"
	"net/netip"
)

// Blocks is how many local clusters with real nodes can run on one machine at once: each takes
// a block of its own of the pod and Service ranges.
const Blocks = 16

// MaxNodes is how many real nodes one cluster can have: the pod range of its block holds a /24
// for its host link and one per node.
const MaxNodes = 15

// Addressing is where a cluster's traffic goes. Everything is in 198.18.0.0/15, the range set
// aside for benchmarking networks (RFC 2544), which no real network routes: pods take their
// addresses from 198.18.0.0/16 and Services from 198.19.0.0/16, a block of each per cluster. The
// machine sends nothing for the /15 anywhere but to its own bridges: a blackhole route covers
// the whole range, and the bridges' routes are more specific.
const (
	// Range is the whole range the local clusters use, which the blackhole route covers.
	Range = "198.18.0.0/15"
	// PodRange is where the clusters' host links and pod addresses are.
	PodRange = "198.18.0.0/16"
)

// Plan is the addressing of the cluster in one block: the first /24 of its pod block is the
// link between the machine and its nodes (the machine's bridge has .1, node i has .10+i), and
// node i's pods are in the /24 after it; Services are in the matching /20 of 198.19.0.0/16.
type Plan struct {
	Block int
}

// Bridge is the name of the machine's bridge that links the block's nodes to the machine and to
// each other; creating it is how a cluster claims its block.
func (p Plan) Bridge() string { return fmt.Sprintf("cacheop%d", p.Block) }

// HostIP is the machine's address on the bridge: where the nodes reach the API server.
func (p Plan) HostIP() netip.Addr { return p.addr(18, 16*p.Block, 1) }

// LinkPrefix is the bridge's network.
func (p Plan) LinkPrefix() netip.Prefix { return netip.PrefixFrom(p.addr(18, 16*p.Block, 0), 24) }

// NodeIP is node i's address on the bridge, where the API server reaches its kubelet.
func (p Plan) NodeIP(i int) netip.Addr { return p.addr(18, 16*p.Block, 10+i) }

// PodCIDR is node i's pods' network.
func (p Plan) PodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(p.addr(18, 16*p.Block+1+i, 0), 24)
}

// PodGateway is node i's own address in its pods' network: the pods' route to everything else.
func (p Plan) PodGateway(i int) netip.Addr { return p.addr(18, 16*p.Block+1+i, 1) }

// ClusterCIDR is every pod network of the block.
func (p Plan) ClusterCIDR() netip.Prefix {
	return netip.PrefixFrom(p.addr(18, 16*p.Block, 0), 20)
}

// ServiceCIDR is the block's Service range.
func (p Plan) ServiceCIDR() netip.Prefix {
	return netip.PrefixFrom(p.addr(19, 16*p.Block, 0), 20)
}

// APIServiceIP is the kubernetes Service's address, the first of the range, which the API
// server takes for itself.
func (p Plan) APIServiceIP() netip.Addr { return p.addr(19, 16*p.Block, 1) }

// DNSServiceIP is the cluster DNS Service's address, which the kubelets give the pods.
func (p Plan) DNSServiceIP() netip.Addr { return p.addr(19, 16*p.Block, 10) }

// BlackholeMetric is the metric of the block's blackhole route for Range: each cluster adds its
// own, so that deleting one cluster leaves the others covered.
func (p Plan) BlackholeMetric() int { return 4000 + p.Block }

func (p Plan) addr(b, c, d int) netip.Addr {
	if p.Block < 0 || p.Block >= Blocks {
		panic(fmt.Sprintf("block %d is not in 0..%d", p.Block, Blocks-1))
	}
	return netip.AddrFrom4([4]byte{198, byte(b), byte(c), byte(d)})
}
