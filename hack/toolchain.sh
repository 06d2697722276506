#!/usr/bin/env bash
# Builds the binaries the project runs (a local Kubernetes control plane and its real nodes' kubelet
# and kube-proxy, kwok, CoreDNS, helm, golangci-lint, versitygw: an S3-compatible server for the
# backup tests, runc) from the Go module proxy at pinned versions, fetches from Debian's packages
# Valkey, the metrics exporter (redis_exporter), promtool, the nodes' containerd, CNI plugins and
# nft, the CA certificates of the operator's image and the root filesystem of the Valkey image, and
# cert-manager's Certificate CRD from its Go module, caches them outside the checkout keyed by
# component and version, and links them into $LOCALBIN.
#
#   hack/toolchain.sh [component...]     (default, or "all": every component; "valkey": every release)
#
# No prebuilt binary can be downloaded on our machines but Debian's packages, so everything else is
# built from source. A component is built into a temporary directory and renamed into place only
# when complete: an interrupted build leaves nothing that a later call mistakes for a good binary.
set -euo pipefail

# Every Go program here is built static (CGO_ENABLED=0) and -trimpath, as Kubernetes builds its
# releases and the Makefile builds the project: Go's build cache keys a package by these flags, so
# the standard library, and the modules that the tools of hack/tools share with the project
# (hack/check-shared-modules.sh), are compiled once on a fresh machine. runc alone needs cgo
# (build_runc).
export CGO_ENABLED=0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${CACHE_OPERATOR_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/cache-operator/tools}
localbin=${LOCALBIN:-$root/bin}

# Pinned versions. Kubernetes, etcd, kwok, CoreDNS and Helm are pinned by their modules in
# hack/tools/NAME/go.mod (tool_module), where the modules they share with the project are at the
# project's versions (hack/check-shared-modules.sh).
GOLANGCI_LINT_VERSION=v2.15.0
VERSITYGW_VERSION=v1.8.0
# Debian's packages. The archive keeps only each suite's current version of a package, so an exact
# version stops resolving as soon as the suite moves on (bookworm's point releases replace its
# +deb12uN versions, security updates come first in bookworm-security): but for the Valkey release
# under test, packages are pinned by release line, PACKAGE@LINE, resolved when a component is built
# to the line's newest version in the suites it is looked up in (by default the machine's release,
# its updates, its security updates and its backports), that version written to the log and to the
# component's VERSION file. A component's cache key is made of its pins (valkey's of the Valkey
# version only), so changing a pin rebuilds it, while a suite moving on within a line leaves what
# is cached alone. The lines are bookworm's (Debian 12), the release of our machines; on another
# release a line is reported as not found.
#
# The Valkey releases under test, the lines users run: each from the Debian suites that carry it,
# pinned by line (8.1 is 8.1.1, 8.1.2, ...), with every library it links from the same suites. A
# release is the component valkey-LINE: the root filesystem of its image (test/harness/images),
# a Debian root of its suites, and wrappers that run its valkey-server and valkey-cli on the
# machine with that root's loader and libraries, as sid's 9.1 links a C library newer than the
# machine's. When a suite moves on to another line, valkey-LINE stops building where it is not
# cached yet, failing with "Debian's ... have no valkey-server of the LINE line; they have:
# VERSIONS": choose the line to test from those (the tests name releases by line).
VALKEY_RELEASES=(8.0 8.1 9.1)
# The release the machine's bin/valkey-server and bin/valkey-cli run (the integration tests' and
# the benchmark's): the newest, which users run.
VALKEY_DEFAULT_RELEASE=9.1
valkey_suites() {
	case $1 in
	8.0) echo "bookworm bookworm-updates bookworm-security bookworm-backports" ;; # Debian 12's backports
	8.1) echo "trixie trixie-updates trixie-security" ;;                          # Debian 13
	9.1) echo "$UNSTABLE_SUITES" ;;
	esac
}
# The Cache pods' metrics exporter, the one the image oliver006/redis_exporter:v1.45.0 holds (the
# Go module proxy does not serve its module); it links only libc.
REDIS_EXPORTER_VERSION=1.45.0-2+b4
# cert-manager, whose Certificate kind the tests install so that the operator's Certificates meet
# its real schema; its controller, whose module the proxy does not serve, does not run.
CERT_MANAGER_VERSION=v1.21.2

# The real nodes' OCI runtime. Debian has no runc 1.5, so it is built from its module, with seccomp:
# cgo links it statically, with bookworm's libseccomp-dev and the machine's C library.
RUNC_VERSION=v1.5.3
LIBSECCOMP_LINE=2.5
# Packages of Debian's releases after ours, whose Go programs link only libc and need no glibc
# newer than bookworm's 2.36: promtool from trixie (Debian 13; a download instead of seven minutes
# of go install), the nodes' containerd and CNI plugins from sid (unstable), pinned by release line
# too, in the suites listed here.
PROMETHEUS_LINE=2.53
PROMETHEUS_SUITES="trixie trixie-updates"
CONTAINERD_LINE=2.1
CNI_PLUGINS_LINE=1.9
# Where sid's packages are looked for: sid, then testing (forky) and trixie's backports, which carry
# the same line for a while when sid has moved on to the next.
UNSTABLE_SUITES="sid forky trixie-backports"
# kube-proxy's nftables mode runs nft: bookworm's, with every library that it links apart from libc
# (the machines have none of them), which a wrapper points the loader at.
NFTABLES_LINE=1.0.6
NFTABLES_PACKAGES=(
	"nftables@$NFTABLES_LINE" "libnftables1@$NFTABLES_LINE" libmnl0@1.0.4 libnftnl11@1.2.4
	libjansson4@2.14 libxtables12@1.8.9 libgmp10@6.2.1 libedit2@3.1-20221030 libbsd0@0.11.7
	libmd0@1.0.4 libtinfo6@6.4
)
# ShellCheck, which make lint runs on the project's shell scripts (the pods' and hack/'s):
# bookworm's, with the libraries that it, a Haskell program, links apart from libc.
SHELLCHECK_PACKAGES=(shellcheck@0.9.0 libffi8@3.4.4 libgmp10@6.2.1)
# The CA certificates of the operator's image: Debian's, as one PEM bundle. Their upstream version is
# the date of Mozilla's list, which bookworm updates as a whole: 20250419 came in bookworm-security,
# and replaces 20230311 in bookworm at its next point release.
CA_CERTIFICATES_LINE=20250419
# The root filesystem of a Valkey release's image (test/harness/images), laid out as the official
# image's base, debian:*-slim: Valkey, Debian's base directories and files, and the shell and the
# programs that the pods' scripts and the image's entrypoint run (rm, mv, head, seq, sleep, id,
# chown; grep, sed, awk, find), each the newest of the release's suites, and every library that
# they depend on (debian_get --with-libraries). setpriv, with which the image's entrypoint drops
# root, is util-linux's: only it is taken, with the library it links (libcap-ng0), not
# util-linux's other programs and the dozen libraries they link. The image's accounts
# (/etc/passwd and /etc/group) and links made by update-alternatives (awk) are the image
# builder's.
VALKEY_ROOTFS_PACKAGES=(base-files dash coreutils grep sed mawk findutils libcap-ng0)

# Every component, the longest to build first (the times of a build on two cores with every cache
# empty): components not cached yet start in this order, whatever order they are asked in.
all_components=(kubernetes kwok golangci-lint coredns helm versitygw runc "${VALKEY_RELEASES[@]/#/valkey-}" etcd
	nftables cni-plugins promtool containerd redis-exporter ca-certificates cert-manager-crds shellcheck)

# The commands of the kubernetes component: the control plane's, kubectl, and the real nodes'. One
# go build makes them all, so that the packages they share are compiled once: two builds side by
# side would each compile them.
KUBERNETES_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)

log() { printf 'toolchain: %s\n' "$*" >&2; }

# digest_of WORD... is a short digest of the words.
digest_of() { printf '%s\n' "$@" | sha256sum | cut -c1-12; }

# valkey_release COMPONENT prints the Valkey release line of the component valkey-LINE, and fails
# unless it is one of VALKEY_RELEASES.
valkey_release() {
	local line=${1#valkey-}
	if [[ " ${VALKEY_RELEASES[*]} " != *" $line "* ]]; then
		log "unknown component '$1' (known: ${all_components[*]})"
		exit 2
	fi
	echo "$line"
}

# tool_module NAME prints the module that the Go module hack/tools/NAME builds a tool of.
tool_module() {
	case $1 in
	etcd) echo go.etcd.io/etcd/server/v3 ;;
	kubernetes) echo k8s.io/kubernetes ;;
	kwok) echo sigs.k8s.io/kwok ;;
	coredns) echo github.com/coredns/coredns ;;
	helm) echo helm.sh/helm/v3 ;;
	esac
}

# tool_pin NAME prints the version of the tool that hack/tools/NAME builds, from its go.mod.
tool_pin() {
	awk -v m="$(tool_module "$1")" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' \
		"$root/hack/tools/$1/go.mod"
}

# tool_version NAME is the cache key's version of the tool that hack/tools/NAME builds: its pin and
# a digest of the module's files, so that the key changes with the versions of the modules it
# shares with the project and with CoreDNS's plugins (hack/tools/coredns/main.go).
tool_version() { echo "$(tool_pin "$1")-$(digest_of "$(cat "$root/hack/tools/$1"/*)")"; }

version_of() {
	case $1 in
	etcd | kwok | coredns | helm) tool_version "$1" ;;
	kubernetes) echo "$(tool_version kubernetes)-$(digest_of "${KUBERNETES_COMMANDS[@]}")" ;;
	promtool) echo "$PROMETHEUS_LINE" ;;
	golangci-lint) echo "$GOLANGCI_LINT_VERSION" ;;
	redis-exporter) echo "$REDIS_EXPORTER_VERSION" ;;
	versitygw) echo "$VERSITYGW_VERSION" ;;
	cert-manager-crds) echo "$CERT_MANAGER_VERSION" ;;
	# runc links libseccomp and the C library statically: its key has libseccomp's line, and says
	# static.
	runc) echo "$RUNC_VERSION-libseccomp$LIBSECCOMP_LINE-static" ;;
	containerd) echo "$CONTAINERD_LINE" ;;
	cni-plugins) echo "$CNI_PLUGINS_LINE" ;;
	# Made of many pinned packages: the key changes with any of their pins.
	nftables) echo "$NFTABLES_LINE-$(digest_of "${NFTABLES_PACKAGES[@]}")" ;;
	shellcheck) digest_of "${SHELLCHECK_PACKAGES[@]}" ;;
	ca-certificates) echo "$CA_CERTIFICATES_LINE" ;;
	valkey-*)
		valkey_release "$1" >/dev/null
		digest_of "${VALKEY_ROOTFS_PACKAGES[@]}" "$(valkey_suites "${1#valkey-}")"
		;;
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
	etcd) tool_build etcd -o "$out/etcd" go.etcd.io/etcd/server/v3 ;;
	kubernetes) build_kubernetes "$out" "${KUBERNETES_COMMANDS[@]}" ;;
	kwok) tool_build kwok -o "$out/" tool ;;
	coredns) tool_build coredns -o "$out/coredns" . ;;
	promtool) fetch_promtool "$out" ;;
	helm) tool_build helm -o "$out/" tool ;;
	golangci-lint) go_install "$out" github.com/golangci/golangci-lint/v2/cmd/golangci-lint@"$GOLANGCI_LINT_VERSION" ;;
	redis-exporter) fetch_redis_exporter "$out" ;;
	versitygw) go_install "$out" github.com/versity/versitygw/cmd/versitygw@"$VERSITYGW_VERSION" ;;
	cert-manager-crds) fetch_cert_manager_crds "$out" ;;
	runc) build_runc "$out" ;;
	containerd) fetch_containerd "$out" ;;
	cni-plugins) fetch_cni_plugins "$out" ;;
	nftables) fetch_with_libraries "$out" usr/sbin/nft nftables NFTABLES_PACKAGES ;;
	shellcheck) fetch_with_libraries "$out" usr/bin/shellcheck shellcheck SHELLCHECK_PACKAGES ;;
	ca-certificates) fetch_ca_certificates "$out" ;;
	valkey-*) fetch_valkey "$out" "${1#valkey-}" ;;
	esac
}

# tool_build NAME ARG... runs go build ARG... in the Go module hack/tools/NAME, with the flags of
# the project's build and the same versions of the modules it shares (hack/check-shared-modules.sh):
# Go's build cache then keys the libraries both compile (client-go, apimachinery, grpc, the
# standard library...) the same, and what one build compiled on a fresh machine, the next reuses
# rather than compile again. Without symbols or debug information, unless ARG... has -ldflags of its
# own (the last wins).
tool_build() {
	local name=$1
	shift
	(cd "$root/hack/tools/$name" && go build -mod=readonly -trimpath -ldflags "-s -w" "$@")
}

# build_kubernetes DIR COMMAND... builds Kubernetes' commands (k8s.io/kubernetes/cmd/COMMAND) into
# DIR.
build_kubernetes() {
	local out=$1
	shift
	# Without the version stamped in, the server reports v0.0.0-master and kubectl cannot parse it.
	local version minor
	version=$(tool_pin kubernetes)
	minor=${version#v1.}
	minor=${minor%%.*}
	local ldflags="-s -w" pkg cmds=()
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	for pkg in "$@"; do
		cmds+=("k8s.io/kubernetes/cmd/$pkg")
	done
	tool_build kubernetes -ldflags "$ldflags" -o "$out/" "${cmds[@]}"
}

# prefetch_modules COMPONENT downloads the Go modules that the component's build needs, and builds
# nothing (the network lane). A failure is left for the build itself to report.
prefetch_modules() {
	case $1 in
	# kubernetes is not here: the first of the Go lane, it downloads its own.
	etcd | kwok | coredns | helm) (cd "$root/hack/tools/$1" && go mod download) ;;
	golangci-lint) go install -n github.com/golangci/golangci-lint/v2/cmd/golangci-lint@"$GOLANGCI_LINT_VERSION" ;;
	versitygw) go install -n github.com/versity/versitygw/cmd/versitygw@"$VERSITYGW_VERSION" ;;
	runc) go install -n github.com/opencontainers/runc@"$RUNC_VERSION" ;;
	esac >/dev/null 2>&1 || true
}

# debian_unpack DIR [--suites="SUITE..."] PACKAGE=VERSION|PACKAGE@LINE... unpacks Debian's
# packages of SUITEs (by default those of debian_lists) into DIR/.root, with debian_lists and
# debian_get.
debian_unpack() {
	local out=$1 suites=()
	shift
	if [[ ${1-} == --suites=* ]]; then
		read -ra suites <<<"${1#--suites=}"
		shift
	fi
	debian_lists "$out" "${suites[@]}"
	debian_get "$out/.root" "$@"
	rm -rf "$out/.apt"
}

# debian_lists DIR [SUITE...] gives apt a sources list, package lists and cache of its own under
# DIR/.apt (the caller removes it when done), so the machine's apt configuration and state are
# left as they are. The sources are SUITEs, by default the machine's release, its updates, its
# security updates and its backports, each from the archive that apt's sources on the machine list
# for it; a suite that they do not list from the archive that they list for the release (Debian's
# serves its updates and backports, and the other releases), but the security updates, which are
# left out then. It starts debian_version afresh.
debian_lists() {
	local out=$1
	shift
	if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
		log "this component comes from Debian's packages, and this machine has no apt-get and dpkg-deb"
		exit 1
	fi
	local codename uri suite release repo
	local -A uris=()
	# shellcheck source=/dev/null # the machine's, read for its release's code name
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	# The archives the machine already uses, by suite, as apt itself reports them from its sources
	# (--no-release-info: also before the machine's first apt-get update).
	# shellcheck disable=SC2016 # apt expands the format, not the shell
	while read -r release repo; do
		[[ -z $release || -n ${uris[$release]-} ]] || uris[$release]=$repo
	done < <(apt-get indextargets --no-release-info --format '$(RELEASE) $(REPO_URI)')
	uri=${uris[${codename:-none}]-}
	if [[ -z $codename || -z $uri ]]; then
		log "no Debian archive for release '$codename' is configured in apt's sources on this machine"
		exit 1
	fi
	[[ $# -gt 0 ]] || set -- "$codename" "$codename-updates" "$codename-security" "$codename-backports"
	debian_suites=()
	debian_version=()
	debian_apt=$out/.apt
	mkdir -p "$debian_apt/lists/partial" "$debian_apt/cache/archives/partial" "$debian_apt/sources.list.d"
	# Only the package lists (target=Packages), not the translations or AppStream metadata that the
	# machine's apt configuration may ask for too.
	for suite; do
		if [[ -n ${uris[$suite]-} ]]; then
			printf 'deb [target=Packages] %s %s main\n' "${uris[$suite]}" "$suite"
		elif [[ $suite == *-security ]]; then
			log "apt's sources on this machine list no archive for $suite: its packages are not looked for"
			continue
		else
			printf 'deb [target=Packages] %s %s main\n' "$uri" "$suite"
		fi
		debian_suites+=("$suite")
	done >"$debian_apt/sources.list"
	debian_opts=(-q -o "Dir::Etc::SourceList=$debian_apt/sources.list" -o "Dir::Etc::SourceParts=$debian_apt/sources.list.d"
		-o "Dir::State::Lists=$debian_apt/lists" -o "Dir::Cache=$debian_apt/cache" -o APT::Sandbox::User=root)
	apt-get "${debian_opts[@]}" update >&2
}

# debian_get ROOT [--with-libraries] PACKAGE=VERSION|PACKAGE@LINE|PACKAGE... downloads Debian's
# packages from the sources of debian_lists (DIR/.apt) and unpacks them into ROOT; each package's
# control files (its maintainer scripts) go to DIR/.apt/control/PACKAGE. PACKAGE@LINE is the
# newest version of PACKAGE there whose upstream version is LINE or LINE.something (or
# LINE+something, LINE~something); a bare PACKAGE, the newest there. With --with-libraries, the
# libraries that the packages depend on (Depends and Pre-Depends named lib* or zlib*, the first of
# alternatives), and theirs, come too, each the newest there: what a program needs to run, without
# the rest of a system (the packages' maintainer scripts, which do not run, depend on most of it).
# The version of each package, and the suites that have it, are logged, and debian_version[PACKAGE]
# records it. A version that the suites do not have (any more) fails, naming those they have.
debian_get() {
	local root=$1 libraries='' spec pkg line version upstream found have suites dep specs=() i
	shift
	if [[ ${1-} == --with-libraries ]]; then
		libraries=1
		shift
	fi
	local -a wanted=("$@")
	local -A seen=()
	for spec in "${wanted[@]}"; do
		seen[${spec%%[=@]*}]=1
	done
	# wanted grows as the libraries the packages depend on are found.
	for ((i = 0; i < ${#wanted[@]}; i++)); do
		spec=${wanted[i]}
		if [[ $spec == *@* ]]; then
			pkg=${spec%@*} line=${spec#*@} version=''
		elif [[ $spec == *=* ]]; then
			pkg=${spec%%=*} line='' version=${spec#*=}
		else
			pkg=$spec line='' version=''
		fi
		# madison: "PACKAGE | VERSION | URI SUITE/COMPONENT ARCHITECTURE Packages", a line for each
		# suite that has a version.
		have=$(apt-cache "${debian_opts[@]}" madison "$pkg" | awk -F' *[|] *' '{print $2}' | sort -u)
		if [[ -z $version ]]; then
			found=
			while read -r version; do
				upstream=${version#*:}
				upstream=${upstream%-*}
				if [[ -n $version ]] &&
					[[ -z $line || $upstream == "$line" || $upstream == "$line".* || $upstream == "$line"[~+]* ]] &&
					{ [[ -z $found ]] || dpkg --compare-versions "$version" gt "$found"; }; then
					found=$version
				fi
			done <<<"$have"
			if [[ -z $found ]]; then
				log "Debian's ${debian_suites[*]} have no $pkg${line:+ of the $line line}; they have:" \
					"$(paste -sd' ' <<<"${have:-none}").${line:+ Pin a line that one of them has.}"
				exit 1
			fi
			version=$found
		elif ! grep -qxF -- "$version" <<<"$have"; then
			log "Debian's ${debian_suites[*]} have no $pkg $version (any more: the archive keeps only each" \
				"suite's current version); they have: $(paste -sd' ' <<<"${have:-none}"). Pin one of those."
			exit 1
		fi
		suites=$(apt-cache "${debian_opts[@]}" madison "$pkg" |
			awk -F' *[|] *' -v v="$version" '$2 == v {split($3, f, " "); sub("/.*", "", f[2]); printf "%s%s", s, f[2]; s = ", "}')
		log "Debian's $pkg $version (${line:+the $line line, }from $suites)"
		debian_version[$pkg]=$version
		specs+=("$pkg=$version")
		[[ -n $libraries ]] || continue
		# "Depends: a (>= 1), b | c, d:any": the first of each alternative, without its version
		# and architecture.
		for dep in $(apt-cache "${debian_opts[@]}" show "$pkg=$version" |
			awk -F': ' '/^$/ {exit} $1 == "Depends" || $1 == "Pre-Depends" {print $2}' |
			tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/:.*//; s/[[:space:]]//g' | grep -E '^(lib|zlib)' || true); do
			if [[ -z ${seen[$dep]-} ]]; then
				seen[$dep]=1
				wanted+=("$dep")
			fi
		done
	done
	local debs deb
	mkdir -p "$debian_apt/control"
	debs=$(mktemp -d "$debian_apt/debs.XXXXXX")
	(cd "$debs" && apt-get "${debian_opts[@]}" download >&2 "${specs[@]}")
	mkdir -p "$root"
	# dpkg-deb reads each compression that Debian's packages use (xz; zstd too, since bookworm's
	# dpkg). tar keeps a root's links to directories (a merged /usr's /bin -> usr/bin) where a
	# package has the directory, and Debian's owners by number.
	for deb in "$debs"/*.deb; do
		dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink --numeric-owner -C "$root"
		dpkg-deb -e "$deb" "$debian_apt/control/$(dpkg-deb -f "$deb" Package)"
	done
	rm -rf "$debs"
}
declare -A debian_version=()

# debian_versions prints the version of each package that debian_get fetched since debian_lists,
# PACKAGE=VERSION a line: the VERSION file of a component made of several packages.
debian_versions() {
	local pkg
	for pkg in "${!debian_version[@]}"; do
		printf '%s=%s\n' "$pkg" "${debian_version[$pkg]}"
	done | LC_ALL=C sort
}

# usr_merged ROOT makes ROOT a root with a merged /usr, as Debian's since bookworm: /bin, /lib,
# /lib64 and /sbin are links into /usr, through which debian_get unpacks what packages have there.
usr_merged() {
	local dir
	mkdir -p "$1/usr"
	for dir in bin lib lib64 sbin; do
		mkdir -p "$1/usr/$dir"
		ln -s "usr/$dir" "$1/$dir"
	done
}

# need_readelf fails unless the machine has readelf, which tells the libraries that programs link.
need_readelf() {
	if ! command -v readelf >/dev/null; then
		log "checking the libraries that programs link needs readelf (binutils), which this machine lacks"
		exit 1
	fi
}

# elf_needed FILE prints the libraries that the ELF FILE links (its NEEDED entries).
elf_needed() {
	need_readelf
	readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}

# glibc_lib LIB tells whether the library LIB is one of the C library's (Debian's libc6), which
# every machine has.
glibc_lib() {
	case $1 in
	libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | libresolv.so.2 | ld-linux-*.so.*) return 0 ;;
	esac
	return 1
}

# only_libc FILE... fails unless each of the ELF FILEs links no library but the C library's.
only_libc() {
	local file lib
	for file; do
		for lib in $(elf_needed "$file"); do
			if ! glibc_lib "$lib"; then
				log "$file links $lib, which the machines may not have: only the C library may be linked"
				exit 1
			fi
		done
	done
}

# elf_missing ROOT prints, for each ELF file under ROOT, the libraries that it links and that
# neither ROOT's library directories (a merged /usr's) nor its own $ORIGIN run path hold.
elf_missing() {
	local root=$1 lib origin file dir dirs files=()
	need_readelf
	mapfile -d '' files < <(find "$root" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) -print0)
	# One readelf for all the files, which names each ("File: NAME") as it is given more than one
	# (/dev/null, like any file that is not ELF, only makes it complain).
	while read -r lib origin file; do
		dirs=("$root"/usr/lib/*-linux-gnu "$root/usr/lib" "$root/usr/lib64")
		[[ $origin == 0 ]] || dirs+=("${file%/*}")
		for dir in "${dirs[@]}"; do
			[[ -e $dir/$lib ]] && continue 2
		done
		printf '%s (linked by %s)\n' "$lib" "${file#"$root"}"
	done < <({ readelf -d /dev/null "${files[@]}" 2>/dev/null || true; } | awk '
		function flush(i) { for (i = 1; i <= n; i++) print needed[i], origin, file; n = 0; origin = 0 }
		/^File: / { flush(); file = substr($0, 7) }
		/\(NEEDED\)/ { sub(/.*\[/, ""); sub(/\]$/, ""); needed[++n] = $0 }
		/\((RUN|R)PATH\)/ && /\$ORIGIN/ { origin = 1 }
		END { flush() }')
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

# fetch_promtool DIR unpacks Debian's promtool of PROMETHEUS_LINE (Prometheus's long-term support
# release) into DIR/.root and links it as DIR/promtool. Debian builds it linking only libc.
fetch_promtool() {
	local out=$1
	debian_unpack "$out" --suites="$PROMETHEUS_SUITES" "promtool@$PROMETHEUS_LINE"
	echo "${debian_version[promtool]}" >"$out/VERSION"
	ln -s .root/usr/bin/promtool "$out/promtool"
	only_libc "$out/promtool"
	"$out/promtool" --version >&2
}

# build_runc DIR builds runc into DIR with the tags of its Makefile's build but libpathrs (a Rust
# library that Debian does not package; runc then uses its Go implementation), against bookworm's
# libseccomp-dev unpacked into DIR/.root with a pkg-config file of its own. Without libseccomp's
# shared library beside its static one (libseccomp-dev's link to it dangles there: libseccomp2 is
# not unpacked), the static one is linked in, and runc needs nothing but libc.
build_runc() {
	local out=$1 libdir tool version
	local prefix=$out/.root/usr
	for tool in "$(go env CC)" pkg-config; do
		if ! command -v "$tool" >/dev/null; then
			log "building runc (cgo, libseccomp) needs $tool, which this machine lacks"
			exit 1
		fi
	done
	if [[ $("$(go env CC)" -print-file-name=libc.a) != /* ]]; then
		log "building runc static needs the C library's libc.a (libc6-dev), which this machine lacks"
		exit 1
	fi
	debian_unpack "$out" "libseccomp-dev@$LIBSECCOMP_LINE"
	debian_versions >"$out/VERSION"
	version=${debian_version[libseccomp-dev]}
	libdir=$(dirname "$prefix"/lib/*/libseccomp.a)
	rm -f "$libdir/libseccomp.so"
	mkdir "$out/.root/pkgconfig"
	cat >"$out/.root/pkgconfig/libseccomp.pc" <<-EOF
		# bookworm's libseccomp-dev $version, unpacked by hack/toolchain.sh.
		Name: libseccomp
		Description: The enhanced seccomp library
		Version: $(v=${version#*:} && echo "${v%-*}")
		Cflags: -I$prefix/include
		Libs: -L$libdir -lseccomp
	EOF
	# Go's build cache keys a cgo package by the flags of CGO_CFLAGS, not by those of pkg-config, and
	# would link a later build against this libseccomp's path, gone by then: the include directory
	# in CGO_CFLAGS keys it to this one.
	# Static and not PIE, as runc's Makefile builds `make static` where the C library cannot link a
	# static PIE: the shim starts runc for every step of every container (create, start, exec,
	# kill, delete), and on these machines, where a page fault is dear, a static runc ran a container
	# with 20 % less CPU than the PIE linked to libc (67 and 84 ms), a static PIE 5 % less.
	CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -I$prefix/include" PKG_CONFIG_PATH=$out/.root/pkgconfig \
		GOBIN=$out go install -trimpath -tags "seccomp urfave_cli_no_docs netgo osusergo" \
		-ldflags "-s -w -extldflags -static" github.com/opencontainers/runc@"$RUNC_VERSION"
	rm -rf "$out/.root"
	if elf_needed "$out/runc" | grep -q .; then
		log "runc links $(elf_needed "$out/runc" | paste -sd' '): it should be static"
		exit 1
	fi
	"$out/runc" --version >&2
	if ! "$out/runc" --version | grep -q '^libseccomp: '; then
		log "runc was built without seccomp"
		exit 1
	fi
}

# fetch_containerd DIR unpacks Debian's containerd of CONTAINERD_LINE into DIR/.root and links its
# daemon, its runc shim and ctr into DIR, and checks that each runs. containerd finds the shim
# beside itself, and the shim runs runc from PATH.
fetch_containerd() {
	local out=$1 bin
	debian_unpack "$out" --suites="$UNSTABLE_SUITES" "containerd@$CONTAINERD_LINE"
	echo "${debian_version[containerd]}" >"$out/VERSION"
	for bin in containerd containerd-shim-runc-v2 ctr; do
		ln -s ".root/usr/bin/$bin" "$out/$bin"
	done
	only_libc "$out/containerd" "$out/containerd-shim-runc-v2" "$out/ctr"
	"$out/containerd" --version >&2
	"$out/ctr" --version >&2
	"$out/containerd-shim-runc-v2" -v >&2
}

# fetch_cni_plugins DIR unpacks Debian's containernetworking-plugins of CNI_PLUGINS_LINE and moves
# the plugins into DIR/cni-bin, the directory that the nodes' containerd configuration names, and
# checks that those the nodes use run: each reports the CNI versions it supports.
fetch_cni_plugins() {
	local out=$1 plugin reply
	debian_unpack "$out" --suites="$UNSTABLE_SUITES" "containernetworking-plugins@$CNI_PLUGINS_LINE"
	echo "${debian_version[containernetworking-plugins]}" >"$out/VERSION"
	mv "$out/.root/usr/lib/cni" "$out/cni-bin"
	only_libc "$out"/cni-bin/*
	for plugin in bridge host-local loopback portmap; do
		if [[ ! -x $out/cni-bin/$plugin ]]; then
			log "Debian's containernetworking-plugins ${debian_version[containernetworking-plugins]} has no $plugin plugin"
			exit 1
		fi
		if ! reply=$(CNI_COMMAND=VERSION "$out/cni-bin/$plugin" </dev/null) || [[ $reply != *'"supportedVersions"'* ]]; then
			log "the CNI plugin $plugin does not report its versions (CNI_COMMAND=VERSION): $reply"
			exit 1
		fi
		log "$plugin: $reply"
	done
}

# fetch_with_libraries DIR PROGRAM PACKAGE LIST unpacks the Debian packages that the array named LIST
# holds (PACKAGE, which has PROGRAM, a path in the root, and every library that it links apart from
# the C library's) into DIR/.root, a merged /usr; checks that no library is missing; and writes
# DIR/NAME, NAME being PROGRAM's: a wrapper that runs PROGRAM with the loader pointed at them, as
# kube-proxy runs nft and make lint shellcheck, from PATH.
fetch_with_libraries() {
	local out=$1 program=$2 package=$3 name libdirs missing
	local -n packages=$4
	name=$(basename "$program")
	usr_merged "$out/.root"
	debian_unpack "$out" "${packages[@]}"
	debian_versions >"$out/VERSION"
	missing=$(elf_missing "$out/.root" | while read -r lib rest; do glibc_lib "$lib" || echo "$lib $rest"; done)
	if [[ -n $missing ]]; then
		log "$name needs libraries that $4 lacks:" "$missing"
		exit 1
	fi
	# shellcheck disable=SC2016 # $root is the wrapper's, which expands it
	libdirs=$(cd "$out/.root" && find usr/lib -name '*.so.*' -printf '$root/%h\n' | sort -u | paste -sd:)
	cat >"$out/$name" <<-EOF
		#!/bin/sh
		# $name ${debian_version[$package]} from Debian, unpacked beside this wrapper by hack/toolchain.sh.
		root=\$(dirname "\$(readlink -f "\$0")")/.root
		LD_LIBRARY_PATH=$libdirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$root/$program" "\$@"
	EOF
	chmod +x "$out/$name"
	"$out/$name" --version >&2
}

# fetch_ca_certificates DIR writes DIR/ca-certificates.crt: the CA certificates of Debian's
# ca-certificates as one PEM bundle, which its postinst (update-ca-certificates) would make, the
# certificates in the order of their names, each ending in a newline.
fetch_ca_certificates() {
	local out=$1 certs n
	debian_unpack "$out" "ca-certificates@$CA_CERTIFICATES_LINE"
	echo "${debian_version[ca-certificates]}" >"$out/VERSION"
	certs=$out/.root/usr/share/ca-certificates/mozilla
	find "$certs" -name '*.crt' -print0 | LC_ALL=C sort -z | xargs -0 awk 1 >"$out/ca-certificates.crt"
	n=$(find "$certs" -name '*.crt' | wc -l)
	if [[ $n -lt 100 || $(grep -c -- '-----BEGIN CERTIFICATE-----' "$out/ca-certificates.crt") -ne $n ]]; then
		log "ca-certificates.crt does not hold one certificate for each of the $n files of $certs"
		exit 1
	fi
	log "$n CA certificates in ca-certificates.crt"
}

# fetch_valkey DIR LINE unpacks the Valkey release LINE from its suites (valkey_suites), with
# VALKEY_ROOTFS_PACKAGES and util-linux's setpriv, into DIR/rootfs, a merged /usr; does what
# base-files' postinst does in a new root (DPKG_ROOT); drops the documentation as Debian's slim
# images do; checks that every library that a program or library there links is there too, and, as
# root, that Valkey and the shell run in it; and writes DIR/valkey-server and DIR/valkey-cli:
# wrappers that run them on the machine with the root's own loader and libraries.
fetch_valkey() {
	local out=$1 line=$2 rootfs=$1/rootfs dir missing loader bin
	if [[ $EUID -ne 0 ]]; then
		log "the Valkey image's root filesystem keeps the owners of Debian's files, and so is made as root"
		exit 1
	fi
	usr_merged "$rootfs"
	# shellcheck disable=SC2046 # the suites are words
	debian_lists "$out" $(valkey_suites "$line")
	debian_get "$rootfs" --with-libraries "valkey-server@$line" "valkey-tools@$line" "${VALKEY_ROOTFS_PACKAGES[@]}"
	debian_get "$out/.util-linux" util-linux
	debian_versions >"$out/VERSION"
	cp -a "$out/.util-linux/usr/bin/setpriv" "$rootfs/usr/bin/"
	mkdir -p "$rootfs/usr/share/doc/util-linux"
	cp -a "$out/.util-linux/usr/share/doc/util-linux/copyright" "$rootfs/usr/share/doc/util-linux/"
	rm -rf "$out/.util-linux"
	# The slim images' dpkg leaves out the documentation but the copyright files, and the manuals,
	# info pages and translations (debuerreotype's --slimify).
	find "$rootfs/usr/share/doc" -mindepth 2 ! -type d ! -name copyright -delete
	for dir in man info groff linda lintian/overrides locale; do
		if [[ -d $rootfs/usr/share/$dir ]]; then
			find "$rootfs/usr/share/$dir" -mindepth 1 -delete
		fi
	done
	# base-files' postinst makes /root's and /usr/local's files and directories, /run/lock,
	# /var/run -> /run and the like; it makes them under DPKG_ROOT, as when dpkg bootstraps a root.
	DPKG_ROOT=$rootfs sh "$debian_apt/control/base-files/postinst" configure
	rm -rf "$out/.apt"
	missing=$(elf_missing "$rootfs")
	if [[ -n $missing ]]; then
		log "Valkey $line's root filesystem lacks libraries that its programs link:" "$missing"
		exit 1
	fi
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot "$rootfs" /usr/bin/valkey-server --version >&2
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot "$rootfs" /bin/sh -c \
		'ls / && valkey-cli --version && setpriv --version && find --version | head -n 1 && mawk -W version 2>&1 | head -n 1' >&2
	# The root's loader, not the machine's: a release may link a C library newer than the machine's.
	loader=$(cd "$rootfs" && echo usr/lib/*-linux-gnu/ld-linux-*.so.*)
	if [[ ! -f $rootfs/$loader ]]; then
		log "Valkey $line's root filesystem has no dynamic loader (usr/lib/*-linux-gnu/ld-linux-*.so.*)"
		exit 1
	fi
	for bin in valkey-server valkey-cli; do
		cat >"$out/$bin" <<-EOF
			#!/bin/sh
			# $bin ${debian_version[valkey-server]} from Debian, whose root hack/toolchain.sh unpacked beside
			# this wrapper, run with that root's loader and libraries.
			root=\$(dirname "\$(readlink -f "\$0")")/rootfs
			exec "\$root/$loader" --library-path "\$root/${loader%/*}" "\$root/usr/bin/$bin" "\$@"
		EOF
		chmod +x "$out/$bin"
		"$out/$bin" --version >&2
	done
}

go_install() {
	local out=$1
	shift
	GOBIN=$out go install -trimpath -ldflags "-s -w" "$@"
}

# cached COMPONENT reports whether the component's build is in the cache.
cached() { [[ -d $cache/$1-$(version_of "$1") ]]; }

# build COMPONENT builds the component into the cache, its output into a log that is shown if it
# fails (builds run side by side: their output would interleave).
build() {
	local component=$1 version dir tmp start exact status
	version=$(version_of "$component")
	dir=$cache/$component-$version
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.building-$component-$version.XXXXXX")
	# Global: the trap runs where build's locals are gone, after an exit in a build.
	building=$tmp
	trap 'rm -rf "$building"' EXIT
	log "building $component $version into $dir (first time on this machine; cached afterwards)"
	start=$SECONDS
	# Not in a condition: there bash would ignore set -e within the build.
	set +e
	(
		set -e
		build_into "$component" "$tmp"
	) >"$tmp/.build.log" 2>&1
	status=$?
	set -e
	if ((status != 0)); then
		sed "s/^/toolchain: $component: /" "$tmp/.build.log" >&2
		log "building $component $version failed (its output above)"
		exit 1
	fi
	rm "$tmp/.build.log"
	# A concurrent call may have finished first; its result is as good as ours.
	exact=$(paste -sd' ' "$tmp/VERSION" 2>/dev/null || true)
	mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
	trap - EXIT
	case $exact in
	*=*) exact="Debian's $exact" ;;
	?*) exact="Debian version $exact" ;;
	esac
	log "built $component $version${exact:+ ($exact)} in $((SECONDS - start))s"
}

# link COMPONENT links the cached component's binaries into $localbin.
link() {
	local component=$1 dir file name
	dir=$cache/$component-$(version_of "$component")
	mkdir -p "$localbin"
	# A Valkey release is the directory bin/valkey-LINE, as the releases' programs share names; the
	# default release's programs are also bin/valkey-server and bin/valkey-cli.
	if [[ $component == valkey-* ]]; then
		ln -sfn "$dir" "$localbin/$component"
		[[ $component == "valkey-$VALKEY_DEFAULT_RELEASE" ]] || return 0
		ln -sfn "$dir/valkey-server" "$localbin/valkey-server"
		ln -sfn "$dir/valkey-cli" "$localbin/valkey-cli"
		return 0
	fi
	for file in "$dir"/*; do
		name=$(basename "$file")
		case $component/$name in
		*/VERSION) continue ;; # the Debian versions that the component was made of
		esac
		ln -sfn "$file" "$localbin/$name"
	done
}

requested=("$@")
if [[ ${#requested[@]} -eq 0 || " ${requested[*]} " == *" all "* ]]; then
	requested=("${all_components[@]}")
fi
# valkey is every Valkey release.
expanded=()
for c in "${requested[@]}"; do
	if [[ $c == valkey ]]; then
		expanded+=("${VALKEY_RELEASES[@]/#/valkey-}")
	else
		expanded+=("$c")
	fi
done
requested=("${expanded[@]}")
for c in "${requested[@]}"; do
	version_of "$c" >/dev/null # an unknown component fails here, before any build starts
done

# Components not cached yet are built in two lanes side by side, each in the order of
# all_components. The Go lane compiles, one build at a time: a Go build keeps every core busy while
# it compiles, and two would only share them. The network lane fetches Debian's components, after
# it has downloaded the modules of the Go lane's builds still to come (prefetch), so that the Go
# lane spends its time compiling rather than waiting on the network.
go_lane=() network_lane=()
for c in "${all_components[@]}"; do
	if [[ " ${requested[*]} " == *" $c "* ]] && ! cached "$c"; then
		case $c in
		kubernetes | kwok | golangci-lint | coredns | helm | versitygw | runc | etcd) go_lane+=("$c") ;;
		*) network_lane+=("$c") ;;
		esac
	fi
done
prefetch=("${go_lane[@]:1}")
lane() {
	local c
	for c; do
		build "$c"
	done
}
(lane "${go_lane[@]}") &
go_pid=$!
(
	for c in "${prefetch[@]}"; do
		prefetch_modules "$c"
	done
	lane "${network_lane[@]}"
) &
network_pid=$!
failed=()
wait "$go_pid" || failed+=(the Go lane)
wait "$network_pid" || failed+=(the network lane)
if ((${#failed[@]} > 0)); then
	log "${failed[*]} failed (the output above says why)"
	exit 1
fi
for c in "${requested[@]}"; do
	link "$c"
done
