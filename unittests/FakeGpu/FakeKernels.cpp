//===- FakeKernels.cpp - The CUDA backend's kernels on the fake GPU -------===//
//
// Kernels.h for a build of the CUDA backend on the fake GPU: the same
// launches as Kernels.cu (KernelBodies.h: early outs, geometry, template
// instance per type, the memory each may touch), queued on the fake stream
// and run there on the host, block after block and thread after thread
// over the launch's grid. A cooperative kernel runs each stretch between
// two barriers for every thread of its block before the next, as
// __syncthreads() orders them; its shared memory starts as garbage
// (fakegpu::fillGarbage: NaNs), as a GPU's does. A geometry CUDA would refuse to launch is fatal,
// as on a GPU. Compiled like the runtime: no FMA contraction, so that the
// bodies round as on the GPU and as CpuDevice does.
//
//===----------------------------------------------------------------------===//
#include "FakeGpu.h"

#include "CudaSupport.h"
#include "KernelBodies.h"
#include "Kernels.h"

#include <cstring>
#include <string>
#include <vector>

namespace muon::runtime::cuda {
namespace {

using kernels::Dim3;
using kernels::Geometry;
using kernels::Span;
using kernels::ThreadIndex;

/// A cooperative body's view of its block on the host.
struct HostBlock {
  Dim3 block, grid, threads;
  Dim3 index() const { return block; }
  Dim3 count() const { return grid; }
  /// Every thread of the block runs `f`; then the next stretch starts.
  template <typename F> void eachThread(F &&f) const {
    ThreadIndex t;
    t.block = block;
    t.blockDim = threads;
    t.gridDim = grid;
    for (uint32_t z = 0; z < threads.z; ++z)
      for (uint32_t y = 0; y < threads.y; ++y)
        for (uint32_t x = 0; x < threads.x; ++x) {
          t.thread = Dim3{x, y, z};
          f(t);
        }
  }
};

/// Runs `kernel` over its grid on the host.
template <typename K> void runOnHost(const Geometry &g, const K &kernel) {
  for (uint32_t bz = 0; bz < g.grid.z; ++bz)
    for (uint32_t by = 0; by < g.grid.y; ++by)
      for (uint32_t bx = 0; bx < g.grid.x; ++bx) {
        const Dim3 block{bx, by, bz};
        if constexpr (kernels::isCooperative<K>()) {
          typename K::Shared shared;
          fakegpu::fillGarbage(&shared, sizeof(shared));
          HostBlock b{block, g.grid, g.block};
          kernel(b, shared);
        } else {
          HostBlock{block, g.grid, g.block}.eachThread(
              [&](const ThreadIndex &t) { kernel(t); });
        }
      }
}

/// Whether CUDA would launch this geometry (at most 1024 threads a block,
/// 65535 blocks along y and z, none empty).
bool launchable(const Geometry &g) {
  const uint64_t threads =
      uint64_t(g.block.x) * g.block.y * g.block.z;
  return threads >= 1 && threads <= 1024 && g.block.z <= 64 &&
         g.grid.x >= 1 && g.grid.x <= 0x7FFFFFFFu && g.grid.y >= 1 &&
         g.grid.y <= 65535 && g.grid.z >= 1 && g.grid.z <= 65535;
}

struct HostLaunch {
  cudaStream_t stream;

  template <typename K>
  void operator()(const Geometry &g, const K &kernel, const char *name,
                  std::initializer_list<Span> spans) {
    (*this)(g, kernel, name, spans.begin(), spans.size());
  }
  template <typename K>
  void operator()(const Geometry &g, const K &kernel, const char *name,
                  const Span *spans, size_t count) {
    const std::string what = std::string("launching ") + name;
    if (!launchable(g))
      check(cudaErrorInvalidConfiguration, what.c_str(), __FILE__, __LINE__);
    std::vector<std::pair<const void *, int64_t>> memory;
    for (size_t i = 0; i < count; ++i)
      memory.emplace_back(spans[i].data, spans[i].bytes);
    check(fakegpu::launchKernel(stream, name, std::move(memory),
                                [g, kernel] { runOnHost(g, kernel); }),
          what.c_str(), __FILE__, __LINE__);
  }
};

} // namespace

using Launcher = HostLaunch;
#include "KernelLaunches.inc"

Status kernelsLoadable() { return okStatus(); }

} // namespace muon::runtime::cuda
