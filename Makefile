# The two commands of the README: `make demo` and `make check`.
# Everything builds into build/ with the tools in build/bin/.

LLVM_PREFIX ?= /usr/lib/llvm-22
BUILD_DIR   ?= build
BUILD_TYPE  ?= Release
JOBS        ?= $(shell nproc)

# Debian packages the build, the tests and the runtime need.
DEB_PACKAGES := cmake ninja-build g++ python3 libgtest-dev \
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools libzstd-dev \
  openmpi-bin libopenmpi-dev libopenblas-dev libdnnl-dev nlohmann-json3-dev \
  clang-22 libclang-rt-22-dev

# The fuzz build: our code with libFuzzer coverage, AddressSanitizer and
# UndefinedBehaviorSanitizer (clang from Debian).
FUZZ_DIR     ?= build-fuzz
FUZZ_SECONDS ?= 600
CHECK_FUZZ_SECONDS ?= 20
FUZZ_FLAGS   := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr \
  -fno-sanitize-recover=undefined -g -O1
FUZZ_TARGETS := muon-spec-fuzzer muon-ir-fuzzer muon-plan-fuzzer muon-plan-bin-fuzzer \
  muon-checkpoint-fuzzer

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build check check-lit check-unit demo clean fuzz fuzz-build install venv python check-python wheel stage

all: build

# Idempotent and quiet when everything is there.
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

$(BUILD_DIR)/build.ninja:
	cmake -G Ninja -S . -B $(BUILD_DIR) \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DMLIR_DIR=$(LLVM_PREFIX)/lib/cmake/mlir \
	  -DLLVM_DIR=$(LLVM_PREFIX)/lib/cmake/llvm \
	  -DLLVM_EXTERNAL_LIT=$(LLVM_PREFIX)/bin/lit

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Every test, then a short fuzz run (about a minute) of each target. The
# Python tests run against the wheel (make wheel), installed into a fresh
# virtualenv, and the fake GPU's against build/venv.
check: build fuzz-build python wheel
	@bash test/run-all.sh $(BUILD_DIR) $(FUZZ_DIR) $(CHECK_FUZZ_SECONDS) \
	  "$$(cat $(BUILD_DIR)/wheel/$(notdir $(PYTHON))/wheel.txt)"

# The Python package (python/, import name muonc) in $(VENV): the venv is
# cached (python/scripts/venv.sh: a no-op while its requirement files are
# unchanged); the extension builds against an install of this build in
# $(BUILD_DIR)/install (find_package(Muon)). docs/pytorch.md.
VENV ?= $(BUILD_DIR)/venv
venv:
	@bash python/scripts/venv.sh $(VENV)

# The build installed into $(BUILD_DIR)/install, which `python` and
# `wheel` build against (one target, so that `make -j check` copies once).
stage: build
	@cmake --install $(BUILD_DIR) --prefix $(abspath $(BUILD_DIR))/install >/dev/null

python: stage venv
	@$(VENV)/bin/python -m pip install -q --disable-pip-version-check \
	  --no-build-isolation --no-deps python/ \
	  -Cbuild-dir=$(abspath $(BUILD_DIR))/python \
	  -Ccmake.define.CMAKE_PREFIX_PATH=$(abspath $(BUILD_DIR))/install \
	  -Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=$(shell command -v ccache) \
	  -Cbuild.tool-args=-j$(JOBS)
	@# The extension over the fake GPU too (python/tests/test_fake_gpu.py),
	@# built in $(BUILD_DIR) with the venv's nanobind where CUDA is.
	@grep -q '^MUON_TEST_PYTHON:FILEPATH=$(abspath $(VENV))/bin/python$$' \
	  $(BUILD_DIR)/CMakeCache.txt || cmake -S . -B $(BUILD_DIR) \
	  -DMUON_TEST_PYTHON=$(abspath $(VENV))/bin/python >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The Python tests alone, against build/venv (test/run-all.sh runs them
# against the wheel).
check-python: python
	@$(VENV)/bin/python -m pytest -q python/tests

# muonc's wheel in $(DIST): dist/muonc-<VERSION>-cp311-cp311-manylinux_*.whl,
# self-contained (MLIR and LLVM static; OpenBLAS and oneDNN inside; MPI and
# cuBLAS loaded at run time): python/scripts/wheel.sh, docs/pytorch.md.
# PYTHON=python3.12 (a command, a path, or a version pyenv has) for another
# Python.
PYTHON ?= python3
DIST   ?= dist
wheel: stage
	@JOBS=$(JOBS) bash python/scripts/wheel.sh $(BUILD_DIR) $(DIST) $(PYTHON)

$(FUZZ_DIR)/build.ninja:
	cmake -G Ninja -S . -B $(FUZZ_DIR) \
	  -DCMAKE_BUILD_TYPE=Release -DMUON_FUZZ=ON -DMUON_ENABLE_CUDA=OFF \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  -DCMAKE_C_FLAGS="$(FUZZ_FLAGS)" -DCMAKE_CXX_FLAGS="$(FUZZ_FLAGS)" \
	  -DMLIR_DIR=$(LLVM_PREFIX)/lib/cmake/mlir \
	  -DLLVM_DIR=$(LLVM_PREFIX)/lib/cmake/llvm \
	  -DLLVM_EXTERNAL_LIT=$(LLVM_PREFIX)/bin/lit >/dev/null

fuzz-build: deps $(FUZZ_DIR)/build.ninja
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target $(FUZZ_TARGETS)

# FUZZ_SECONDS per target (default 600); crashes land in $(FUZZ_DIR)/artifacts.
fuzz: build fuzz-build
	@bash fuzz/run.sh $(BUILD_DIR) $(FUZZ_DIR) $(FUZZ_SECONDS)

demo: build
	@bash examples/demo.sh $(BUILD_DIR)

# The tools, headers, libraries and the CMake package (find_package(Muon))
# under PREFIX (default /usr/local).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR) $(DIST)
