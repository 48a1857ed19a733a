GO ?= go
PROTOS := $(wildcard api/raftps/v1/*.proto)

.PHONY: build test generate bench bench-scaling demo jepsen tools vet release
.PHONY: generate-python test-python demo-python

# PYTHON runs the Python client (python/) and its tests: Debian's
# interpreter with Debian's grpcio, protobuf, numpy, torch and pytest,
# installed when missing by scripts/install-python.sh (nothing comes from a
# Python package index).
PYTHON := /usr/bin/python3

# VERSION, REVISION, COMMIT_TIME and MODIFIED are stamped from git into
# every binary build and release make (internal/version; `raftps version`).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
COMMIT_TIME ?= $(shell git show -s --format=%cI HEAD 2>/dev/null)
MODIFIED ?= $(shell git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
VERSION_PKG := github.com/raftps/raftps/internal/version
STAMP := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) \
  -X $(VERSION_PKG).CommitTime=$(COMMIT_TIME) -X $(VERSION_PKG).Modified=$(MODIFIED)
RELEASE_PLATFORMS := linux/amd64 linux/arm64
LDFLAGS := -s -w $(STAMP)

# BIN is where build writes the raftps binary.
BIN ?= bin/raftps

build:
	$(GO) build -ldflags '$(STAMP)' -o $(BIN) ./cmd/raftps

# release builds static binaries (CGO_ENABLED=0: every dependency is pure
# Go) of raftps and raftps-bench for each of RELEASE_PLATFORMS into
# dist/<VERSION>/, with -trimpath and the version stamped in, and a
# SHA256SUMS file (check with: cd dist/<VERSION> && sha256sum -c SHA256SUMS).
release:
	@rm -rf dist/$(VERSION) && mkdir -p dist/$(VERSION)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  for cmd in raftps raftps-bench; do \
	    echo "build $$cmd $$os/$$arch $(VERSION)"; \
	    CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
	      -o dist/$(VERSION)/$$cmd-$(VERSION)-$$os-$$arch ./cmd/$$cmd; \
	  done; \
	done
	@cd dist/$(VERSION) && sha256sum raftps* > SHA256SUMS && cat SHA256SUMS

# tools installs what the tests need from Debian's packages (protoc is only
# needed by generate; iproute2 and nftables by the Jepsen suite).
tools:
	@./scripts/install-tools.sh

generate:
	@command -v protoc >/dev/null || ./scripts/install-tools.sh protoc
	protoc -I api \
	  --plugin=protoc-gen-go="$$($(GO) tool -n protoc-gen-go)" \
	  --plugin=protoc-gen-go-grpc="$$($(GO) tool -n protoc-gen-go-grpc)" \
	  --go_out=. --go_opt=module=github.com/raftps/raftps \
	  --go-grpc_out=. --go-grpc_opt=module=github.com/raftps/raftps \
	  $(patsubst api/%,%,$(PROTOS))
	$(MAKE) generate-python

# generate-python regenerates python/raftps/v1 (committed) with Debian's
# protoc and grpc_python_plugin, so the stubs match the Debian runtime.
generate-python:
	@./scripts/install-python.sh generate
	protoc -I api --python_out=python --grpc_python_out=python \
	  --plugin=protoc-gen-grpc_python="$$(command -v grpc_python_plugin)" \
	  $(patsubst api/%,%,$(PROTOS))

# test-python runs pytest against real `raftps node` processes (fixtures in
# python/tests/conftest.py); it fails, never skips, without the packages.
test-python: build
	@./scripts/install-python.sh
	cd python && RAFTPS_BIN=$(CURDIR)/bin/raftps $(PYTHON) -m pytest -q -p no:cacheprovider tests

# demo-python: examples/pytorch/fashion_mnist.py demo (3 nodes on mutual TLS, 2 PyTorch
# trainers in sync mode on 2 pservers, a trainer and the slot-0 node
# SIGKILLed, a trainer added, summary), then the same CNN and faults in
# elastic allreduce mode (--mode allreduce: 5 passes; the summary gives each
# survivor's re-form phases after the trainer kill).
demo-python: build
	@./scripts/install-python.sh
	$(PYTHON) examples/pytorch/fashion_mnist.py demo --bin bin/raftps
	$(PYTHON) examples/pytorch/fashion_mnist.py demo --mode allreduce --bin bin/raftps

vet:
	$(GO) vet ./...

# test also runs the test clock (raftstore/testclock_on.go), which only a
# build with -tags raftps_testclock has (the Jepsen suite builds its nodes so),
# and, without -race, the trainer's Fashion-MNIST accuracy tests
# (trainer/fashion_norace_test.go: minutes under the race detector).
test: build
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 40m ./...
	$(GO) test -race -count=1 -tags raftps_testclock -run TestStampWall ./raftstore
	$(GO) test -count=1 -run 'FashionMNIST' ./trainer/...
	$(MAKE) test-python

demo: build
	./bin/raftps demo

# bench runs raftps-bench (not part of the product binary) against
# bin/raftps; scripts/install-etcd.sh installs etcd for the etcd baseline.
bench: build
	$(GO) build -o bin/raftps-bench ./cmd/raftps-bench
	./scripts/install-etcd.sh
	./bin/raftps-bench --bin bin/raftps
	@./scripts/install-python.sh
	$(PYTHON) bench/python.py --bin bin/raftps

# bench-scaling runs only the scaling section of raftps-bench (curves of
# cost against trainers, slots, jobs and params, with their log-log slopes
# and an SVG per curve under bench/results/scaling-<time>/; about a minute).
bench-scaling:
	$(GO) build -o bin/raftps-bench ./cmd/raftps-bench
	./bin/raftps-bench --skip kv,etcdclient,failover,tls,training,gobench,profile

jepsen: build
	$(GO) test -count=1 -timeout 30m -v -tags jepsen_long -run TestJepsen ./integration/jepsen -jepsen.long
