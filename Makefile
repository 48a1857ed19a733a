GO ?= go
PROTOS := $(wildcard api/raftps/v1/*.proto)

.PHONY: build test generate bench demo jepsen tools vet

build:
	$(GO) build -o bin/raftps ./cmd/raftps

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

vet:
	$(GO) vet ./...

test: build
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 40m ./...

demo: build
	./bin/raftps demo

bench: build
	./bin/raftps bench

jepsen: build
	$(GO) test -count=1 -timeout 30m -v -run TestJepsen ./integration/jepsen -jepsen.long
