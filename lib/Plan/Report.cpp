//===- Report.cpp - The run report (muon-report/1) ------------------------===//
#include "muon/Plan/Report.h"

#include "muon/Plan/Bounds.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace muon {
namespace json = llvm::json;

static json::Value optional(const std::optional<double> &v) {
  return v ? json::Value(*v) : json::Value(nullptr);
}

Report planReport(const Plan &plan) {
  LowerBounds bounds = planLowerBounds(plan);
  Report report;
  report.worldSize = plan.worldSize;
  report.wireDtype = plan.wireDtype;
  report.perRank = computeRankFigures(plan);
  report.lowerBoundBytesReceived = bounds.bytesReceived;
  report.lowerBoundMakespanFlops = bounds.makespanFlops;
  return report;
}

std::string renderReport(const Report &report) {
  json::Array perRank;
  int64_t totalFlops = 0, totalReceived = 0;
  for (size_t r = 0; r < report.perRank.size(); ++r) {
    const RankFigures &f = report.perRank[r];
    totalFlops += f.nsFlops;
    totalReceived += f.bytesReceived;
    json::Array owned;
    for (const std::string &name : f.owned)
      owned.push_back(name);
    std::optional<double> seconds;
    if (r < report.rankMedianSeconds.size())
      seconds = report.rankMedianSeconds[r];
    perRank.push_back(
        json::Object{{"rank", static_cast<int64_t>(r)},
                     {"ns_flops", f.nsFlops},
                     {"bytes_sent", f.bytesSent},
                     {"bytes_received", f.bytesReceived},
                     {"owned", std::move(owned)},
                     {"seconds", json::Object{{"median", optional(seconds)}}}});
  }
  json::Value stepSeconds(nullptr);
  if (report.stepSeconds)
    stepSeconds = json::Object{{"median", report.stepSeconds->median},
                               {"min", report.stepSeconds->min},
                               {"max", report.stepSeconds->max}};
  json::Array skipped;
  for (int64_t s : report.skippedSteps)
    skipped.push_back(s);
  json::Object root{
      {"format", "muon-report/1"},
      {"world_size", report.worldSize},
      {"wire_dtype", report.wireDtype},
      {"steps", report.steps},
      {"verified",
       report.verified ? json::Value(*report.verified) : json::Value(nullptr)},
      {"max_abs_diff", optional(report.maxAbsDiff)},
      {"per_rank", std::move(perRank)},
      {"total", json::Object{{"ns_flops", totalFlops},
                             {"bytes_received", totalReceived}}},
      {"lower_bound",
       json::Object{{"bytes_received", report.lowerBoundBytesReceived},
                    {"makespan_flops", report.lowerBoundMakespanFlops}}},
      {"step_seconds", std::move(stepSeconds)},
      {"micro_batches", report.microBatches},
      {"skipped_steps", std::move(skipped)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", json::Value(std::move(root))) << "\n";
  return text;
}

bool writeFileAtomically(const std::string &path, const std::string &text,
                         std::string &error) {
  return writeFilesAtomically({{path, text}}, error);
}

bool writeFilesAtomically(
    const std::vector<std::pair<std::string, std::string>> &files,
    std::string &error) {
  std::vector<std::string> staged;
  auto discard = [&] {
    for (const std::string &tmp : staged)
      std::remove(tmp.c_str());
  };
  for (size_t i = 0; i < files.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (files[i].first == files[j].first) {
        error = "two outputs name the same file '" + files[i].first + "'";
        return false;
      }
  for (const auto &[path, text] : files) {
    std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                      std::to_string(staged.size());
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (out) {
      staged.push_back(tmp);
      out << text;
      out.flush();
    }
    if (!out) {
      error = "cannot write '" + tmp + "': " + std::strerror(errno);
      discard();
      return false;
    }
  }
  for (size_t i = 0; i < files.size(); ++i)
    if (std::rename(staged[i].c_str(), files[i].first.c_str()) != 0) {
      error = "cannot move '" + files[i].first +
              "' into place: " + std::strerror(errno);
      discard();
      return false;
    }
  return true;
}

} // namespace muon
