//===- TorchGlue.cpp - The communicators muonc.torch hands in ---------------===//
//
// An optimizer's ranks talk through a Python object (PyCommunicator: any
// object with the methods below, muonc.torch's TorchCommunicator over the
// model's process group) or, for processes started by mpirun, through MPI,
// which is not linked: comm="mpi" loads it (mpi_plugin.h).
//
// With a Python communicator the GIL is held for the whole of every call,
// step included: its callbacks run on the calling thread. With MPI a step
// releases it.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "../mpi_plugin.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>

namespace muonc {

namespace {

using Bytes = nb::ndarray<uint8_t, nb::numpy, nb::ndim<1>, nb::c_contig>;

/// A view of `n` bytes at `data`, no copy, kept alive by nothing: valid
/// only during the call it is passed to (and, for an exchange, until its
/// wait returns).
/// (rv_policy::reference: an ndarray without an owner is otherwise copied
/// on its way to Python, and what Python writes into it lost.)
nb::object bytesView(const void *data, int64_t n) {
  size_t shape[1] = {static_cast<size_t>(n)};
  static uint8_t empty = 0;
  return nb::cast(
      Bytes(n ? const_cast<void *>(data) : &empty, 1, shape, nb::handle()),
      nb::rv_policy::reference);
}

std::vector<char> toBytes(nb::handle object) {
  nb::bytes b = nb::cast<nb::bytes>(object);
  return std::vector<char>(b.c_str(), b.c_str() + b.size());
}

/// The runtime's Communicator over a Python object with the methods
///   rank() -> int, size() -> int
///   all_to_all_v(send: uint8[], send_counts, send_offsets,
///                recv: uint8[], recv_counts, recv_offsets) -> None
///       (counts and offsets in bytes; the exchange completes in the call,
///       which the runtime's wait() makes)
///   start_all_to_all_v(same arguments) -> handle with wait() -> None
///       (optional: the exchange started in the runtime's start() and
///       finished by handle.wait() in its wait(), so that it moves while
///       the step computes; else all_to_all_v in wait())
///   all_gather_int(value: int) -> list[int]   (uint64 values)
///   all_gather_bytes(data: bytes) -> list[bytes]
///   all_gather_words(words: list[int]) -> list[int]   (optional: every
///       rank's uint64 words, rank after rank; else one all_gather_int
///       per word)
///   abort(code: int) -> None
/// An exception in a callback becomes the call's error.
class PyCommunicator final : public rt::Communicator {
public:
  explicit PyCommunicator(nb::object object) : object(std::move(object)) {
    theRank = nb::cast<int64_t>(this->object.attr("rank")());
    theSize = nb::cast<int64_t>(this->object.attr("size")());
    canStart = nb::hasattr(this->object, "start_all_to_all_v");
  }
  int64_t rank() const override { return theRank; }
  int64_t size() const override { return theSize; }

  muon::StatusOr<rt::PendingExchange> start(const rt::AllToAllV &x) override {
    // Started here when the object can (every rank starts its exchanges in
    // the plan's order, so the process group's collectives match across
    // ranks); else recorded here and run in wait(), which every rank also
    // reaches in the plan's order.
    Call call;
    call.send = x.sendBuffer;
    call.recv = x.recvBuffer;
    call.sc.resize(theSize);
    call.so.resize(theSize);
    call.rc.resize(theSize);
    call.ro.resize(theSize);
    for (int64_t p = 0; p < theSize; ++p) {
      call.sc[p] = x.sendCounts[p] * x.elementBytes;
      call.so[p] = x.sendOffsets[p] * x.elementBytes;
      call.rc[p] = x.recvCounts[p] * x.elementBytes;
      call.ro[p] = x.recvOffsets[p] * x.elementBytes;
      if (call.sc[p])
        call.sendEnd = std::max(call.sendEnd, call.so[p] + call.sc[p]);
      if (call.rc[p])
        call.recvEnd = std::max(call.recvEnd, call.ro[p] + call.rc[p]);
    }
    if (canStart) {
      MUON_RETURN_IF_ERROR(this->call([&] {
        call.handle = object.attr("start_all_to_all_v")(
            bytesView(call.send, call.sendEnd), call.sc, call.so,
            bytesView(call.recv, call.recvEnd), call.rc, call.ro);
      }));
    }
    rt::PendingExchange pending{nextId++};
    calls[pending.id] = std::move(call);
    return pending;
  }
  muon::Status wait(rt::PendingExchange &pending, double) override {
    auto it = calls.find(pending.id);
    if (it == calls.end())
      return muon::failedPrecondition(
          "python communicator: wait for an exchange never started");
    Call c = std::move(it->second);
    calls.erase(it);
    pending.id = -1;
    return call([&] {
      if (c.handle.is_valid())
        c.handle.attr("wait")();
      else
        object.attr("all_to_all_v")(bytesView(c.send, c.sendEnd), c.sc,
                                    c.so, bytesView(c.recv, c.recvEnd), c.rc,
                                    c.ro);
    });
  }
  void progress() override {}

  muon::StatusOr<std::vector<uint64_t>> allGather(uint64_t value,
                                                  double) override {
    std::vector<uint64_t> values;
    MUON_RETURN_IF_ERROR(call([&] {
      values = nb::cast<std::vector<uint64_t>>(
          object.attr("all_gather_int")(value));
    }));
    return values;
  }
  muon::StatusOr<std::vector<uint64_t>>
  allGatherWords(const std::vector<uint64_t> &mine, double timeout) override {
    // A communicator of the user's own may lack it: one all_gather_int
    // per word then.
    if (!nb::hasattr(object, "all_gather_words"))
      return Communicator::allGatherWords(mine, timeout);
    std::vector<uint64_t> all;
    MUON_RETURN_IF_ERROR(call([&] {
      all = nb::cast<std::vector<uint64_t>>(
          object.attr("all_gather_words")(mine));
      if (all.size() != mine.size() * static_cast<size_t>(theSize))
        throw std::runtime_error(
            "all_gather_words returned " + std::to_string(all.size()) +
            " words for " + std::to_string(theSize) + " ranks of " +
            std::to_string(mine.size()));
    }));
    return all;
  }
  muon::StatusOr<int64_t> allReduceMin(int64_t value, double timeout) override {
    // Two's complement keeps the order of signed values after the flip of
    // the sign bit.
    const uint64_t flip = uint64_t(1) << 63;
    MUON_ASSIGN_OR_RETURN(
        std::vector<uint64_t> all,
        allGather(static_cast<uint64_t>(value) ^ flip, timeout));
    uint64_t least = all.empty() ? static_cast<uint64_t>(value) ^ flip : all[0];
    for (uint64_t v : all)
      least = std::min(least, v);
    return static_cast<int64_t>(least ^ flip);
  }
  muon::StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &bytes, double timeout) override {
    MUON_ASSIGN_OR_RETURN(std::vector<std::vector<char>> all,
                          allGatherBytes(bytes, timeout));
    if (theRank != 0)
      all.clear();
    return all;
  }
  muon::StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &bytes, double) override {
    std::vector<std::vector<char>> all;
    MUON_RETURN_IF_ERROR(call([&] {
      nb::object result = object.attr("all_gather_bytes")(
          nb::bytes(bytes.data(), bytes.size()));
      for (nb::handle item : result)
        all.push_back(toBytes(item));
      if (static_cast<int64_t>(all.size()) != theSize)
        throw std::runtime_error("all_gather_bytes returned " +
                                 std::to_string(all.size()) + " items for " +
                                 std::to_string(theSize) + " ranks");
    }));
    return all;
  }
  [[noreturn]] void abort(int exitCode) override {
    try {
      object.attr("abort")(exitCode);
    } catch (...) {
    }
    std::_Exit(exitCode);
  }

private:
  /// Runs a callback: a Python TimeoutError is the peer's deadline, any
  /// other exception the transport's failure.
  template <typename F> muon::Status call(F &&f) {
    try {
      f();
      return muon::okStatus();
    } catch (nb::python_error &e) {
      // "TimeoutError: <its message>", not what() with the whole traceback.
      std::string text;
      try {
        text = nb::cast<std::string>(nb::handle(e.type()).attr("__name__")) +
               ": " + nb::cast<std::string>(nb::str(e.value()));
      } catch (...) {
        text = e.what();
      }
      return muon::Status(e.matches(PyExc_TimeoutError)
                              ? muon::StatusCode::DeadlineExceeded
                              : muon::StatusCode::Unavailable,
                          "python communicator: " + text);
    } catch (std::exception &e) {
      return muon::unavailable(std::string("python communicator: ") + e.what());
    }
  }

  struct Call {
    const void *send = nullptr;
    void *recv = nullptr;
    std::vector<int64_t> sc, so, rc, ro;
    int64_t sendEnd = 0, recvEnd = 0;
    nb::object handle; // start_all_to_all_v's, when the object has it
  };
  nb::object object;
  bool canStart = false;
  int64_t theRank = 0, theSize = 1, nextId = 0;
  std::map<int64_t, Call> calls;
};

/// MPI, loaded on first use (mpi_plugin.h): the MPI library with
/// RTLD_GLOBAL (the plugin's MPI symbols bind to it), then the plugin
/// beside this module. Unavailable, naming the library, where MPI is
/// missing. Called with the GIL held.
const muonc::MpiPlugin *mpiPlugin = nullptr;

const muonc::MpiPlugin &loadMpi() {
  if (mpiPlugin)
    return *mpiPlugin;
  const char *chosen = std::getenv("MUON_MPI_LIBRARY");
  const bool overridden = chosen && *chosen;
  const std::string library = overridden ? chosen : MUONC_MPI_LIBRARY;
  if (!dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char *why = dlerror();
    throw StatusError(muon::StatusCode::Unavailable,
                      "comm=\"mpi\" needs MPI: cannot load " + library +
                          (overridden
                               ? " (MUON_MPI_LIBRARY)"
                               : " (Open MPI's library: install Open MPI, e.g. "
                                 "`apt install openmpi-bin`, or point "
                                 "MUON_MPI_LIBRARY at a compatible libmpi)") +
                          ": " + (why ? why : "unknown dlopen error"));
  }
  Dl_info self;
  std::string plugin = "libmuonc_mpi.so";
  if (dladdr(reinterpret_cast<void *>(&loadMpi), &self) && self.dli_fname) {
    std::string here = self.dli_fname;
    plugin = here.substr(0, here.rfind('/') + 1) + plugin;
  }
  void *handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  using Entry = const muonc::MpiPlugin *(*)();
  Entry entry = handle ? reinterpret_cast<Entry>(
                             dlsym(handle, MUONC_MPI_PLUGIN_ENTRY))
                       : nullptr;
  if (!entry) {
    const char *why = dlerror();
    throw StatusError(muon::StatusCode::Unavailable,
                      "comm=\"mpi\": cannot load muonc's MPI plugin " + plugin +
                          " over " + library + ": " +
                          (why ? why : "unknown dlopen error"));
  }
  mpiPlugin = entry();
  return *mpiPlugin;
}

/// MPI for processes started by mpirun: initialized on first use (unless
/// the program did, e.g. mpi4py), finalized by mpiFinalize at interpreter
/// exit (muonc's atexit hook) when initialized here.
const muonc::MpiPlugin &ensureMpi() {
  const muonc::MpiPlugin &mpi = loadMpi();
  check(mpi.initialize());
  return mpi;
}

nb::tuple mpiWorld() {
  int rank = 0, size = 0;
  ensureMpi().world(rank, size);
  return nb::make_tuple(rank, size);
}

void mpiFinalize() {
  if (mpiPlugin) // never loaded: nothing to finalize
    mpiPlugin->finalize();
}

} // namespace

std::unique_ptr<rt::Communicator> pythonCommunicator(nb::object object) {
  return std::make_unique<PyCommunicator>(std::move(object));
}

std::unique_ptr<rt::Communicator> mpiWorldCommunicator() {
  return ensureMpi().worldCommunicator();
}

void defineTorchGlue(nb::module_ &m) {
  using namespace nb::literals;
  m.def("mpi_world", &mpiWorld,
        "(rank, size) of MPI_COMM_WORLD, initializing MPI if needed.");
  m.def("mpi_finalize", &mpiFinalize,
        "Finalizes MPI if muonc initialized it (at interpreter exit).");
}

} // namespace muonc
