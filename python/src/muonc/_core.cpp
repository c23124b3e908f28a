//===- _core.cpp - muonc's extension: the compiler and runtime in Python -===//
//
// nanobind bindings over muon::compiler (compile a model into a plan in
// process) and muon::runtime::Optimizer (bind arrays zero-copy, step, state
// dicts, group settings). A communicator written in Python (PyCommunicator,
// core/TorchGlue.cpp) carries the exchanges, so the torch side runs them
// through the model's own process group. One translation unit per binding
// under core/ (Bindings.h lists them); this one makes the module.
//
// With a Python communicator the GIL is held for the whole of every call,
// step included: its callbacks run on the calling thread. With MPI
// (comm="mpi", for processes started by mpirun) a step releases it. MPI is
// not linked: comm="mpi" loads it (mpi_plugin.h).
//
// Built against the CUDA backend (Muon::Cuda, MUONC_HAVE_CUDA), an optimizer
// may run on a GPU (device="cuda:N"; cuBLAS is loaded then, from NVIDIA's
// wheels where pip put them, else the toolkit): arrays are device memory (torch
// CUDA tensors through DLPack), a step is ordered with the caller's stream,
// and exchanges go through NCCL under MPI, else host-staged through the
// Python communicator. MUONC_FAKE_GPU builds the same module as
// _core_fakegpu over the tests' stand-in for CUDA (unittests/FakeGpu), whose
// device memory is host memory.
//
//===----------------------------------------------------------------------===//
#include "core/Bindings.h"

namespace nb = nanobind;

namespace {

void defineModule(nb::module_ &m) {
  m.doc() = "muonc's extension: the distributed Muon compiler and runtime";
  m.attr("__version__") = MUONC_VERSION;
  // opt.state's tensors are views that keep their optimizer alive, and an
  // optimizer in a script's globals may outlive the module's teardown at
  // interpreter exit: nanobind would report those as leaks, which they are
  // not.
  nb::set_leak_warnings(false);
  muonc::defineErrors(m);
  muonc::definePlan(m);
  muonc::defineCompiler(m);
  muonc::defineTorchGlue(m);
  muonc::defineDevices(m);
  muonc::defineOptimizer(m);
}

} // namespace

#if MUONC_FAKE_GPU
void defineFakeGpuHooks(nb::module_ &m); // unittests/FakeGpu/PythonHooks.cpp
NB_MODULE(_core_fakegpu, m) {
  defineModule(m);
  defineFakeGpuHooks(m);
}
#else
NB_MODULE(_core, m) { defineModule(m); }
#endif
