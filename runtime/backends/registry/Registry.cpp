//===- Registry.cpp - Devices and transports by name ----------------------===//
#include "muon/Runtime/Backends.h"

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/HostStagedCommunicator.h"

#include <map>
#include <mutex>

namespace muon::runtime {
namespace {

/// "mpi": the base communicator under a handle the caller owns.
class BorrowedCommunicator final : public Communicator {
public:
  explicit BorrowedCommunicator(Communicator &base) : base(base) {}
  int64_t rank() const override { return base.rank(); }
  int64_t size() const override { return base.size(); }
  StatusOr<PendingExchange> start(const AllToAllV &x) override {
    return base.start(x);
  }
  Status wait(PendingExchange &p, double t) override { return base.wait(p, t); }
  void progress() override { base.progress(); }
  StatusOr<std::vector<uint64_t>> allGather(uint64_t v, double t) override {
    return base.allGather(v, t);
  }
  StatusOr<int64_t> allReduceMin(int64_t v, double t) override {
    return base.allReduceMin(v, t);
  }
  StatusOr<std::vector<uint64_t>> allGatherWords(const std::vector<uint64_t> &m,
                                                 double t) override {
    return base.allGatherWords(m, t);
  }
  StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &b, double t) override {
    return base.gatherToRoot(b, t);
  }
  StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &b, double t) override {
    return base.allGatherBytes(b, t);
  }
  [[noreturn]] void abort(int code) override { base.abort(code); }

private:
  Communicator &base;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, DeviceFactory> devices;
  std::map<std::string, TransportFactory> transports;

  Registry() {
    devices["cpu"] = [](const std::string &name, std::unique_ptr<Device> &out) {
      if (name != "cpu")
        return Status(StatusCode::NotFound,
                      "device '" + name + "': the CPU has no ordinals");
      out = std::make_unique<cpu::CpuDevice>();
      return okStatus();
    };
    transports["mpi"] = [](Communicator &base, Device &,
                           std::unique_ptr<Communicator> &out) {
      out = std::make_unique<BorrowedCommunicator>(base);
      return okStatus();
    };
    transports["host"] = [](Communicator &base, Device &device,
                            std::unique_ptr<Communicator> &out) {
      out = std::make_unique<HostStagedCommunicator>(base, device);
      return okStatus();
    };
  }
};

Registry &registry() {
  static Registry instance;
  return instance;
}

template <typename Map> std::string listOf(const Map &map) {
  std::string names;
  for (const auto &[name, factory] : map)
    names += (names.empty() ? "'" : ", '") + name + "'";
  return names;
}

} // namespace

void registerDeviceBackend(const std::string &backend, DeviceFactory factory) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.devices[backend] = std::move(factory);
}

void registerTransport(const std::string &name, TransportFactory factory) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.transports[name] = std::move(factory);
}

Status createDevice(const std::string &name, std::unique_ptr<Device> &out) {
  Registry &r = registry();
  DeviceFactory factory;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    // "cuda:1" is the backend "cuda"'s device 1.
    auto it = r.devices.find(name.substr(0, name.find(':')));
    if (it != r.devices.end())
      factory = it->second;
    known = listOf(r.devices);
  }
  if (!factory)
    return Status(StatusCode::NotFound,
                  "unknown device '" + name + "'; this runtime has " + known);
  return factory(name, out);
}

Status createCommunicator(const std::string &kind, Communicator &base,
                          Device &device, std::unique_ptr<Communicator> &out) {
  Registry &r = registry();
  TransportFactory factory;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.transports.find(kind);
    if (it != r.transports.end())
      factory = it->second;
    known = listOf(r.transports);
  }
  if (!factory)
    return Status(StatusCode::NotFound, "unknown transport '" + kind +
                                            "'; this runtime has " + known);
  return factory(base, device, out);
}

std::vector<std::string> deviceBackends() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &[name, factory] : r.devices)
    names.push_back(name);
  return names;
}

std::vector<std::string> transports() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &[name, factory] : r.transports)
    names.push_back(name);
  return names;
}

} // namespace muon::runtime
