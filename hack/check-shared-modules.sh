#!/usr/bin/env bash
# check-shared-modules.sh fails if a module that both the project and the toolchain's Kubernetes
# build (hack/tools/kubernetes) compile packages of is required at different versions by the two.
#
# Why: the toolchain builds Kubernetes without -trimpath (hack/toolchain.sh), so that Go's build
# cache keys a library both builds compile the same, and a fresh machine compiles client-go,
# apimachinery, grpc and the rest once, not again for the tests. A module at another version (and
# everything above it) is compiled twice: the build still works, only slower. After changing either
# go.mod, align them: `go get MODULE@VERSION` in the one that is behind.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
format='{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}'

project=$(cd "$root" && go list -tags integration,e2e -deps -test -f "$format" ./... | sort -u)
kubernetes=$(cd "$root/hack/tools/kubernetes" && go list -mod=readonly -deps -f "$format" tool | sort -u)

differ=$(join <(echo "$project") <(echo "$kubernetes") | awk '$2 != $3')
if [[ -n $differ ]]; then
	echo "modules at other versions in go.mod and hack/tools/kubernetes/go.mod (module, project's, Kubernetes'):" >&2
	echo "$differ" >&2
	echo "the tests then compile them again on a fresh machine: align them (hack/check-shared-modules.sh says how)" >&2
	exit 1
fi
