#!/usr/bin/env bash
# check-shared-modules.sh fails if a module that both the project and one of the toolchain's Go
# builds (hack/tools/NAME: Kubernetes, etcd, kwok, CoreDNS, Helm) compile packages of is required
# at different versions by the two.
#
# Why: the toolchain builds these tools with the flags of the project's build (static, -trimpath:
# hack/toolchain.sh and the Makefile), so that Go's build cache keys a library that two builds
# compile the same, and a fresh machine compiles client-go, apimachinery, grpc, the standard
# library and the rest once, not again for each tool and for the tests. A module at another
# version (and everything above it) is compiled twice: the builds still work, only slower. After
# changing a go.mod, align them: `go get MODULE@VERSION` in the one that is behind.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
format='{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}'

project=$(cd "$root" && go list -tags integration,e2e -deps -test -f "$format" ./... | sort -u)
status=0
for dir in "$root"/hack/tools/*/; do
	name=$(basename "$dir")
	# A tool is its go.mod's tool directive, or the main package beside it (CoreDNS's).
	packages=tool
	[[ -e $dir/main.go ]] && packages=.
	tool=$(cd "$dir" && go list -mod=readonly -deps -f "$format" "$packages" | sort -u)
	differ=$(join <(echo "$project") <(echo "$tool") | awk '$2 != $3')
	if [[ -n $differ ]]; then
		echo "modules at other versions in go.mod and hack/tools/$name/go.mod (module, project's, $name's):" >&2
		echo "$differ" >&2
		status=1
	fi
done
if ((status != 0)); then
	echo "a fresh machine then compiles them more than once: align them (hack/check-shared-modules.sh says how)" >&2
fi
exit $status
