#!/usr/bin/env bash
# Builds the binaries the project runs (a local Kubernetes control plane, kwok, CoreDNS, promtool,
# helm, golangci-lint, versitygw: an S3-compatible server for the backup tests) from the Go module
# proxy at pinned versions, fetches Valkey and the metrics exporter (redis_exporter) from Debian's
# packages and cert-manager's Certificate CRD from its Go module, caches them outside the checkout
# keyed by component and version, and links them into $LOCALBIN.
#
#   hack/toolchain.sh [component...]     (default: every component)
#
# No prebuilt binary can be downloaded on our machines, so everything is built from source. A
# component is built into a temporary directory and renamed into place only when complete: an
# interrupted build leaves nothing that a later call mistakes for a good binary.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${CACHE_OPERATOR_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/cache-operator/tools}
localbin=${LOCALBIN:-$root/bin}

# Pinned versions. The kubernetes and etcd versions are also pinned in hack/tools/*/go.mod.
KUBERNETES_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0
COREDNS_VERSION=v1.14.3
PROMETHEUS_VERSION=v0.316.0
HELM_VERSION=v3.22.0
GOLANGCI_LINT_VERSION=v2.15.0
VERSITYGW_VERSION=v1.8.0
# Debian package versions: Valkey from the backports suite of the machine's Debian release, its
# libraries from the release itself. They are bookworm's (Debian 12), the release of our machines;
# on another release apt reports these versions as not found.
VALKEY_VERSION=8.0.1+dfsg1-1~bpo12+1
JEMALLOC_VERSION=5.3.0-1
LZF_VERSION=3.6-3
# The Cache pods' metrics exporter, the one the image oliver006/redis_exporter:v1.45.0 holds (the
# Go module proxy does not serve its module); it links only libc.
REDIS_EXPORTER_VERSION=1.45.0-2+b4
# cert-manager, whose Certificate kind the tests install so that the operator's Certificates meet
# its real schema; its controller, whose module the proxy does not serve, does not run.
CERT_MANAGER_VERSION=v1.21.2

all_components=(etcd kubernetes kwok coredns promtool helm golangci-lint valkey redis-exporter versitygw cert-manager-crds)

log() { printf 'toolchain: %s\n' "$*" >&2; }

version_of() {
	case $1 in
	etcd) echo "$ETCD_VERSION" ;;
	kubernetes) echo "$KUBERNETES_VERSION" ;;
	kwok) echo "$KWOK_VERSION" ;;
	coredns) echo "$COREDNS_VERSION" ;;
	promtool) echo "$PROMETHEUS_VERSION" ;;
	helm) echo "$HELM_VERSION" ;;
	golangci-lint) echo "$GOLANGCI_LINT_VERSION" ;;
	valkey) echo "$VALKEY_VERSION" ;;
	redis-exporter) echo "$REDIS_EXPORTER_VERSION" ;;
	versitygw) echo "$VERSITYGW_VERSION" ;;
	cert-manager-crds) echo "$CERT_MANAGER_VERSION" ;;
	*)
		log "unknown component '$1' (known: ${all_components[*]})"
		exit 2
		;;
	esac
}

# build_into COMPONENT DIR writes the component's binaries into DIR.
build_into() {
	local out=$2
	case $1 in
	etcd)
		(cd "$root/hack/tools/etcd" && go build -mod=readonly -trimpath -o "$out/etcd" go.etcd.io/etcd/server/v3)
		;;
	kubernetes)
		# Without the version stamped in, the server reports v0.0.0-master and kubectl cannot
		# parse it.
		local minor=${KUBERNETES_VERSION#v1.}
		minor=${minor%%.*}
		local ldflags="-s -w" pkg
		for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
			ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
		done
		(cd "$root/hack/tools/kubernetes" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/" \
			k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
			k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
		;;
	kwok) go_install "$out" sigs.k8s.io/kwok/cmd/kwok@"$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwokctl@"$KWOK_VERSION" ;;
	coredns) go_install "$out" github.com/coredns/coredns@"$COREDNS_VERSION" ;;
	promtool) go_install "$out" github.com/prometheus/prometheus/cmd/promtool@"$PROMETHEUS_VERSION" ;;
	helm) go_install "$out" helm.sh/helm/v3/cmd/helm@"$HELM_VERSION" ;;
	golangci-lint) go_install "$out" github.com/golangci/golangci-lint/v2/cmd/golangci-lint@"$GOLANGCI_LINT_VERSION" ;;
	valkey) fetch_valkey "$out" ;;
	redis-exporter) fetch_redis_exporter "$out" ;;
	versitygw) go_install "$out" github.com/versity/versitygw/cmd/versitygw@"$VERSITYGW_VERSION" ;;
	cert-manager-crds) fetch_cert_manager_crds "$out" ;;
	esac
}

# debian_unpack DIR PACKAGE=VERSION... unpacks Debian's packages into DIR/.root. apt runs with a
# sources list, package lists and cache of its own under DIR, so the machine's apt configuration
# and state are left as they are.
debian_unpack() {
	local out=$1
	shift
	if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
		log "$* come from Debian's packages, and this machine has no apt-get and dpkg-deb"
		exit 1
	fi
	local codename uri apt=$out/.apt
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	# The archive the machine already uses for its release, as apt itself reports it from its
	# sources (--no-release-info: also before the machine's first apt-get update).
	uri=$(apt-get indextargets --no-release-info --format '$(RELEASE) $(REPO_URI)' | awk -v r="$codename" '$1 == r {print $2; exit}')
	if [[ -z $codename || -z $uri ]]; then
		log "no Debian archive for release '$codename' is configured in apt's sources on this machine"
		exit 1
	fi
	mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d" "$out/.root"
	printf 'deb %s %s main\n' "$uri" "$codename" "$uri" "$codename-backports" >"$apt/sources.list"
	local opts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/sources.list.d"
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
	apt-get "${opts[@]}" update >&2
	(cd "$apt" && apt-get "${opts[@]}" download >&2 "$@")
	local deb
	for deb in "$apt"/*.deb; do
		dpkg-deb -x "$deb" "$out/.root"
	done
	rm -rf "$apt"
}

# fetch_valkey DIR unpacks Debian's valkey-server and valkey-tools, and the libraries they link,
# into DIR/.root, and writes DIR/valkey-server and DIR/valkey-cli: wrappers that run them with
# those libraries.
fetch_valkey() {
	local out=$1
	debian_unpack "$out" "valkey-server=$VALKEY_VERSION" "valkey-tools=$VALKEY_VERSION" \
		"libjemalloc2=$JEMALLOC_VERSION" "liblzf1=$LZF_VERSION"
	local libdir
	libdir=$(cd "$out/.root" && dirname usr/lib/*/libjemalloc.so.2)
	local bin
	for bin in valkey-server valkey-cli; do
		cat >"$out/$bin" <<-EOF
			#!/bin/sh
			# $bin $VALKEY_VERSION from Debian, unpacked beside this wrapper by hack/toolchain.sh.
			root=\$(dirname "\$(readlink -f "\$0")")/.root
			LD_LIBRARY_PATH=\$root/$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$root/usr/bin/$bin" "\$@"
		EOF
		chmod +x "$out/$bin"
	done
	"$out/valkey-server" --version >&2
}

# fetch_redis_exporter DIR unpacks Debian's prometheus-redis-exporter into DIR/.root and links
# it as DIR/redis_exporter, the name the image gives it.
fetch_redis_exporter() {
	local out=$1
	debian_unpack "$out" "prometheus-redis-exporter=$REDIS_EXPORTER_VERSION"
	ln -s .root/usr/bin/prometheus-redis-exporter "$out/redis_exporter"
	"$out/redis_exporter" --version >&2
}

# fetch_cert_manager_crds DIR copies the CRD of cert-manager's Certificate, as its release
# installs it, from cert-manager's Go module into DIR.
fetch_cert_manager_crds() {
	local out=$1 module=github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION
	(cd "$out" && GOFLAGS=-mod=mod go mod download "$module")
	cp "$(go env GOMODCACHE)/$module/deploy/crds/cert-manager.io_certificates.yaml" "$out/"
	chmod u+w "$out/cert-manager.io_certificates.yaml"
}

go_install() {
	local out=$1
	shift
	GOBIN=$out go install -trimpath -ldflags "-s -w" "$@"
}

ensure() {
	local component=$1 version dir tmp start
	version=$(version_of "$component")
	dir=$cache/$component-$version
	if [[ ! -d $dir ]]; then
		mkdir -p "$cache"
		tmp=$(mktemp -d "$cache/.building-$component-$version.XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		log "building $component $version into $dir (first time on this machine; cached afterwards)"
		start=$SECONDS
		build_into "$component" "$tmp"
		# A concurrent call may have finished first; its result is as good as ours.
		mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
		trap - EXIT
		log "built $component $version in $((SECONDS - start))s"
	fi
	mkdir -p "$localbin"
	local bin
	for bin in "$dir"/*; do
		ln -sfn "$bin" "$localbin/$(basename "$bin")"
	done
}

components=("$@")
[[ ${#components[@]} -gt 0 ]] || components=("${all_components[@]}")
for c in "${components[@]}"; do
	ensure "$c"
done
