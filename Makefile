# kobe: warm pools of Kubernetes clusters, leased instead of created.
#
#   make run    host control plane + CRDs + operator (local backend) + demo pool
#   make test   everything CI runs
#
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# The control-plane version is written once: k8s.io/kubernetes in
# hack/controlplane/kubernetes/go.mod (Go code reads internal/version).
K8S_VERSION     := $(shell hack/versions.sh kubernetes)
CONTROLPLANE_DIR ?= $(CURDIR)/bin/controlplane/$(K8S_VERSION)
TOOLS_DIR       := $(CURDIR)/bin/tools
CONTROLLER_GEN  := $(TOOLS_DIR)/controller-gen
GOLANGCI_LINT   := $(TOOLS_DIR)/golangci-lint
VERSION         ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS         := -X github.com/kunobi-ninja/kobe/internal/version.Version=$(VERSION)
GO_TEST_FLAGS   ?= -race -count=1
export CONTROLPLANE_DIR
# Tests find kubectl on PATH; the control-plane dir holds one when the machine has none.
export PATH := $(PATH):$(CONTROLPLANE_DIR)

.PHONY: all
all: build

##@ Build

.PHONY: build
build: ## Build kobe-operator, kobe and crdgen into bin/.
	go build -ldflags '$(LDFLAGS)' -o bin/kobe-operator ./cmd/kobe-operator
	go build -ldflags '$(LDFLAGS)' -o bin/kobe ./cmd/kobe
	go build -ldflags '$(LDFLAGS)' -o bin/crdgen ./cmd/crdgen

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler from Go modules (skips what exists).
	K8S_VERSION=$(K8S_VERSION) hack/build-controlplane.sh

$(CONTROLLER_GEN): hack/tools/go.mod
	cd hack/tools && go build -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): hack/tools/go.mod
	cd hack/tools && go build -o $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) ## Build the pinned developer tools.

##@ Generate

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRD YAML and internal/version's version constants.
	hack/gen-version.sh
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases

.PHONY: verify-generate
verify-generate: generate ## Fail when generated files are stale.
	@if ! git diff --quiet -- api config/crd internal/version; then \
		echo "generated files are stale: run 'make generate' and commit the result" >&2; \
		git --no-pager diff --stat -- api config/crd internal/version >&2; exit 1; fi
	@if [ -n "$$(git ls-files --others --exclude-standard -- api config/crd internal/version)" ]; then \
		echo "generated files are not committed: $$(git ls-files --others --exclude-standard -- api config/crd internal/version)" >&2; exit 1; fi

##@ Test

.PHONY: fmt-check
fmt-check: ## Fail when gofmt would change a file.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out" >&2; exit 1; fi

.PHONY: vet
vet:
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: test
test: verify-generate fmt-check vet lint controlplane build ## Everything CI runs: generated files, lint, unit, integration and e2e tests, short fuzzing.
	go test $(GO_TEST_FLAGS) -timeout 25m ./...
	$(MAKE) fuzz

FUZZTIME ?= 10s
.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME.
	@set -e; for spec in $$(hack/fuzz-targets.sh); do \
		pkg=$${spec%%:*}; target=$${spec##*:}; \
		echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
		go test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

##@ Benchmarks

.PHONY: bench
bench: controlplane ## Hand-out latency (request -> Bound kubeconfig) against a real API server; figures go to docs/benchmarks.md by hand.
	go test -run='^$$' -bench=BenchmarkHandout -benchtime=40x -count=1 -timeout 20m ./test/bench/

##@ Run

.PHONY: run
run: controlplane build ## Start a host control plane, install the CRDs, run the operator with the local backend and a demo pool.
	hack/run.sh

.PHONY: help
help:
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
