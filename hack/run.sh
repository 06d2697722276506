#!/usr/bin/env bash
# make run: runs the operator out of cluster. With KUBECONFIG set it uses that cluster; without,
# it starts (or reuses) a local kwokctl cluster built from the toolchain, installs the CRDs and
# runs the cluster's Valkey pods as real valkey-server processes on their loopback pod IPs.
# Extra operator flags can be given in ARGS, e.g. make run ARGS=--zap-log-level=debug.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z ${KUBECONFIG:-} ]]; then
	hack/toolchain.sh etcd kubernetes kwok valkey
	KUBECONFIG=$(go run ./hack/localcluster up)
	export KUBECONFIG
	# kwok plays the kubelet but runs no containers: the pod runner runs the cache pods' servers
	# until this script ends, and stops them then.
	go build -o bin/localcluster ./hack/localcluster
	operator_args=$(bin/localcluster operator-args)
	bin/localcluster run-pods &
	runner=$!
	trap 'kill $runner 2>/dev/null; wait $runner' EXIT
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
bin/cache-operator $operator_args ${ARGS:-}
