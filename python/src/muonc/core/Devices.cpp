//===- Devices.cpp - The devices an optimizer runs on -----------------------===//
//
// Devices opened by name through the runtime's registry, as a trainer does
// ("cpu", "cuda", "cuda:N" where the CUDA backend is built), and what
// muonc says about them: the CPU's Newton-Schulz, the GPUs there are, the
// order of a GPU's work with the caller's stream.
//
// Built against the CUDA backend (Muon::Cuda, MUONC_HAVE_CUDA), an optimizer
// may run on a GPU: cuBLAS is loaded then, from NVIDIA's wheels where pip
// put them, else the toolkit.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "muon/Runtime/Backends.h"
#include "muon/Runtime/BuiltBackends.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#if MUONC_HAVE_CUDA
#include "muon/Runtime/Cuda/CudaBackend.h"
#endif

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdlib>
#include <optional>

namespace muonc {

namespace {

/// ns_form's value ("auto", "standard", "gram"; "" for MUON_CPU_NS_FORM's,
/// else auto); an unknown one raises.
rt::cpu::NsForm nsFormOrDefault(const std::string &nsForm) {
  rt::cpu::NsForm form = rt::cpu::CpuDeviceOptions::nsFormFromEnvironment();
  if (!nsForm.empty() && !rt::cpu::parseNsForm(nsForm, form))
    throw StatusError(muon::StatusCode::InvalidArgument,
                      "ns_form '" + nsForm +
                          "': expected 'auto', 'standard' or 'gram'");
  return form;
}

/// Where pip put NVIDIA's CUDA wheels (torch's nvidia-cublas): searched
/// for cuBLAS before the system's (muonc._nvidia_library_dirs).
void addCudaLibraryDirectories() {
#if MUONC_HAVE_CUDA
  static bool added = false;
  if (added)
    return;
  nb::object dirs =
      nb::module_::import_("muonc").attr("_nvidia_library_dirs")();
  for (const std::string &dir : nb::cast<std::vector<std::string>>(dirs))
    rt::cuda::addLibraryDirectory(dir);
  added = true;
#endif
}

/// Whether the CUDA backend is built into this module (and so registered
/// with every backend it links: registerBuiltBackends).
bool cudaBuilt() {
#if MUONC_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

} // namespace

std::unique_ptr<rt::Device> openDevice(const std::string &name,
                                       const std::string &nsForm) {
  if (name != "cpu" && name != "cuda" && name.rfind("cuda:", 0) != 0)
    throw StatusError(muon::StatusCode::InvalidArgument,
                      "device '" + name +
                          "': expected 'cpu', 'cuda' or 'cuda:N'");
  if (name != "cpu" && !cudaBuilt())
    throw StatusError(muon::StatusCode::Unavailable,
                      "device '" + name +
                          "': muonc was built without the CUDA backend "
                          "(Muon::Cuda); GPU tensors need a build where CMake "
                          "found nvcc and cuBLAS");
  // Opened through the registry, as a trainer does. The GPU's ns_form
  // means the CPU's: "" is MUON_CPU_NS_FORM's on either device.
  rt::BackendOptions options;
  options["ns_form"] = rt::nsFormName(nsFormOrDefault(nsForm));
  if (name != "cpu")
    // cuBLAS is searched for first where pip put NVIDIA's wheels.
    addCudaLibraryDirectories();
  std::unique_ptr<rt::Device> device;
  check(rt::createDevice(name, options, device));
  return device;
}

void orderWithStream(rt::Device &device, uintptr_t stream, bool before) {
#if MUONC_HAVE_CUDA
  void *handle = reinterpret_cast<void *>(stream);
  check((before ? rt::cuda::waitForStream(device, handle)
                : rt::cuda::streamWaitsForDevice(device, handle))
            .withContext("stream: "));
#else
  (void)device;
  (void)stream;
  (void)before;
#endif
}

void defineDevices(nb::module_ &m) {
  using namespace nb::literals;
  // Every backend this module links, once, before any device is opened.
  rt::registerBuiltBackends();
  m.def(
      "cpu_newton_schulz",
      [](const std::string &nsDtype, const std::string &nsForm) {
        const rt::cpu::NsForm form = nsFormOrDefault(nsForm);
        rt::DType dtype;
        if (nsDtype == "auto")
          dtype = rt::cpu::CpuDevice().defaultNsDtype();
        else if (std::optional<rt::DType> d = rt::parseDType(nsDtype))
          dtype = *d;
        else
          throw StatusError(muon::StatusCode::InvalidArgument,
                            "ns_dtype '" + nsDtype +
                                "': expected 'auto', 'f32', 'bf16' or 'f16'");
        return rt::cpu::describeNewtonSchulz(dtype, form);
      },
      "ns_dtype"_a, "ns_form"_a = "auto",
      "What the CPU's Newton-Schulz in ns_dtype ('auto', 'f32', 'bf16', "
      "'f16') runs on with ns_form, as muon-run's summary says it: 'bf16 "
      "products, f32 accumulation (oneDNN ...); Gram form on wide and tall "
      "matrices', 'f32 products (OpenBLAS)', ...");

  m.def(
      "cpu_auto_ns_dtype",
      [] {
        const rt::cpu::CpuDevice device;
        return nb::make_tuple(
            std::string(rt::dtypeName(device.defaultNsDtype())),
            device.defaultNsDtypeReason());
      },
      "(ns_dtype, reason): what ns_dtype 'auto' is on this CPU and why, by "
      "the rates of the products each precision runs on, timed once per "
      "process (or MUON_CPU_PRODUCT_RATES): ('bf16', 'bf16: its products "
      "run at 2.14x f32's here (...)'), ('f32', 'f32: no bf16 products "
      "here (...)'). muonc.torch runs it with ns_dtype='auto'; its default "
      "on the CPU stays f32.");

  m.def("preferred_blas_kernels", &rt::cpu::preferredBlasKernels,
        "The OpenBLAS kernels this CPU's features call for ('SkylakeX', "
        "'Haswell', '' for none): the runtime's rule, which muonc._blas "
        "applies before OpenBLAS loads.");

  m.def("cuda_built", &cudaBuilt,
        "Whether this build has the CUDA backend (Optimizer(device='cuda:N')).");
  m.def(
      "cuda_device_count",
      [] {
#if MUONC_HAVE_CUDA
        muon::StatusOr<int> count = rt::cuda::deviceCount();
        if (count.ok())
          return nb::make_tuple(*count, std::string());
        return nb::make_tuple(0, count.status().message());
#else
        return nb::make_tuple(0, std::string("muonc was built without the "
                                             "CUDA backend"));
#endif
      },
      "(GPUs the CUDA backend sees, why none) -- (0, reason) without them.");
}

} // namespace muonc
