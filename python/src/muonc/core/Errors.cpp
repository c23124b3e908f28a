//===- Errors.cpp - muonc's exceptions, one class per status code -----------===//
//
// A failed muon::Status is raised as the muonc exception of its code
// (StatusError, Bindings.h), each class both a muonc.MuonError and the
// builtin exception torch raises for that kind of failure.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include <string>

namespace muonc {

namespace {

/// muonc's exceptions: MuonError, and per status code a class that is
/// both a MuonError and the builtin exception torch raises for that kind
/// of failure, so that code written for torch.optim catches them.
struct ErrorClass {
  muon::StatusCode code;
  const char *name;
  PyObject *builtin;
  const char *doc;
};

/// The class of each status code, by the code's number; 0 is MuonError.
PyObject *statusErrors[muon::kStatusCodeCount] = {};
PyObject *typeErrorClass = nullptr;

PyObject *newErrorClass(nb::module_ &m, const char *name, PyObject *bases,
                        const char *doc) {
  const std::string qualified = std::string("muonc.") + name;
  PyObject *cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases,
                                            nullptr);
  if (!cls)
    throw nb::python_error();
  m.attr(name) = nb::handle(cls); // the module holds a reference too
  return cls;                     // and this one lives as long as the process
}

} // namespace

void defineErrors(nb::module_ &m) {
  PyObject *base = newErrorClass(
      m, "MuonError", PyExc_Exception,
      "Every error muonc raises; each is also the builtin exception torch "
      "raises for its kind (ValueError for bad input, ...).");
  const ErrorClass classes[] = {
      {muon::StatusCode::InvalidArgument, "InvalidArgumentError",
       PyExc_ValueError, "Bad input: nothing was changed."},
      {muon::StatusCode::FailedPrecondition, "FailedPreconditionError",
       PyExc_RuntimeError,
       "A call not possible in the present state: nothing was changed."},
      {muon::StatusCode::NotFound, "NotFoundError", PyExc_LookupError,
       "A parameter, group or file that is not there."},
      {muon::StatusCode::DataLoss, "DataLossError", PyExc_RuntimeError,
       "Data that fails its checks (a damaged checkpoint or plan)."},
      {muon::StatusCode::ResourceExhausted, "ResourceExhaustedError",
       PyExc_RuntimeError, "The device has no room."},
      {muon::StatusCode::Unavailable, "UnavailableError", PyExc_RuntimeError,
       "A peer, a transport or a file outside the process failed."},
      {muon::StatusCode::Internal, "InternalError", PyExc_RuntimeError,
       "The device reported an error."},
      {muon::StatusCode::DeadlineExceeded, "DeadlineExceededError",
       PyExc_RuntimeError,
       "A peer did not answer within the timeout: it died or stalled "
       "(a RuntimeError, as torch.distributed's timeouts are)."},
      {muon::StatusCode::Cancelled, "CancelledError", PyExc_RuntimeError,
       "The work was stopped by its caller."},
      {muon::StatusCode::Unimplemented, "UnimplementedError",
       PyExc_NotImplementedError,
       "Something this build or this backend does not do."},
  };
  for (const ErrorClass &c : classes) {
    nb::tuple bases = nb::make_tuple(nb::handle(base), nb::handle(c.builtin));
    statusErrors[static_cast<int>(c.code)] =
        newErrorClass(m, c.name, bases.ptr(), c.doc);
  }
  nb::tuple typeBases =
      nb::make_tuple(nb::handle(base), nb::handle(PyExc_TypeError));
  typeErrorClass = newErrorClass(m, "MuonTypeError", typeBases.ptr(),
                                 "An argument of a type muonc does not take.");
  statusErrors[0] = base;
  nb::register_exception_translator([](const std::exception_ptr &p, void *) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError &e) {
      const int code = static_cast<int>(e.code);
      PyObject *cls =
          code > 0 && code < muon::kStatusCodeCount && statusErrors[code]
              ? statusErrors[code]
              : statusErrors[0];
      PyErr_SetString(cls, e.what());
    } catch (const ArgumentTypeError &e) {
      PyErr_SetString(typeErrorClass, e.what());
    }
  });
}

} // namespace muonc
