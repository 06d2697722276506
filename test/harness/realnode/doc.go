// Package realnode runs real Kubernetes nodes on this machine for the local cluster: each node is
// a kubelet with its own containerd and runc, kube-proxy in nftables mode and the CNI bridge
// plugin, all built or unpacked by hack/toolchain.sh, whose pods are containers of images built
// here (package images). The local cluster (package localcluster) starts them beside its
// control plane; `make run` and the end-to-end tests run their cache pods on them.
//
// A node keeps its changes to itself. It runs in a network namespace and a mount namespace of
// its own: its forwarding, its nftables rules, its bridge and its pods' network namespaces are
// the node's, never the machine's; its /run is a tmpfs and its /var/lib and /var/log are
// directories of its own, so that what containerd and the kubelet write there (images,
// snapshots, pod volumes, logs) stays in the cluster's directory; the kernel settings the kubelet
// would change for the whole machine (vm.overcommit_memory, kernel.panic, ...) are files of the
// node's in its mount namespace. Its daemons and its pods' cgroups are below the cgroup of the
// process that made the cluster, and removing that subtree ends everything the node started.
//
// The network stays inside the machine: nodes, pods and Services take their addresses from
// 198.18.0.0/15 (Plan), a block per cluster. The machine gets one bridge per cluster, an address
// on it where the nodes reach the API server, routes to the nodes' pods through the nodes, and a
// blackhole route for the whole /15 so that nothing for the range can leave by another
// interface; pods get a route for the /15 only, no default route, and the cluster's DNS has no
// upstream. Deleting the cluster removes the bridge and the routes.
//
// How the local cluster differs from a production one:
//   - One machine: every node shares its CPUs, memory and disk, and reports all of them as its
//     capacity; what a test measures is what the machine gives all the nodes at once. Four nodes
//     of two cores each schedule 80 pods of 100m, which the two cores then run together: a test
//     keeps its Caches few and small.
//   - The operator of `make run` and of most end-to-end tests runs on the machine, not in a pod
//     (a developer sees its log, a test kills it at any point), and reaches the pods through the
//     machine's routes to them.
//   - No registry: the images are imported into each node's containerd when it starts, and the
//     kubelets never collect unused images, which could never be pulled again.
//   - The nodes' kubelets and kube-proxies authenticate as the cluster's admin (kwokctl's one
//     client certificate), not as system:node:NAME with the Node authorizer; the API server
//     reaches kubelets with no client certificate, which they accept from anyone, as only the
//     machine reaches them.
//   - The API server reaches webhooks at their pods' addresses (--enable-aggregator-routing),
//     since the machine, where it runs, has no kube-proxy to reach a Service's address.
//   - kube-proxy masquerades every connection to a Service, so a pod sees a node's address as its
//     client's.
//   - cgroup v1 (what these machines mount), with the cgroupfs driver and no systemd.
//   - containerd brings each pod's loopback interface up itself (use_internal_loopback) rather
//     than through the CNI loopback plugin, as most nodes' containerd does: the pod sees the same
//     interface, and the node starts two programs fewer per pod.
//   - Every node is the machine's user's: each holds 9 of the inotify instances the kernel
//     gives a user (fs.inotify.max_user_instances, 128 by default), so the machine runs about a
//     dozen nodes at once, whatever clusters they belong to; the end-to-end tier's two clusters
//     hold 10, with no room for `make run`'s beside them. Starting nodes beyond what is left
//     fails at once, saying so (CheckInotifyRoom).
//   - The nodes share the machine's bridge: traffic between them crosses the machine's own
//     firewall when bridged frames go through it (net.bridge.bridge-nf-call-iptables), so a
//     machine whose firewall drops forwarded traffic keeps the nodes' pods apart.
//   - Valkey's images are Debian's builds of each release the toolchain has (8.0, 8.1 and 9.1:
//     package releases), on a root of the Debian release that carries it, tagged with the
//     release's own version only: a Cache whose version is not one of them meets a missing image.
package realnode
