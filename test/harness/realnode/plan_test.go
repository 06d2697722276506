package realnode

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Every address a cluster uses lies in the local range, and two clusters' blocks never overlap:
// nothing a node or pod sends is for an address outside the machine's bridges.
func TestPlansStayInTheirBlocks(t *testing.T) {
	local := netip.MustParsePrefix(Range)
	seen := map[netip.Addr]int{}
	for block := range Blocks {
		p := Plan{Block: block}
		for _, prefix := range []netip.Prefix{p.LinkPrefix(), p.ClusterCIDR(), p.ServiceCIDR()} {
			if !local.Contains(prefix.Addr()) || prefix.Bits() < local.Bits() {
				t.Errorf("block %d: %s is not inside %s", block, prefix, Range)
			}
		}
		addrs := []netip.Addr{p.HostIP(), p.APIServiceIP(), p.DNSServiceIP()}
		for i := range MaxNodes {
			addrs = append(addrs, p.NodeIP(i), p.PodGateway(i))
			if !p.ClusterCIDR().Contains(p.PodCIDR(i).Addr()) || p.PodCIDR(i).Overlaps(p.LinkPrefix()) {
				t.Errorf("block %d: node %d's pods %s are not in %s apart from the link %s", block, i, p.PodCIDR(i), p.ClusterCIDR(), p.LinkPrefix())
			}
		}
		for _, a := range addrs {
			if other, ok := seen[a]; ok && other != block {
				t.Errorf("%s is in blocks %d and %d", a, other, block)
			}
			seen[a] = block
		}
		if len(p.Bridge()) > 15 || len(p.Bridge())+len("n14") > 15 {
			t.Errorf("block %d: link names from %q exceed the kernel's 15 characters", block, p.Bridge())
		}
	}
}

// The pods get a route for the local range only, through their node: no default route.
func TestPodsGetNoDefaultRoute(t *testing.T) {
	spec := &Spec{Name: "node-1", Index: 1, Plan: Plan{Block: 2}, Nodes: 3, Dir: "/n", BinDir: "/b"}
	content, err := spec.cniConfig()
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			IPAM struct {
				Routes []struct{ Dst string } `json:"routes"`
				Ranges [][]struct{ Subnet, Gateway string }
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(content, &conf); err != nil {
		t.Fatal(err)
	}
	ipam := conf.Plugins[0].IPAM
	if len(ipam.Routes) != 1 || ipam.Routes[0].Dst != Range {
		t.Errorf("pod routes %+v, want only %s", ipam.Routes, Range)
	}
	if got := ipam.Ranges[0][0]; got.Subnet != "198.18.34.0/24" || got.Gateway != "198.18.34.1" {
		t.Errorf("node 1 of block 2 hands out %+v, want 198.18.34.0/24 through 198.18.34.1", got)
	}
}

// The kubelet and containerd are told to leave the machine's kernel settings, cgroups and
// directories alone, where by default they would change or write them.
func TestKubeletConfigKeepsToItsNode(t *testing.T) {
	spec := &Spec{Name: "node-0", Plan: Plan{Block: 0}, Nodes: 1, Dir: "/n", CgroupRoot: "/run-cgroup/cache-operator-c/node-0"}
	content, err := spec.kubeletConfig()
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := yaml.Unmarshal(content, &conf); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"cgroupRoot": spec.CgroupRoot, "protectKernelDefaults": false, "failCgroupV1": false,
		"address": "198.18.0.10", "resolvConf": "/n/resolv.conf", "imageGCHighThresholdPercent": float64(100),
		"volumePluginDir": "/var/lib/kubelet/volume-plugins",
	} {
		if conf[key] != want {
			t.Errorf("%s = %v, want %v", key, conf[key], want)
		}
	}
	if !strings.Contains(spec.containerdConfig(), "restrict_oom_score_adj = true") {
		t.Error("containerd would start containers with an OOM score adjustment this machine refuses")
	}
	if !strings.Contains(spec.containerdConfig(), `path = "/var/lib/containerd-opt"`) {
		t.Error("containerd would make its opt directory in the machine's /opt")
	}
}
