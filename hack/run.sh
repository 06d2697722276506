#!/usr/bin/env bash
# make run: runs the operator out of cluster. Without KUBECONFIG, or with the local cluster's own,
# it starts (or reuses) a local cluster built from the toolchain: a kwokctl control plane and
# three real nodes (kubelet, containerd, runc) that run the cache pods as containers of images
# built here; then it installs the CRDs. With another KUBECONFIG it uses that cluster. Extra operator flags can be given in ARGS, e.g.
# make run ARGS=--zap-log-level=debug.
set -euo pipefail
cd "$(dirname "$0")/.."

go build -o bin/localcluster ./hack/localcluster
local_kubeconfig=$(bin/localcluster kubeconfig)
# The README's second terminal exports the local cluster's kubeconfig: `make run` typed there
# means the local cluster too, not an existing cluster that happens to be it.
if [[ -z ${KUBECONFIG:-} || $KUBECONFIG == "$local_kubeconfig" ]]; then
	# shellcheck disable=SC2086 # the components are words
	hack/toolchain.sh etcd kubernetes kwok ${REAL_NODE_TOOLS:?run this through make run}
	KUBECONFIG=$(bin/localcluster up)
	export KUBECONFIG
	operator_args=$(bin/localcluster operator-args)
	# The nodes run in the background: the caches outlive this operator (kill it, and run `make
	# run` again), until `make local-cluster-down`.
	echo "Local cluster is up. In another terminal:" >&2
	echo "  export KUBECONFIG=$KUBECONFIG PATH=$PWD/bin:\$PATH" >&2
else
	hack/toolchain.sh kubernetes
	bin/kubectl apply --server-side -k config/crd
	# Out of a cluster the manager cannot infer a namespace for its leader election Lease and
	# webhook certificate. That cluster's API server cannot reach this process's conversion
	# webhook: use v2 there, or install the operator in it (README).
	operator_args="--leader-election-namespace=default --webhook-cert-namespace=default"
fi

# shellcheck disable=SC2086 # the flags are words
exec bin/cache-operator $operator_args ${ARGS:-}
