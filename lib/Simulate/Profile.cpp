//===- Profile.cpp - Reading muon-profiles/1 ------------------------------===//
#include "muon/Simulate/Profile.h"

#include "muon/Support/Json.h"

#include <nlohmann/json.hpp>

namespace muon::sim {
using json::Value;

namespace {

/// A positive finite number (a bandwidth or a rate: zero would divide).
std::optional<double> positive(json::Reader &rd, const Value *v,
                               const std::string &path) {
  std::optional<double> x = rd.number(v, path);
  if (x && !(*x > 0)) {
    rd.fail(path, "must be > 0");
    return std::nullopt;
  }
  return x;
}

bool readLink(json::Reader &rd, const Value &profile, const std::string &path,
              const char *key, Link &link) {
  std::string at = json::key(path, key);
  const Value *o = rd.object(json::Reader::get(profile, key), at);
  if (!o || !rd.knownKeys(*o, at, {"latency_seconds", "bytes_per_second"}))
    return false;
  std::string latencyPath = json::key(at, "latency_seconds");
  std::optional<double> latency =
      rd.number(json::Reader::get(*o, "latency_seconds"), latencyPath);
  if (latency && *latency < 0)
    return rd.fail(latencyPath, "must be >= 0");
  std::optional<double> beta = positive(
      rd, json::Reader::get(*o, "bytes_per_second"),
      json::key(at, "bytes_per_second"));
  if (!latency || !beta)
    return false;
  link = {*latency, *beta};
  return true;
}

bool readProfile(json::Reader &rd, const Value &o, const std::string &path,
                 Profile &p) {
  if (!rd.knownKeys(o, path,
                    {"description", "sources", "ranks_per_node", "intra_node",
                     "inter_node", "matmul_flops_per_second",
                     "matmul_efficiency", "default_ns_dtype",
                     "memory_bytes_per_second", "compute_slots_per_node",
                     "progress"}))
    return false;
  auto get = [&](const char *k) { return json::Reader::get(o, k); };
  if (const Value *d = get("description")) {
    std::optional<std::string> s =
        rd.string(d, json::key(path, "description"));
    if (!s)
      return false;
    p.description = *s;
  }
  if (const Value *s = get("sources")) {
    std::string at = json::key(path, "sources");
    const Value *a = rd.array(s, at);
    if (!a)
      return false;
    for (size_t i = 0; i < a->size(); ++i)
      if (!rd.string(&(*a)[i], json::index(at, i)))
        return false;
  }
  std::optional<int64_t> perNode =
      rd.integer(get("ranks_per_node"), json::key(path, "ranks_per_node"), 1);
  if (!perNode)
    return false;
  p.ranksPerNode = *perNode;
  if (!readLink(rd, o, path, "intra_node", p.intraNode) ||
      !readLink(rd, o, path, "inter_node", p.interNode))
    return false;
  std::string ratesPath = json::key(path, "matmul_flops_per_second");
  const Value *rates = rd.object(get("matmul_flops_per_second"), ratesPath);
  if (!rates || !rd.knownKeys(*rates, ratesPath, {"f32", "bf16", "f16"}))
    return false;
  std::optional<double> f32 = positive(
      rd, json::Reader::get(*rates, "f32"), json::key(ratesPath, "f32"));
  std::optional<double> bf16 = positive(
      rd, json::Reader::get(*rates, "bf16"), json::key(ratesPath, "bf16"));
  if (!f32 || !bf16)
    return false;
  std::optional<double> f16 = bf16;
  if (const Value *x = json::Reader::get(*rates, "f16"))
    f16 = positive(rd, x, json::key(ratesPath, "f16"));
  if (!f16)
    return false;
  if (const Value *e = get("matmul_efficiency")) {
    std::string at = json::key(path, "matmul_efficiency");
    std::optional<double> x = rd.number(e, at);
    if (!x)
      return false;
    if (!(*x > 0 && *x <= 1))
      return rd.fail(at, "must be in (0, 1]");
    p.matmulEfficiency = *x;
  }
  p.f32FlopsPerSecond = *f32 * p.matmulEfficiency;
  p.bf16FlopsPerSecond = *bf16 * p.matmulEfficiency;
  p.f16FlopsPerSecond = *f16 * p.matmulEfficiency;
  if (const Value *d = get("default_ns_dtype")) {
    std::optional<std::string> s =
        rd.oneOf(d, json::key(path, "default_ns_dtype"), {"f32", "bf16"});
    if (!s)
      return false;
    p.defaultNsDtype = *s;
  }
  if (const Value *m = get("memory_bytes_per_second")) {
    std::string at = json::key(path, "memory_bytes_per_second");
    std::optional<double> x = rd.number(m, at);
    if (!x)
      return false;
    if (*x < 0)
      return rd.fail(at, "must be >= 0 (0: elementwise work not modelled)");
    p.memoryBytesPerSecond = *x;
  }
  if (const Value *c = get("compute_slots_per_node")) {
    std::optional<int64_t> x =
        rd.integer(c, json::key(path, "compute_slots_per_node"), 0);
    if (!x)
      return false;
    p.computeSlotsPerNode = *x;
  }
  if (const Value *g = get("progress")) {
    std::optional<std::string> s =
        rd.oneOf(g, json::key(path, "progress"), {"background", "in-calls"});
    if (!s)
      return false;
    p.backgroundProgress = *s == "background";
  }
  return rd.ok();
}

const Value *profilesOf(json::Reader &rd, const Value &root) {
  const Value *top = rd.object(&root, "");
  if (!top || !rd.knownKeys(*top, "", {"format", "description", "profiles"}))
    return nullptr;
  if (!rd.oneOf(json::Reader::get(*top, "format"), "format",
                {"muon-profiles/1"}))
    return nullptr;
  if (const Value *d = json::Reader::get(*top, "description"))
    if (!rd.string(d, "description"))
      return nullptr;
  return rd.object(json::Reader::get(*top, "profiles"), "profiles");
}

} // namespace

Status parseProfile(const std::string &text, const std::string &file,
                    const std::string &name, Profile &profile) {
  Value root;
  if (Status bad = json::parse(text, root); !bad.ok())
    return invalidArgument(file + ": " + json::describe(bad));
  json::Reader rd;
  const Value *profiles = profilesOf(rd, root);
  if (!profiles)
    return invalidArgument(file + ": " + json::describe(rd.error()));
  // Every profile is checked, not only the one asked for: a file with a
  // broken entry is broken for everyone.
  for (auto it = profiles->begin(); it != profiles->end(); ++it) {
    std::string path = json::key("profiles", it.key());
    const Value *o = rd.object(&it.value(), path);
    Profile p;
    p.name = it.key();
    if (!o || !readProfile(rd, *o, path, p))
      return invalidArgument(file + ": " + json::describe(rd.error()));
    if (it.key() == name)
      profile = p;
  }
  if (!profiles->contains(name)) {
    std::string known;
    for (auto it = profiles->begin(); it != profiles->end(); ++it)
      known += (known.empty() ? "" : ", ") + it.key();
    return invalidArgument(file + ": profiles: no profile '" + name + "'" +
                           (known.empty() ? std::string(" (the file has none)")
                                          : "; the file has " + known));
  }
  return okStatus();
}

std::vector<std::string> profileNames(const std::string &text) {
  std::vector<std::string> names;
  Value root;
  if (!json::parse(text, root).ok())
    return names;
  json::Reader rd;
  if (const Value *profiles = profilesOf(rd, root))
    for (auto it = profiles->begin(); it != profiles->end(); ++it)
      names.push_back(it.key());
  return names;
}

} // namespace muon::sim
