//===- Bindings.h - What muonc's binding units share ------------------------===//
//
// muonc's extension (_core) is one translation unit per binding: the
// compiler (Compiler.cpp), the plan and its tables (Plan.cpp), the runtime's
// optimizer (Optimizer.cpp), the devices (Devices.cpp), the communicators
// muonc.torch hands in (TorchGlue.cpp), the exceptions (Errors.cpp) and the
// group dicts they all read and write (Groups.cpp); _core.cpp makes the
// module of them. This header is what they share: errors raised as Python
// exceptions, checked casts, the compiled plan's class, arrays.
//
//===----------------------------------------------------------------------===//
#ifndef MUONC_CORE_BINDINGS_H
#define MUONC_CORE_BINDINGS_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/Device.h"
#include "muon/Support/Status.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace muonc {

namespace nb = nanobind;
namespace rt = muon::runtime;

/// A failed Status, raised in Python as the muonc exception of its code
/// (errorClasses), with the text "invalid argument: ...".
struct StatusError : std::runtime_error {
  StatusError(muon::StatusCode code, const std::string &message)
      : std::runtime_error(std::string(muon::statusCodeName(code)) + ": " +
                           message),
        code(code) {}
  muon::StatusCode code;
};

inline void check(const muon::Status &status) {
  if (!status.ok())
    throw StatusError(status.code(), status.text());
}

/// A type that is not what the call takes, raised as muonc.MuonTypeError.
struct ArgumentTypeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T> T castNamed(nb::handle value, const std::string &what) {
  try {
    return nb::cast<T>(value);
  } catch (const std::exception &) {
    std::string shown;
    try {
      shown = nb::cast<std::string>(nb::repr(value));
    } catch (...) {
      shown = "a value";
    }
    if (shown.size() > 60)
      shown = shown.substr(0, 57) + "...";
    const char *expected = std::is_same_v<T, int64_t> ? "an integer in int64's range"
                           : std::is_floating_point_v<T> ? "a number"
                           : std::is_same_v<T, std::string> ? "a string"
                                                            : "a value of its kind";
    throw StatusError(muon::StatusCode::InvalidArgument,
                      what + ": " + shown + " is not " + expected);
  }
}

/// d[key] as a T (fallback where it is missing or None); a value that is
/// not one (a string for a number, an integer past int64) is the caller's
/// InvalidArgument naming the key, not nanobind's bare std::bad_cast.
template <typename T> T get(nb::dict d, const char *key, T fallback) {
  if (!d.contains(key) || d[key].is_none())
    return fallback;
  return castNamed<T>(d[key], key);
}

/// A compiled plan held in C++ (muon::Plan): what compile_model and
/// compile_spec return and Optimizer takes, so that a plan goes from the
/// compiler to the runtime as an object, with no text in between; json()
/// writes the plan file's text when one is wanted.
struct PyPlan {
  muon::Plan plan;
};

using Array = nb::ndarray<nb::device::cpu, nb::c_contig>;
/// An array on any device (a bound parameter of a GPU optimizer).
using AnyArray = nb::ndarray<nb::c_contig>;

template <typename A> rt::DType dtypeOf(const A &a, const std::string &what) {
  nb::dlpack::dtype t = a.dtype();
  if (t == nb::dtype<float>())
    return rt::DType::F32;
  if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) &&
      t.bits == 16)
    return rt::DType::BF16;
  if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) &&
      t.bits == 16)
    return rt::DType::F16;
  throw ArgumentTypeError(what + ": expected float32, bfloat16 or float16 "
                               "elements");
}

/// A plan group as a dict (Groups.cpp): its name, algorithm and every
/// setting of its algorithm by name, except settings that share a JSON key,
/// which go together as a tuple under it (AdamW's "betas", as torch names
/// them).
nb::dict groupDict(const muon::PlanGroup &g);
/// The inverse of groupDict; a setting the dict lacks keeps its default.
muon::PlanGroup planGroupOf(nb::dict d);
/// Sets g's settings from the dict's entries of the same names, as
/// groupDict writes them; the others keep their values. With `strict`, a
/// key that is no setting of g's algorithm is refused.
void applyGroupDict(nb::dict d, muon::PlanGroup &g, bool strict);

/// The runtime's Communicator over a Python object (TorchGlue.cpp).
std::unique_ptr<rt::Communicator> pythonCommunicator(nb::object object);
/// MPI_COMM_WORLD's duplicate, MPI loaded and initialized on first use
/// (TorchGlue.cpp).
std::unique_ptr<rt::Communicator> mpiWorldCommunicator();

/// Opens the device `name` ("cpu", "cuda", "cuda:N") through the backends'
/// registry with Newton-Schulz's form `nsForm` (Devices.cpp).
std::unique_ptr<rt::Device> openDevice(const std::string &name,
                                       const std::string &nsForm);
/// Orders the device with the caller's stream (a GPU's; Devices.cpp).
void orderWithStream(rt::Device &device, uintptr_t stream, bool before);

// The module's parts, each defined by its unit.
void defineErrors(nb::module_ &m);
void definePlan(nb::module_ &m);
void defineCompiler(nb::module_ &m);
void defineOptimizer(nb::module_ &m);
void defineDevices(nb::module_ &m);
void defineTorchGlue(nb::module_ &m);

} // namespace muonc

#endif // MUONC_CORE_BINDINGS_H
