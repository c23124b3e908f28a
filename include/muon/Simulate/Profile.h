//===- Profile.h - A machine, as the step simulator sees it -----*- C++ -*-===//
//
// The numbers the simulator (Simulate.h) needs about a cluster: how ranks
// map to nodes, each link class's latency (alpha) and per-rank bandwidth
// per direction (beta: the rank's injection limit), the matrix-multiply
// rate Newton-Schulz runs at and the memory bandwidth the elementwise
// steps run at. Profiles live in a "muon-profiles/1" JSON file of named
// profiles (share/muon/profiles.json; docs/performance.md), read with the
// strict JSON reader so that a bad file is one error naming the file and
// the JSON path.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SIMULATE_PROFILE_H
#define MUON_SIMULATE_PROFILE_H

#include "muon/Support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon::sim {

/// One class of link: a message costs `latency + bytes / bytesPerSecond`,
/// and a rank moves at most `bytesPerSecond` each way on the class at once.
struct Link {
  double latencySeconds = 0;
  double bytesPerSecond = 0;
};

struct Profile {
  std::string name;
  std::string description;
  /// Ranks per node, mapped as consecutive blocks (rank r on node
  /// r / ranksPerNode).
  int64_t ranksPerNode = 8;
  Link intraNode; // NVLink, or shared memory on one CPU node
  Link interNode; // InfiniBand
  /// Dense matrix-multiply rate per rank, per Newton-Schulz element type,
  /// already times `matmulEfficiency`. f16's is optional in a profile and
  /// defaults to bf16's (a GPU's tensor cores run both at one rate; a CPU
  /// profile gives its f32 rate, since f16 runs on f32 BLAS there).
  double f32FlopsPerSecond = 0, bf16FlopsPerSecond = 0, f16FlopsPerSecond = 0;
  /// The rate of Newton-Schulz's products in `nsDtype` ("f32", "bf16",
  /// "f16"; anything else f32's).
  double flopsPerSecond(const std::string &nsDtype) const {
    return nsDtype == "bf16"  ? bf16FlopsPerSecond
           : nsDtype == "f16" ? f16FlopsPerSecond
                              : f32FlopsPerSecond;
  }
  double matmulEfficiency = 1;
  /// What Newton-Schulz runs in when the plan says "auto" (the device's
  /// default: "bf16" on a GPU, "f32" on the CPU).
  std::string defaultNsDtype = "bf16";
  /// Bytes per second a rank's elementwise kernels and packing move (0:
  /// not modelled, they take no time).
  double memoryBytesPerSecond = 0;
  /// Ranks of a node that can compute at full rate at once (0: all). With
  /// more ranks on a node than this, each computes at slots/ranks of the
  /// rate: ranks oversubscribing a CPU's cores share them (MPI waits spin).
  int64_t computeSlotsPerNode = 0;
  /// Whether exchanges move while a rank computes ("background": NCCL, a
  /// GPU's copy engines) or only while it is inside a transport call
  /// ("in-calls": OpenMPI without a progress thread, which the executor
  /// calls between Newton-Schulz matrices and waits in at a done).
  bool backgroundProgress = true;
};

/// Reads profile `name` from the "muon-profiles/1" text of `file` into
/// `profile`. On a problem, InvalidArgument "FILE: PATH: message" (an
/// unknown name lists the profiles the file has).
Status parseProfile(const std::string &text, const std::string &file,
                    const std::string &name, Profile &profile);

/// The profile names in a file (for messages); empty if it does not parse.
std::vector<std::string> profileNames(const std::string &text);

} // namespace muon::sim

#endif // MUON_SIMULATE_PROFILE_H
