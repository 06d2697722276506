// Command coredns is CoreDNS with only the plugins that the local cluster's DNS
// (test/harness/localcluster/dns.go) and the catalogue's test (internal/catalog) configure.
// CoreDNS chooses its plugins when it is compiled; its own main links all of them, among them
// the cloud providers' SDKs and tracing, which took most of its 4.7-minute build on two cores.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/etcd"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
