# IDunno build, test, demo and bench entry points. `make` installs what it needs from
# Debian's packages when it is missing, so a fresh machine needs nothing by hand.

GO        ?= go
CC        ?= gcc
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BUILD_PKGS := libdnnl-dev
DEMO_PKGS  := dataset-fashion-mnist
TEST_PKGS  := libonnx-testdata dataset-fashion-mnist python3-torch python3-torchvision python3-onnx chromium chromium-driver prometheus bash-completion zsh
KERNEL_SRC := $(wildcard kernel/*.c) $(wildcard kernel/*.h) $(wildcard kernel/include/*.h)
GO_SRC     := $(shell find . -name '*.go' -not -path './third_party/*') go.mod
FUZZTIME  ?= 10s
FUZZPKGS  ?= ./...

export CGO_ENABLED=0

.PHONY: all deps test-deps demo-deps ort-deps install-pkgs test fuzz demo bench clean vet

all: bin/idunno bin/libidunno_kernel.so

# deps installs the Debian packages the build needs, only when one is missing.
deps:
	@$(MAKE) -s install-pkgs PKGS="$(BUILD_PKGS)"

test-deps: deps
	@$(MAKE) -s install-pkgs PKGS="$(TEST_PKGS)"

demo-deps: deps
	@$(MAKE) -s install-pkgs PKGS="$(DEMO_PKGS)"

# install-pkgs installs the Debian packages in PKGS that are missing (apt-get update first).
install-pkgs:
	@missing=""; for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing"; \
	  $(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y $$missing; fi

# VERSION is what `idunno --version` prints: the commit, from git when there is one.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)

bin/idunno: $(GO_SRC)
	@mkdir -p bin
	$(GO) build $(if $(VERSION),-ldflags "-X main.version=$(VERSION)") -o $@ ./client

bin/libidunno_kernel.so: $(KERNEL_SRC) | deps
	@mkdir -p bin
	@if [ -n "$(wildcard kernel/*.c)" ]; then \
	  $(CC) -std=c11 -O3 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden -fopenmp \
	    -Ikernel/include -o $@ $(wildcard kernel/*.c) -ldnnl -lm; \
	else touch $@; fi

# ortprof runs ONNX Runtime (the library onnxruntime-node ships) with its per-node profile on,
# for benchmarks/ort/lineup.py; not part of `all`.
bin/ortprof: benchmarks/ort/ortprof.c
	@mkdir -p bin
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -o $@ $< -ldl

vet:
	$(GO) vet ./...

# test runs every test (unit, integration, conformance) and a short fuzz run of each decoder.
test: all test-deps vet
	IDUNNO_BIN=$(CURDIR)/bin/idunno IDUNNO_KERNEL_LIB=$(CURDIR)/bin/libidunno_kernel.so \
	  $(GO) test -count=1 -timeout 18m ./...
	$(MAKE) fuzz

# fuzz runs each fuzz target of FUZZPKGS briefly (FUZZTIME each). Go 1.26's fuzz coordinator can fail a
# target with a bare "context deadline exceeded" when -fuzztime runs out mid-execution
# (go.dev/issue/75804, fixed in Go 1.27); such a run wrote no failing input, so it is run
# once more, and only a second failure (or any run that wrote an input) fails the target.
fuzz: all
	@export IDUNNO_KERNEL_LIB=$(CURDIR)/bin/libidunno_kernel.so; \
	for pkg in $$($(GO) list $(FUZZPKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    for try in 1 2; do \
	      echo "fuzz $$pkg $$f"; \
	      out=$$($(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg 2>&1); rc=$$?; \
	      echo "$$out" | tail -n 3; \
	      if [ $$rc -eq 0 ]; then break; fi; \
	      if [ $$try -eq 1 ] && echo "$$out" | grep -q 'context deadline exceeded' && \
	         ! echo "$$out" | grep -q 'Failing input written'; then \
	        echo "fuzz $$f: Go's -fuzztime deadline race (go.dev/issue/75804), no failing input: once more"; \
	        continue; \
	      fi; \
	      echo "$$out"; exit 1; \
	    done; \
	  done; done

# demo runs the main job on a 10-node local cluster (demo/main.go says what it shows).
demo: all demo-deps
	$(GO) build -o bin/idunno-demo ./demo
	bin/idunno-demo --bin bin/idunno $(DEMO_FLAGS)

# ort-deps installs ONNX Runtime for node (benchmarks/ort's package-lock.json) for the
# side-by-side comparison; .npmrc there skips the package's CUDA download.
ort-deps:
	@$(MAKE) -s install-pkgs PKGS="nodejs npm"
	cd benchmarks/ort && npm ci --no-audit --no-fund

bench: all test-deps ort-deps
	./benchmarks/run.sh

clean:
	rm -rf bin benchmarks/out
