# cache-operator. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
LOCALBIN := $(CURDIR)/bin
export KUBEBUILDER_ASSETS := $(LOCALBIN)
CONTROLLER_GEN := go tool controller-gen
# Every Go build here is static and -trimpath: the operator's image is built so (Dockerfile), and so
# are Kubernetes' releases, which the toolchain builds (hack/toolchain.sh). Go's build cache keys a
# package by these flags, so on a fresh machine a package compiled once serves the toolchain's
# Kubernetes, the tests, the linter and the images, rather than once for each set of flags.
export CGO_ENABLED := 0
export GOFLAGS := -trimpath $(GOFLAGS)

.PHONY: help
help: ## List the targets.
	@awk -F':.*## ' '/^[a-z0-9-]+:.*## /{printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: build ## Run the operator; with no KUBECONFIG, on a local cluster with real nodes that it starts itself.
	REAL_NODE_TOOLS="$(REAL_NODE_TOOLS)" hack/run.sh

# Test tiers. Unit tests need nothing but Go: a plain `go test ./...` runs them. The tiers that
# need the toolchain are selected by build tags: integration (a real etcd and kube-apiserver,
# CoreDNS, promtool, valkey-server) and e2e (the operator on local kwokctl clusters of real nodes).
# `make test` asks for every tool the tests run at once, so that a fresh machine builds them side by
# side (hack/toolchain.sh). It then compiles every package once (`go list -export`), since the
# linter and the tests would otherwise compile the same packages at the same time, and builds and
# runs the linter beside the tests (the e2e tests' first ones, which run alone, leave a core
# idle), printing its findings after theirs. The e2e
# package comes first on the command line because `go test` starts packages in that order: the
# other packages' tests and the linter then run beside its first tests, which mostly wait on
# nodes, rather than before it. The end-to-end tier took 27-28 min on two cores (2026-12-06), 36 min
# in a fresh clone's run with every cache empty (docs/development.md): its timeout leaves room for
# a slower machine inside CI's 90.
.PHONY: test
test: ## Run every test tier: unit, integration and end to end. CI runs this.
	hack/toolchain.sh etcd kubernetes kwok promtool helm versitygw cert-manager-crds $(REAL_NODE_TOOLS)
	$(MAKE) verify
	go list -tags integration,e2e -export -deps -test ./... >/dev/null
# The test binaries are linked without DWARF (-ldflags=-w), which nothing reads: the linker took 97
# CPU-seconds of a warm run, and -w takes 1 to 3 off each of some forty links (e2e.test 6.7 → 5.5).
	@lint_log=$$(mktemp); trap 'rm -f "$$lint_log"' EXIT; \
	$(MAKE) --no-print-directory lint >"$$lint_log" 2>&1 & lint=$$!; \
	tests=0; go test -tags integration,e2e -ldflags=-w ./test/e2e ./... -count=1 -timeout 60m || tests=$$?; \
	linted=0; wait $$lint || linted=$$?; \
	echo '--- make lint:'; cat "$$lint_log"; \
	exit $$(( tests || linted ))

# What the local cluster's real nodes run (test/harness/realnode) and their images are made of.
REAL_NODE_TOOLS := containerd runc cni-plugins nftables coredns valkey redis-exporter ca-certificates

.PHONY: test-unit
test-unit: ## Run the unit tests only (no toolchain needed).
	go test ./... -count=1

.PHONY: test-integration
test-integration: ## Run the unit and integration tests.
	hack/toolchain.sh etcd kubernetes coredns promtool valkey versitygw
	go test -tags integration ./... -count=1 -timeout 20m

.PHONY: test-e2e
test-e2e: ## Run the end-to-end tests.
	hack/toolchain.sh etcd kubernetes kwok helm versitygw cert-manager-crds $(REAL_NODE_TOOLS)
	go test -tags e2e ./test/e2e -count=1 -timeout 60m

.PHONY: manifests
manifests: ## Generate the CRD and the RBAC roles from the kubebuilder markers (also into the Helm chart).
	$(CONTROLLER_GEN) crd paths=./... output:crd:artifacts:config=config/crd/bases
	# What the controllers need in the namespaces they manage, and what the operator needs in any
	# case (cmd/main.go says which is which).
	$(CONTROLLER_GEN) rbac:roleName=cache-operator-manager paths="{./internal/controller/...,./internal/backupcontroller/...,./internal/schedulecontroller/...}" \
		output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=cache-operator-global paths="{./cmd/...,./internal/conversionwebhook/...}" \
		output:rbac:stdout >config/rbac/global_role.yaml
	hack/helm-manifests.sh

.PHONY: generate
generate: ## Generate the API types' DeepCopy methods.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: build
build: ## Build the operator binary into bin/.
	go build -o $(LOCALBIN)/cache-operator ./cmd

.PHONY: image
image: ## Build the operator's image, without a Docker daemon, as an OCI archive: bin/cache-operator-image.tar (docs/install.md).
	hack/toolchain.sh ca-certificates
	go run ./hack/image -o $(LOCALBIN)/cache-operator-image.tar operator

.PHONY: tools
tools: ## Build every tool the project runs (cached outside the checkout).
	hack/toolchain.sh

.PHONY: lint
lint: ## Run golangci-lint, and shellcheck on the shell scripts (the pods' and hack/'s).
	hack/toolchain.sh golangci-lint shellcheck
	$(LOCALBIN)/golangci-lint run ./...
	$(LOCALBIN)/shellcheck $$(find hack internal -name '*.sh')

.PHONY: verify
verify: ## Regenerate everything and fail if that changed anything, if code is unformatted, or if the binary links test code.
	@before=$$($(GENERATED_SUM)); \
	$(MAKE) -s manifests generate || exit 1; \
	go mod tidy || exit 1; \
	if [[ $$before != "$$($(GENERATED_SUM))" ]]; then \
		echo 'generated files were out of date; they are regenerated now: review and commit them' >&2; exit 1; fi
	@unformatted=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [[ -n $$unformatted ]]; then echo "not gofmt-ed: $$unformatted" >&2; exit 1; fi
	@harness=$$(go list -deps ./cmd/... | grep '/test/' || true); \
	if [[ -n $$harness ]]; then echo "the operator's binary links test code: $$harness" >&2; exit 1; fi
	@hack/check-shared-modules.sh

# A checksum over every generated file, names included, so that an added or removed one counts.
GENERATED_SUM := find api config/crd config/rbac charts/cache-operator/templates/crd.yaml charts/cache-operator/templates/crd-cachebackup.yaml charts/cache-operator/templates/crd-cachebackupschedule.yaml charts/cache-operator/templates/manager-role.yaml charts/cache-operator/templates/global-role.yaml go.mod go.sum -type f | sort | xargs sha256sum | sha256sum

.PHONY: local-cluster-down
local-cluster-down: ## Delete the local cluster that make run started.
	go run ./hack/localcluster down

.PHONY: local-s3
local-s3: ## Serve an S3 bucket that make run's cluster reaches, for trying backups (until Ctrl-C).
	hack/toolchain.sh versitygw
	go build -o bin/localcluster ./hack/localcluster
	bin/localcluster s3

.PHONY: bench
bench: ## Measure the operator at scale on a local cluster (BENCH_ARGS="-caches=10000"); writes docs/benchmark-N.*
	hack/toolchain.sh etcd kubernetes kwok
	go test -tags bench ./test/bench -run TestBenchmark -count=1 -timeout 4h -v -args $(BENCH_ARGS)

.PHONY: bench-placement
bench-placement: ## Measure the scheduler's cost of keeping each Cache's pods apart, per placement rule (BENCH_ARGS="-caches=1000"); writes docs/benchmark-placement.md
	hack/toolchain.sh etcd kubernetes kwok
	go test -tags bench ./test/bench -run TestPlacementSchedulerCost -count=1 -timeout 2h -v -args $(BENCH_ARGS)
