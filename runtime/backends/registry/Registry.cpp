//===- Registry.cpp - Devices and transports by name ----------------------===//
#include "muon/Runtime/Backends.h"

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/HostStagedCommunicator.h"
#include "muon/Runtime/LayeredCommunicator.h"

#include <cstdlib>
#include <map>
#include <mutex>

namespace muon::runtime {
namespace {

/// "mpi": the base communicator under a handle the caller owns.
class BorrowedCommunicator final : public LayeredCommunicator {
public:
  explicit BorrowedCommunicator(Communicator &base)
      : LayeredCommunicator(base) {}
  StatusOr<PendingExchange> start(const AllToAllV &x) override {
    return inner.start(x);
  }
  Status wait(PendingExchange &p, double t) override {
    return inner.wait(p, t);
  }
  void progress() override { inner.progress(); }
};

/// The CPU device, with its options (Backends.h).
Status openCpu(const std::string &name, const BackendOptions &options,
               std::unique_ptr<Device> &out) {
  if (name != "cpu")
    return Status(StatusCode::NotFound,
                  "device '" + name + "': the CPU has no ordinals");
  MUON_RETURN_IF_ERROR(
      checkOptionKeys(name, options, {"ns_form", "blas_threads"}));
  cpu::CpuDeviceOptions cpuOptions;
  MUON_RETURN_IF_ERROR(nsFormOption(name, options, cpuOptions.nsForm));
  if (auto it = options.find("blas_threads"); it != options.end()) {
    char *end = nullptr;
    const long threads = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || threads < 1 || threads > 4096)
      return invalidArgument("device '" + name + "': blas_threads '" +
                             it->second + "': expected a count in [1, 4096]");
    cpu::setBlasThreads(static_cast<int>(threads));
  }
  out = std::make_unique<cpu::CpuDevice>(cpuOptions);
  return okStatus();
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, DeviceFactory> devices;
  std::map<std::string, TransportFactory> transports;
  std::map<std::string, ProcessGroupFactory> groups;

  Registry() {
    devices["cpu"] = openCpu;
    groups["single"] = [](const BackendOptions &options,
                          std::unique_ptr<Communicator> &out) {
      MUON_RETURN_IF_ERROR(
          checkOptionKeys("single", options, {}, "process group"));
      out = std::make_unique<SingleRankCommunicator>();
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

/// Registers `factory` as `name` in one of the registry's maps.
template <typename Map>
void add(Map Registry::*map, const std::string &name,
         typename Map::mapped_type factory) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  (r.*map)[name] = std::move(factory);
}

/// The names registered in one of the registry's maps, sorted.
template <typename Map>
std::vector<std::string> namesOf(Map Registry::*map) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &[name, factory] : r.*map)
    names.push_back(name);
  return names;
}

/// The factory registered as `name` in one of the registry's maps, or an
/// empty one with `known` listing the names there are.
template <typename Map>
typename Map::mapped_type factoryOf(Map Registry::*map,
                                    const std::string &name,
                                    std::string &known) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  known = listOf(r.*map);
  auto it = (r.*map).find(name);
  return it != (r.*map).end() ? it->second : typename Map::mapped_type();
}

} // namespace

void registerDeviceBackend(const std::string &backend, DeviceFactory factory) {
  add(&Registry::devices, backend, std::move(factory));
}

void registerTransport(const std::string &name, TransportFactory factory) {
  add(&Registry::transports, name, std::move(factory));
}

void registerProcessGroup(const std::string &name,
                          ProcessGroupFactory factory) {
  add(&Registry::groups, name, std::move(factory));
}

Status createDevice(const std::string &name, std::unique_ptr<Device> &out) {
  return createDevice(name, BackendOptions(), out);
}

Status checkOptionKeys(const std::string &name, const BackendOptions &options,
                       std::initializer_list<const char *> known,
                       const char *kind) {
  for (const auto &[key, value] : options) {
    bool found = false;
    for (const char *k : known)
      found = found || key == k;
    if (found)
      continue;
    std::string names;
    for (const char *k : known)
      names += std::string(names.empty() ? "'" : ", '") + k + "'";
    return invalidArgument(
        std::string(kind) + " '" + name + "' has no option '" + key +
        "'; its options: " + (names.empty() ? "none" : names));
  }
  return okStatus();
}

Status nsFormOption(const std::string &name, const BackendOptions &options,
                    NsForm &form) {
  auto it = options.find("ns_form");
  if (it != options.end() && !parseNsForm(it->second, form))
    return invalidArgument("device '" + name + "': ns_form '" + it->second +
                           "': expected 'auto', 'standard' or 'gram'");
  return okStatus();
}

Status createDevice(const std::string &name, const BackendOptions &options,
                    std::unique_ptr<Device> &out) {
  std::string known;
  // "cuda:1" is the backend "cuda"'s device 1.
  DeviceFactory factory =
      factoryOf(&Registry::devices, name.substr(0, name.find(':')), known);
  if (!factory)
    return Status(StatusCode::NotFound,
                  "unknown device '" + name + "'; this runtime has " + known);
  return factory(name, options, out);
}

Status createCommunicator(const std::string &kind, Communicator &base,
                          Device &device, std::unique_ptr<Communicator> &out) {
  std::string known;
  TransportFactory factory = factoryOf(&Registry::transports, kind, known);
  if (!factory)
    return Status(StatusCode::NotFound, "unknown transport '" + kind +
                                            "'; this runtime has " + known);
  return factory(base, device, out);
}

Status createProcessGroup(const std::string &name,
                          const BackendOptions &options,
                          std::unique_ptr<Communicator> &out) {
  std::string known;
  ProcessGroupFactory factory = factoryOf(&Registry::groups, name, known);
  if (!factory)
    return Status(StatusCode::NotFound, "unknown process group '" + name +
                                            "'; this runtime has " + known);
  return factory(options, out);
}

std::vector<std::string> deviceBackends() {
  return namesOf(&Registry::devices);
}

std::vector<std::string> transports() {
  return namesOf(&Registry::transports);
}

std::vector<std::string> processGroups() {
  return namesOf(&Registry::groups);
}

} // namespace muon::runtime
