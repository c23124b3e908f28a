//===- Report.cpp - The run report (muon-report/1) ------------------------===//
#include "muon/Plan/Report.h"

#include <nlohmann/json.hpp>

namespace muon {
using Json = nlohmann::json;

static Json optional(const std::optional<double> &v) {
  return v ? Json(*v) : Json(nullptr);
}

Report planReport(const Plan &plan) {
  Report report;
  report.worldSize = plan.worldSize;
  report.wireDtype = plan.wireDtype;
  report.nsDtype = plan.ns.nsDtype;
  report.perRank = computeRankFigures(plan);
  return report;
}

std::string renderReport(const Report &report) {
  Json perRank = Json::array();
  int64_t totalFlops = 0, totalReceived = 0;
  for (size_t r = 0; r < report.perRank.size(); ++r) {
    const RankFigures &f = report.perRank[r];
    totalFlops += f.nsFlops;
    totalReceived += f.bytesReceived;
    std::optional<double> seconds;
    if (r < report.rankMedianSeconds.size())
      seconds = report.rankMedianSeconds[r];
    perRank.push_back({{"rank", static_cast<int64_t>(r)},
                       {"ns_flops", f.nsFlops},
                       {"bytes_sent", f.bytesSent},
                       {"bytes_received", f.bytesReceived},
                       {"owned", f.owned},
                       {"seconds", {{"median", optional(seconds)}}}});
    if (r < report.rankPeakWorkingBytes.size()) {
      perRank.back()["peak_working_bytes"] = report.rankPeakWorkingBytes[r];
      perRank.back()["working_bytes_bound"] = report.rankWorkingBytesBound[r];
    }
    if (report.simulation && r < report.simulation->perRank.size()) {
      const SimulationFigures::Rank &s = report.simulation->perRank[r];
      perRank.back()["simulated"] = {
          {"finish_seconds", s.finishSeconds},
          {"ns_seconds", s.nsSeconds},
          {"elementwise_seconds", s.elementwiseSeconds},
          {"wait_seconds", s.waitSeconds}};
    }
  }
  Json stepSeconds = nullptr;
  if (report.stepSeconds)
    stepSeconds = {{"median", report.stepSeconds->median},
                   {"min", report.stepSeconds->min},
                   {"max", report.stepSeconds->max}};
  Json root = {
      {"format", "muon-report/1"},
      {"world_size", report.worldSize},
      {"wire_dtype", report.wireDtype},
      {"steps", report.steps},
      {"verified", report.verified ? Json(*report.verified) : Json(nullptr)},
      {"max_abs_diff", optional(report.maxAbsDiff)},
      {"per_rank", std::move(perRank)},
      {"total",
       {{"ns_flops", totalFlops}, {"bytes_received", totalReceived}}},
      {"lower_bound",
       {{"bytes_received", report.lowerBoundBytesReceived},
        {"makespan_flops", report.lowerBoundMakespanFlops}}},
      {"step_seconds", std::move(stepSeconds)},
      {"micro_batches", report.microBatches},
      {"skipped_steps", report.skippedSteps},
      {"ns_dtype", report.nsDtype},
      {"backend", report.backend.empty() ? Json(nullptr)
                                         : Json(report.backend)},
      {"mpi_progress", report.mpiProgress.empty()
                           ? Json(nullptr)
                           : Json(report.mpiProgress)}};
  if (!report.nsDtypeReason.empty())
    root["ns_dtype_reason"] = report.nsDtypeReason;
  if (const auto &s = report.simulation)
    root["simulation"] = {
        {"profile", s->profile},
        {"profile_file", s->profileFile},
        {"ns_dtype", s->nsDtype},
        {"ranks_per_node", s->ranksPerNode},
        {"nodes", s->nodes},
        {"ns_flops_per_second", s->nsFlopsPerSecond},
        {"step_seconds", s->stepSeconds},
        {"bound_seconds", s->boundSeconds},
        {"compute_bound_seconds", s->computeBoundSeconds},
        {"comm_bound_seconds", s->commBoundSeconds},
        {"step_over_bound",
         s->boundSeconds > 0 ? Json(s->stepSeconds / s->boundSeconds)
                             : Json(nullptr)}};
  if (const auto &p = report.placement) {
    Json predicted = nullptr;
    if (!p->profile.empty())
      predicted = {{"profile", p->profile},
                   {"once", p->onceSeconds},
                   {"redundant", p->redundantSeconds},
                   {"chosen", p->chosenSeconds}};
    root["placement"] = {{"matrices_once", p->matricesOnce},
                         {"matrices_redundant", p->matricesRedundant},
                         {"matrices_replicated", p->matricesReplicated},
                         {"predicted_seconds", std::move(predicted)}};
  }
  return root.dump(2) + "\n";
}

} // namespace muon
