# The two commands of the README: `make demo` and `make check`.
# Everything builds into build/ with the tools in build/bin/.

LLVM_PREFIX ?= /usr/lib/llvm-22
BUILD_DIR   ?= build
BUILD_TYPE  ?= Release
JOBS        ?= $(shell nproc)

# Debian packages the build, the tests and the runtime need.
DEB_PACKAGES := cmake ninja-build g++ python3 libgtest-dev \
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools libzstd-dev \
  openmpi-bin libopenmpi-dev libopenblas-dev

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build check check-lit check-unit demo clean

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

check: build
	@bash test/run-all.sh $(BUILD_DIR)

demo: build
	@bash examples/demo.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
