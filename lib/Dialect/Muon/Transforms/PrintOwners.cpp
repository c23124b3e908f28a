//===- PrintOwners.cpp - Print owners and report figures ------------------===//
#include "muon/Dialect/Muon/Analysis/Figures.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"
#include "muon/Support/Replicas.h"

#include "llvm/Support/raw_ostream.h"

namespace mlir::muon {
#define GEN_PASS_DEF_PRINTOWNERS
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"
} // namespace mlir::muon

using namespace mlir;
using namespace mlir::muon;

namespace {
struct PrintOwners : mlir::muon::impl::PrintOwnersBase<PrintOwners> {
  using Base::Base;
  void runOnOperation() override {
    ModelOp model = getOperation();
    int64_t wireBytes;
    if (wireDtype == "f32")
      wireBytes = 4;
    else if (wireDtype == "bf16")
      wireBytes = 2;
    else {
      model.emitError() << "unknown wire dtype '" << wireDtype
                        << "'; expected f32 or bf16";
      return signalPassFailure();
    }
    FailureOr<ModelLayout> layout = computeModelLayout(model);
    if (failed(layout))
      return signalPassFailure();
    std::vector<MuonMatrix> matrices = collectMuonMatrices(model, *layout);
    std::vector<bool> redundant;
    std::vector<int64_t> owners =
        ownersFromAssignments(model, *layout, matrices, &redundant);
    int64_t world = layout->mesh.numDevices();
    std::vector<int64_t> flops(world, 0);
    std::vector<std::vector<std::string>> owned(world);
    int64_t unowned = 0, total = 0, redundantCount = 0;
    for (size_t k = 0; k < matrices.size(); ++k) {
      total += matrices[k].nsFlops;
      if (owners[k] < 0) {
        ++unowned;
        continue;
      }
      if (redundant[k]) {
        // Once per replica: every replica's owner runs it.
        ++redundantCount;
        for (int64_t o : ::muon::replicaOwners(
                 layout->mesh, layout->layouts[matrices[k].param],
                 owners[k])) {
          flops[o] += matrices[k].nsFlops;
          owned[o].push_back(matrices[k].label + " (redundant)");
        }
        continue;
      }
      flops[owners[k]] += matrices[k].nsFlops;
      owned[owners[k]].push_back(matrices[k].label);
    }
    LowerBounds bounds = computeLowerBounds(*layout, matrices, wireBytes);
    int64_t busiest = 0;
    llvm::raw_ostream &os = llvm::outs();
    os << "model @" << model.getSymName() << ": " << world << " ranks, "
       << matrices.size() << " Muon matrices, wire_dtype " << wireDtype << "\n";
    for (int64_t r = 0; r < world; ++r) {
      busiest = std::max(busiest, flops[r]);
      os << "rank " << r << ": ns_flops " << flops[r] << " owned "
         << owned[r].size() << " [";
      llvm::interleaveComma(owned[r], os);
      os << "]\n";
    }
    if (unowned && model.getBodyBlock().getOps<DistributedOp>().empty())
      os << "unowned matrices: " << unowned
         << " (no distributed config: every rank orthogonalizes what it "
            "holds)\n";
    else if (unowned)
      os << "unowned matrices: " << unowned
         << " (run muon-assign-owners first)\n";
    // Only with redundant matrices, so that other printouts keep their text.
    if (redundantCount)
      os << "placement: " << matrices.size() - unowned - redundantCount
         << " once, " << redundantCount
         << " redundant (once per replica; their flops count on every "
            "replica's owner)\n";
    os << "total.ns_flops " << total << "\n";
    os << "busiest_rank.ns_flops " << busiest << "\n";
    os << "lower_bound.makespan_flops " << bounds.makespanFlops << "\n";
    os << "lower_bound.bytes_received " << bounds.bytesReceived << "\n";
    markAllAnalysesPreserved();
  }
};
} // namespace
