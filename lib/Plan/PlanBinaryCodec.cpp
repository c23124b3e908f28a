//===- PlanBinaryCodec.cpp - The binary plan's sections, both ways --------===//
//
// Each part of the file encoded and decoded side by side: the header, a
// group's settings tail, a Newton-Schulz configuration, a matrix's owner,
// the shared section, a rank's section (whose encoding is the writer's, in
// PlanBinaryWriter.cpp, as transfers stream in), and the fuzzers' reseal.
//
// Each transfer is stored twice, in its source's and its destination's
// section, so that a rank needs nothing but its own section; each copy
// carries the transfer's index in its exchange, so the whole plan's order
// (which fixes every rank's all-to-all-v layout) is recoverable. A transfer
// whose box is its holder's piece (the source's in a gather, the
// destination's in a scatter: always, in a plan the compiler wrote) does
// not store the box: the reader derives it from the layout, as the
// validator would to check it.
//
//===----------------------------------------------------------------------===//
#include "PlanBinaryFormat.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/Validate.h"
#include "muon/Support/Escape.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/Limits.h"

#include <algorithm>
#include <optional>

namespace muon {
using namespace planbin;

bool isPlanBinary(std::string_view prefix) {
  return prefix.substr(0, kPlanBinaryMagic.size()) == kPlanBinaryMagic;
}

bool looksLikePlanBinary(std::string_view prefix) {
  return isPlanBinary(prefix) ||
         prefix.substr(0, kPlanBinaryProbeSize).find('\0') !=
             std::string_view::npos;
}

void resealPlanBinary(std::string &bytes) {
  if (bytes.size() < kHeaderSize || !isPlanBinary(bytes))
    return;
  uint64_t size = bytes.size();
  auto sumOf = [&](uint64_t offset, uint64_t n) -> std::optional<uint64_t> {
    if (offset > size || n > size - offset)
      return std::nullopt;
    return fnv1a(bytes.data() + offset, n);
  };
  if (auto s = sumOf(getU64(&bytes[32]), getU64(&bytes[40])))
    putU64(bytes, 72, *s);
  if (auto s = sumOf(getU64(&bytes[48]), getU64(&bytes[56])))
    putU64(bytes, 80, *s);
  uint64_t index = getU64(&bytes[64]), world = getU64(&bytes[16]);
  for (uint64_t r = 0;
       r < world && index <= size && (size - index) / kIndexEntrySize > r;
       ++r) {
    size_t at = index + r * kIndexEntrySize;
    if (auto s = sumOf(getU64(&bytes[at]), getU64(&bytes[at + 8])))
      putU64(bytes, at + 16, *s);
  }
  putU64(bytes, 88, fnv1a(bytes.data(), 88));
}

namespace planbin {
namespace {
/// "0 adamw, 1 muon": the codes of the registered algorithms, for errors.
std::string knownAlgorithmCodes() {
  std::vector<const Algorithm *> byCode;
  for (const Algorithm &a : algorithms())
    byCode.push_back(&a);
  std::sort(byCode.begin(), byCode.end(),
            [](const Algorithm *a, const Algorithm *b) {
              return a->binaryCode < b->binaryCode;
            });
  std::string text;
  for (const Algorithm *a : byCode)
    text += (text.empty() ? "" : ", ") + num(a->binaryCode) + " " + a->name;
  return text;
}
} // namespace

//===----------------------------------------------------------------------===//
// Header
//===----------------------------------------------------------------------===//

Status readHeader(std::string_view bytes, uint64_t actualSize, Header &h) {
  if (bytes.size() < kHeaderSize) {
    return invalidArgument(
        "not a binary plan file (" + num(static_cast<int64_t>(bytes.size())) +
        " bytes, shorter than its " + num(static_cast<int64_t>(kHeaderSize)) +
        "-byte header)");
  }
  if (!isPlanBinary(bytes)) {
    // Escaped: the bytes are the file's, not text to echo.
    std::string found =
        escapeBytes(bytes.substr(0, kPlanBinaryMagic.size()), "\"\\");
    return invalidArgument(
        "header: bytes 0-7 are \"" + found +
        "\", not the magic \"MUONPLAN\" (the file is damaged or not a "
        "binary plan)");
  }
  const char *p = bytes.data();
  uint32_t version = getU32(p + 8), headerSize = getU32(p + 12);
  if (version < kPlanBinaryVersion || version > kPlanBinaryRedundantVersion) {
    return invalidArgument(
        "header: format version " + std::to_string(version) +
        " is not supported (this reader reads muon-plan-bin/" +
        std::to_string(kPlanBinaryVersion) + " to " +
        std::to_string(kPlanBinaryRedundantVersion) +
        (version == 1 ? "; version 1 predates parameter groups: write "
                        "the plan again from its model or JSON plan)"
                      : ")"));
  }
  h.version = version;
  h.world = getU64(p + 16);
  h.fileSize = getU64(p + 24);
  h.sharedOffset = getU64(p + 32);
  h.sharedSize = getU64(p + 40);
  h.globalOffset = getU64(p + 48);
  h.globalSize = getU64(p + 56);
  h.indexOffset = getU64(p + 64);
  h.sharedSum = getU64(p + 72);
  h.globalSum = getU64(p + 80);
  h.headerSum = getU64(p + 88);
  if (fnv1a(p, 88) != h.headerSum) {
    return dataLoss("header: checksum mismatch (the file is damaged)");
  }
  auto bad = [&](const std::string &what) {
    return invalidArgument("header: " + what);
  };
  if (headerSize != kHeaderSize)
    return bad("header size " + std::to_string(headerSize) + ", expected " +
               num(kHeaderSize));
  if (h.world < 1 || h.world > static_cast<uint64_t>(limits::kMaxWorldSize))
    return bad("world size " + std::to_string(h.world) + " is outside [1, " +
               limits::describe(limits::kMaxWorldSize) + "]");
  if (h.fileSize != actualSize)
    return dataLoss("header: "
                    "says the file has " +
                    std::to_string(h.fileSize) + " bytes but it has " +
                    std::to_string(actualSize) + " (truncated or appended to)");
  // Sections follow each other; each size is checked against what is left
  // after the previous section, so that no sum overflows and no difference
  // wraps around.
  if (h.sharedOffset != kHeaderSize || h.sharedOffset > h.fileSize ||
      h.sharedSize > h.fileSize - h.sharedOffset ||
      h.globalOffset != h.sharedOffset + h.sharedSize ||
      h.globalSize > h.fileSize - h.globalOffset ||
      h.indexOffset != h.globalOffset + h.globalSize ||
      h.world * kIndexEntrySize > h.fileSize - h.indexOffset)
    return bad("section offsets and sizes do not lie in order inside the "
               "file");
  return okStatus();
}

//===----------------------------------------------------------------------===//
// Shared section
//===----------------------------------------------------------------------===//

namespace {
/// The group settings (GroupSettings.h) that have a slot of their own in a
/// group's record: those of Muon and AdamW as the format had them before
/// the settings tail. Every other setting, and every setting of the
/// algorithms registered since, travels in the tail, by name, so that a
/// setting or an algorithm added to the registry needs no change here.
bool hasFixedSlot(const GroupSetting &s) {
  static constexpr std::string_view kMuonSlots[] = {
      "lr",        "weight_decay",      "momentum", "nesterov",
      "adjust_lr", "weight_decay_mode", "normuon",  "normuon_beta2"};
  if (s.algorithm == kAdamW)
    return true; // lr, betas, eps, weight_decay
  return s.algorithm == kMuon &&
         std::find(std::begin(kMuonSlots), std::end(kMuonSlots),
                   std::string_view(s.name)) != std::end(kMuonSlots);
}

/// The settings of g's tail: those without a slot that files hold.
std::vector<const GroupSetting *> tailSettings(const PlanGroup &g) {
  std::vector<const GroupSetting *> tail;
  for (const GroupSetting &s : algorithmOf(g.algorithm).settings)
    if (!hasFixedSlot(s) && settingWritten(s, g))
      tail.push_back(&s);
  return tail;
}
} // namespace

/// Whether the plan is written as version 4 (kPlanBinaryNsConfigsVersion).
bool severalNsConfigs(const Plan &plan) { return plan.ns.configs.size() > 1; }

/// The format version the writer gives `plan`: the oldest that holds it, so
/// that plans without newer features keep their bytes.
uint32_t planBinaryVersion(const Plan &plan) {
  for (const PlanMatrix &m : plan.matrices)
    if (m.redundant)
      return kPlanBinaryRedundantVersion;
  if (severalNsConfigs(plan))
    return kPlanBinaryNsConfigsVersion;
  return plan.qkClip.empty() ? kPlanBinaryVersion : kPlanBinaryQkClipVersion;
}

/// A matrix's owner as the file holds it: a redundant matrix's as
/// -2 - owner (version 5).
int64_t encodedOwner(const PlanMatrix &m) {
  return m.redundant ? -2 - m.owner : m.owner;
}

/// The inverse of encodedOwner (the validator checks what it means).
void decodeOwner(PlanMatrix &m, int64_t value) {
  m.redundant = value <= -2;
  m.owner = m.redundant ? -2 - value : value;
}

namespace {
/// One Newton-Schulz configuration: steps, the coefficient table, eps.
void encodeNsConfig(Out &o, const NewtonSchulzConfig &c) {
  o.svarint(c.nsSteps);
  o.varint(c.coefficients.size());
  for (const auto &abc : c.coefficients)
    for (double x : abc)
      o.f64(x);
  o.f64(c.eps);
}

/// encodeNsConfig's inverse; the validator checks the values.
NewtonSchulzConfig decodeNsConfig(In &in) {
  NewtonSchulzConfig c;
  c.nsSteps = in.svarint();
  size_t coefficients = in.count("NS coefficient triples", 24);
  for (size_t i = 0; i < coefficients && in.ok(); ++i)
    c.coefficients.push_back({in.f64(), in.f64(), in.f64()});
  c.eps = in.f64();
  return c;
}
} // namespace

/// Settings, mesh, parameters, the exchanges' phases and the schedule: what
/// every rank needs whole.
std::string encodeShared(const Plan &plan, int64_t totalMatrices) {
  std::string s;
  Out o(s);
  o.str(plan.wireDtype);
  o.u8(plan.distributed);
  o.u8(plan.async);
  o.svarint(plan.prefetchCount);
  o.svarint(plan.inflightLimit);
  o.svarint(plan.gatherBudgetBytes);
  o.ints(plan.mesh.shape);
  o.ints(plan.mesh.devices);
  // Version 4: a count, then each configuration; before, the one alone.
  const bool several = planBinaryVersion(plan) >= kPlanBinaryNsConfigsVersion;
  if (several)
    o.varint(plan.ns.configs.size());
  for (const NewtonSchulzConfig &c : plan.ns.configs)
    encodeNsConfig(o, c);
  o.str(plan.ns.nsDtype);
  o.varint(plan.groups.size());
  for (const PlanGroup &g : plan.groups) {
    o.str(g.name);
    const std::vector<const GroupSetting *> tail = tailSettings(g);
    // The tail's bit: plans without one keep their bytes, and a reader
    // that predates it refuses the algorithm instead of misreading.
    o.u8(static_cast<uint8_t>(algorithmOf(g.algorithm).binaryCode |
                              (tail.empty() ? 0 : kSettingsTail)));
    if (g.algorithm == kMuon) {
      o.f64(g.number("lr"));
      o.f64(g.number("weight_decay"));
      o.f64(g.number("momentum"));
      // Bit 0 nesterov, bits 1-2 the weight-decay mode (0: decoupled, so
      // plans written before the modes read the same), bit 3 NorMuon (its
      // beta2 follows adjust_lr only then: other plans stay byte-identical,
      // and a reader without NorMuon refuses the flag instead of misreading).
      const bool normuon = g.flag("normuon");
      int mode = std::max(0, weightDecayModeIndex(g.text("weight_decay_mode")));
      o.u8(static_cast<uint8_t>((g.flag("nesterov") ? 1 : 0) | mode << 1 |
                                (normuon ? 8 : 0)));
      o.str(g.text("adjust_lr"));
      if (normuon)
        o.f64(g.number("normuon_beta2"));
    } else if (g.algorithm == kAdamW) {
      for (const char *name : {"lr", "beta1", "beta2", "eps", "weight_decay"})
        o.f64(g.number(name));
    }
    if (g.orthogonalizes() && several)
      o.varint(g.nsConfig);
    // The tail: a count, then each setting's name and value (a Number an
    // f64, a Flag a byte, a Name a string).
    if (!tail.empty()) {
      o.varint(tail.size());
      for (const GroupSetting *s : tail) {
        o.str(s->name);
        if (s->kind == GroupSetting::Kind::Name)
          o.str(settingName(*s, g));
        else if (s->kind == GroupSetting::Kind::Flag)
          o.u8(settingValue(*s, g) != 0);
        else
          o.f64(settingValue(*s, g));
      }
    }
  }
  o.varint(plan.params.size());
  for (const PlanParam &p : plan.params) {
    o.str(p.name);
    o.str(p.dtype);
    o.varint(p.group);
    o.ints(p.layout.shape);
    o.varint(p.layout.splitAxes.size());
    for (const auto &axes : p.layout.splitAxes)
      o.ints(axes);
    o.ints(p.layout.partialAxes);
    // Per-head Newton-Schulz rides on a flag bit of the `only` count, and
    // its two values follow the pairs only when set: plans without heads
    // keep their bytes, and older readers refuse the bit as a count.
    bool heads = p.layout.numHeads > 1;
    o.varint(p.layout.only.size() | (heads ? kHeadsFlag : 0));
    for (auto [axis, coord] : p.layout.only) {
      o.svarint(axis);
      o.svarint(coord);
    }
    if (heads) {
      o.varint(p.layout.numHeads);
      o.varint(p.layout.headSplitDim);
    }
  }
  // Only in version 3 and 4 files (kPlanBinaryQkClipVersion): plans without
  // QK-clip or NS configurations stay version 2, byte for byte, and older
  // readers refuse the version instead of misreading the section.
  if (planBinaryVersion(plan) != kPlanBinaryVersion) {
    o.varint(plan.qkClip.size());
    for (const QkClipLayer &l : plan.qkClip) {
      o.str(l.name);
      o.str(l.query);
      o.str(l.key);
      o.svarint(l.numHeads);
      o.svarint(l.numKvHeads);
      o.f64(l.threshold);
    }
  }
  o.varint(totalMatrices);
  o.varint(plan.rounds.size());
  o.varint(plan.exchanges.size());
  for (const Exchange &ex : plan.exchanges) {
    o.u8(static_cast<uint8_t>(ex.phase));
    o.svarint(ex.round);
  }
  o.varint(plan.schedule.size());
  for (const ScheduleStep &st : plan.schedule) {
    o.u8(static_cast<uint8_t>(st.kind));
    o.svarint(st.index);
  }
  return s;
}

namespace {
/// Decodes a group's settings tail (encodeShared) into g: each name a
/// setting of g's algorithm without a slot of its own, at most once.
bool decodeSettingsTail(In &in, PlanGroup &g) {
  const size_t n = in.count("tail settings", 2);
  std::vector<const GroupSetting *> seen;
  for (size_t i = 0; i < n && in.ok(); ++i) {
    const std::string name = in.str("bytes of a setting's name");
    if (!in.ok())
      return false;
    const GroupSetting *s = findGroupSetting(g.algorithm, name);
    if (!s || hasFixedSlot(*s))
      return in.fail("setting '" + name + "' in the tail is not a " +
                     algorithmOf(g.algorithm).title +
                     " group's setting without a slot of its own (a plan "
                     "from a newer muonc?)");
    if (std::find(seen.begin(), seen.end(), s) != seen.end())
      return in.fail("setting '" + name + "' appears twice in the tail");
    seen.push_back(s);
    if (s->kind == GroupSetting::Kind::Name) {
      setSettingName(*s, g, in.str("bytes of a setting's value"));
    } else if (s->kind == GroupSetting::Kind::Flag) {
      const uint8_t flag = in.u8();
      if (in.ok() && flag > 1)
        return in.fail("setting '" + name + "' is " + num(flag) +
                       "; a flag is 0 or 1");
      setSettingValue(*s, g, flag);
    } else {
      setSettingValue(*s, g, in.f64());
    }
  }
  if (in.ok() && n == 0)
    return in.fail("an empty settings tail (the algorithm's tail bit is set "
                   "only when settings follow)");
  return in.ok();
}
} // namespace

namespace {

/// One group of the shared section (its algorithm's settings, its
/// Newton-Schulz configuration among `configs` with `several`), onto
/// `groups`; false (`in` says why) when the section is not a plan's.
bool decodeGroup(In &in, size_t configs, bool several,
                 std::vector<PlanGroup> &groups) {
  std::string name = in.str("bytes of name");
  const uint8_t algorithmByte = in.u8();
  const uint8_t code = algorithmByte & ~kSettingsTail;
  const std::optional<AlgorithmId> algorithm = algorithmWithBinaryCode(code);
  if (in.ok() && !algorithm)
    return in.fail("algorithm " + num(code) +
                   " is not one this reader "
                   "knows (" +
                   knownAlgorithmCodes() + ")");
  PlanGroup g(algorithm.value_or(kMuon));
  g.name = std::move(name);
  if (g.algorithm == kMuon) {
    g.setNumber("lr", in.f64());
    g.setNumber("weight_decay", in.f64());
    g.setNumber("momentum", in.f64());
    uint8_t flags = in.u8();
    if (in.ok() && (flags >> 4) != 0)
      return in.fail("Muon flags " + num(flags) +
                     ": bits above 3 are not defined (bit 0 nesterov, "
                     "bits 1-2 the weight-decay mode, bit 3 NorMuon)");
    if (in.ok() && ((flags >> 1) & 3) >= kWeightDecayModes.size())
      return in.fail("Muon flags " + num(flags) + ": weight-decay mode " +
                     num((flags >> 1) & 3) +
                     " is not 0 (decoupled), 1 (cautious) or 2 (none)");
    g.setFlag("nesterov", flags & 1);
    g.setText("weight_decay_mode",
              std::string(kWeightDecayModes[((flags >> 1) & 3) % 3]));
    g.setFlag("normuon", (flags & 8) != 0);
    g.setText("adjust_lr", in.str("bytes of adjust_lr"));
    if (g.flag("normuon"))
      g.setNumber("normuon_beta2", in.f64());
  } else if (g.algorithm == kAdamW) {
    for (const char *setting :
         {"lr", "beta1", "beta2", "eps", "weight_decay"})
      g.setNumber(setting, in.f64());
  }
  // Checked against the configurations by the validator.
  if (g.orthogonalizes() && several)
    g.nsConfig =
        in.below(static_cast<int64_t>(configs), "NS configuration");
  if ((algorithmByte & kSettingsTail) && !decodeSettingsTail(in, g))
    return false;
  groups.push_back(std::move(g));
  return true;
}

/// One parameter of the shared section, in one of `plan`'s groups, onto
/// its parameters; false (`in` says why) when it is not a plan's.
bool decodeParam(In &in, Plan &plan) {
  PlanParam p;
  p.name = in.str("bytes of name");
  p.dtype = in.str("bytes of dtype");
  uint64_t group = in.varint();
  if (in.ok() && group >= plan.groups.size())
    return in.fail("group " + num(static_cast<int64_t>(group)) +
                   " is out of range (" + num(plan.groups.size()) +
                   " groups)");
  p.group = static_cast<int64_t>(group);
  if (in.ok())
    p.algorithm = plan.groups[p.group].algorithm;
  p.layout.shape = in.ints("dims");
  size_t dims = in.count("split entries");
  for (size_t d = 0; d < dims && in.ok(); ++d)
    p.layout.splitAxes.push_back(in.ints("split axes"));
  p.layout.partialAxes = in.ints("partial axes");
  uint64_t onlyWord = in.varint();
  bool heads = onlyWord & kHeadsFlag;
  size_t only = in.counted(onlyWord & ~kHeadsFlag, "only pairs", 2);
  for (size_t k = 0; k < only && in.ok(); ++k) {
    int64_t axis = in.svarint();
    p.layout.only.push_back({axis, in.svarint()});
  }
  if (heads) {
    // Checked against the shape by the validator (Validate.cpp).
    p.layout.numHeads = in.below(limits::kMaxMatrices + 1, "num_heads");
    p.layout.headSplitDim = in.below(2, "head_split_dim");
  }
  plan.params.push_back(std::move(p));
  return true;
}

} // namespace

/// Decodes the shared section of a file of format `version` into `plan`
/// (settings, mesh, params, the exchanges' phases and rounds, the
/// schedule), sizes rounds and exchanges, and returns the whole plan's
/// matrix count.
bool decodeShared(In &in, Plan &plan, int64_t &totalMatrices,
                  uint32_t version) {
  const bool several = version >= kPlanBinaryNsConfigsVersion;
  in.item = "settings";
  plan.wireDtype = in.str("bytes of wire dtype");
  plan.wireBytes = wireDtypeBytes(plan.wireDtype);
  plan.distributed = in.u8() != 0;
  plan.async = in.u8() != 0;
  plan.prefetchCount = in.svarint();
  plan.inflightLimit = in.svarint();
  plan.gatherBudgetBytes = in.svarint();
  in.item = "mesh";
  plan.mesh.shape = in.ints("mesh axes");
  plan.mesh.devices = in.ints("devices");
  in.item = "newton_schulz";
  NewtonSchulzSettings &ns = plan.ns;
  ns.configs.clear();
  // Each configuration takes at least 10 bytes (steps, count, eps).
  size_t configs = several ? in.count("NS configurations", 10) : 1;
  if (in.ok() && version == kPlanBinaryNsConfigsVersion && configs < 2)
    return in.fail(num(configs) + " NS configuration(s) in a version " +
                   num(kPlanBinaryNsConfigsVersion) +
                   " file, which is written only with two or more");
  for (size_t c = 0; c < configs && in.ok(); ++c)
    ns.configs.push_back(decodeNsConfig(in));
  ns.nsDtype = in.str("bytes of ns_dtype");
  in.item = "groups";
  size_t groups = in.count("groups", 3);
  plan.groups.clear();
  for (size_t i = 0; i < groups && in.ok(); ++i) {
    in.item = json::index("groups", i);
    if (!decodeGroup(in, ns.configs.size(), several, plan.groups))
      return false;
  }
  in.item = "params";
  size_t params = in.count("parameters", 6);
  if (in.ok() && static_cast<int64_t>(params) > limits::kMaxParams)
    return in.fail(num(params) + " parameters, above the limit of " +
                   limits::describe(limits::kMaxParams));
  plan.params.reserve(params);
  for (size_t i = 0; i < params && in.ok(); ++i) {
    in.item = json::index("params", i);
    if (!decodeParam(in, plan))
      return false;
  }
  if (version != kPlanBinaryVersion) {
    in.item = "qk_clip";
    size_t layers = in.count("qk_clip layers", 5);
    if (in.ok() && static_cast<int64_t>(layers) > limits::kMaxParams)
      return in.fail(num(layers) + " QK-clip layers, above the limit of " +
                     limits::describe(limits::kMaxParams));
    for (size_t i = 0; i < layers && in.ok(); ++i) {
      in.item = json::index("qk_clip", i);
      QkClipLayer l;
      l.name = in.str("bytes of name");
      l.query = in.str("bytes of query");
      l.key = in.str("bytes of key");
      l.numHeads = in.svarint();
      l.numKvHeads = in.svarint();
      l.threshold = in.f64();
      plan.qkClip.push_back(std::move(l));
    }
  }
  in.item = "counts";
  uint64_t matrices = in.varint();
  if (in.ok() && matrices > static_cast<uint64_t>(limits::kMaxMatrices))
    return in.fail(std::to_string(matrices) + " matrices, above the limit of " +
                   limits::describe(limits::kMaxMatrices));
  totalMatrices = static_cast<int64_t>(matrices);
  uint64_t rounds = in.varint();
  if (in.ok() && rounds > static_cast<uint64_t>(limits::kMaxRounds))
    return in.fail(std::to_string(rounds) + " rounds, above the limit of " +
                   limits::describe(limits::kMaxRounds));
  plan.rounds.assign(rounds, {});
  in.item = "exchanges";
  size_t exchanges = in.count("exchanges", 2);
  for (size_t e = 0; e < exchanges && in.ok(); ++e) {
    Exchange ex;
    uint8_t phase = in.u8();
    if (in.ok() && phase > static_cast<uint8_t>(Exchange::Phase::Reduce))
      return in.fail(json::index("exchanges", e) + ": unknown phase " +
                     num(phase));
    ex.phase = static_cast<Exchange::Phase>(phase);
    ex.round = in.svarint();
    plan.exchanges.push_back(std::move(ex));
  }
  in.item = "schedule";
  size_t steps = in.count("schedule steps", 2);
  for (size_t i = 0; i < steps && in.ok(); ++i) {
    uint8_t kind = in.u8();
    if (in.ok() && kind > static_cast<uint8_t>(ScheduleStep::Kind::AdamW))
      return in.fail(json::index("schedule", i) + ": unknown step " +
                     num(kind));
    plan.schedule.push_back(
        {static_cast<ScheduleStep::Kind>(kind), in.svarint()});
  }
  in.item.clear();
  return in.end();
}

//===----------------------------------------------------------------------===//
// A rank's section (encoded by PlanBinaryWriter::add and encode)
//===----------------------------------------------------------------------===//

/// Decodes rank `rank`'s section into `slice` (which holds the decoded
/// shared section): the slice as Plan.h describes it. `items`, when given,
/// gets each transfer's (or reduction's) index in its exchange. Indices
/// are range-checked here; what they mean is validatePlanSlice's.
bool decodeSection(In &in, const Geometry &geo, int64_t rank, Plan &slice,
                   std::vector<std::vector<Item>> *items) {
  // Parameters and settings come from the shared section (geo.plan); the
  // slice gets only what this section holds.
  const Plan &plan = geo.plan;
  int64_t world = plan.worldSize;
  int64_t total = geo.totalMatrices();
  in.item = "matrices";
  size_t n = in.count("matrices", 2);
  slice.matrixIds.reserve(n);
  slice.matrices.reserve(n);
  int64_t prev = -1;
  for (size_t i = 0; i < n && in.ok(); ++i) {
    in.item = json::index("matrices", i);
    uint64_t gap = in.varint();
    if (in.ok() && gap >= static_cast<uint64_t>(total - prev - 1))
      return in.fail("matrix index " + std::to_string(prev + 1 + gap) +
                     " is out of range [" + num(prev + 1) + ", " + num(total) +
                     ")");
    int64_t id = prev + 1 + static_cast<int64_t>(gap);
    prev = id;
    auto [param, s] = geo.locate(id);
    const PlanParam &p = plan.params[param];
    PlanMatrix m;
    m.param = p.name;
    m.paramIndex = param;
    m.slice = p.layout.slicedMatrices() ? s : -1;
    m.rows = p.layout.matrixRows();
    m.cols = p.layout.matrixCols();
    m.nsFlops = nsFlops(m.rows, m.cols,
                        plan.ns.configs[nsConfigOf(plan, param)].nsSteps);
    decodeOwner(m, in.svarint());
    slice.matrixIds.push_back(id);
    slice.matrices.push_back(std::move(m));
  }
  int64_t local = static_cast<int64_t>(slice.matrices.size());
  for (size_t r = 0; r < slice.rounds.size() && in.ok(); ++r) {
    in.item = json::index("rounds", r);
    size_t count = in.count("matrices");
    for (size_t i = 0; i < count && in.ok(); ++i)
      slice.rounds[r].push_back(in.below(local, "local matrix"));
  }
  slice.nsMatrices.assign(world, {});
  slice.nsBatches.assign(world, {});
  in.item = "ns_batches";
  size_t batches = in.count("batches", 4);
  for (size_t b = 0; b < batches && in.ok(); ++b) {
    in.item = json::index("ns_batches", b);
    NsBatch batch;
    batch.round = in.svarint();
    batch.rows = in.svarint();
    batch.cols = in.svarint();
    if (severalNsConfigs(plan))
      batch.config = in.below(static_cast<int64_t>(plan.ns.configs.size()),
                              "NS configuration");
    size_t count = in.count("matrices");
    for (size_t i = 0; i < count && in.ok(); ++i)
      batch.matrices.push_back(in.below(local, "local matrix"));
    slice.nsMatrices[rank].insert(slice.nsMatrices[rank].end(),
                                  batch.matrices.begin(), batch.matrices.end());
    slice.nsBatches[rank].push_back(std::move(batch));
  }
  if (items)
    items->assign(slice.exchanges.size(), {});
  for (size_t e = 0; e < slice.exchanges.size() && in.ok(); ++e) {
    Exchange &ex = slice.exchanges[e];
    bool gather = ex.phase == Exchange::Phase::Gather;
    std::string path = json::index("exchanges", e);
    in.item = path;
    size_t count = in.count("transfers", 4);
    ex.transfers.reserve(count);
    int64_t last = -1;
    for (size_t i = 0; i < count && in.ok(); ++i) {
      in.item = json::index(json::key(path, "transfers"), i);
      int64_t index = last + 1 + in.below(int64_t(1) << 40, "index gap");
      last = index;
      uint8_t flags = in.u8();
      if (in.ok() && flags > 7)
        return in.fail("unknown transfer flags " + num(flags));
      int64_t peer = in.below(world, "peer rank");
      int64_t k = in.below(local, "local matrix");
      if (!in.ok())
        return false;
      Transfer t;
      bool toMe = flags & kToMe;
      t.src = toMe ? peer : rank;
      t.dst = toMe ? rank : peer;
      t.matrix = k;
      const PlanMatrix &m = slice.matrices[k];
      Range rows, cols;
      int64_t summand = 0;
      bool derived = false;
      if (!(flags & kExplicitBox) || !(flags & kExplicitSummand))
        derived = geo.piece(m.paramIndex, std::max<int64_t>(m.slice, 0),
                            gather ? t.src : t.dst, rows, cols, summand);
      if (flags & kExplicitBox) {
        t.rows.begin = in.svarint();
        t.rows.end = in.svarint();
        t.cols.begin = in.svarint();
        t.cols.end = in.svarint();
      } else if (!derived) {
        return in.fail("the box is the holder's piece, but rank " +
                       num(gather ? t.src : t.dst) + " holds no piece of " +
                       m.label());
      } else {
        t.rows = rows;
        t.cols = cols;
      }
      t.summand = (flags & kExplicitSummand)
                      ? in.svarint()
                      : (gather && derived ? summand : 0);
      // Boxes must be non-empty and ordered before anything sizes them.
      if (in.ok() && (t.rows.begin >= t.rows.end || t.cols.begin >= t.cols.end))
        return in.fail("expected a non-empty box");
      ex.transfers.push_back(t);
      if (items)
        (*items)[e].push_back({index, toMe});
    }
    in.item = path;
    count = in.count("reductions", 6);
    ex.reductions.reserve(count);
    last = -1;
    for (size_t i = 0; i < count && in.ok(); ++i) {
      in.item = json::index(json::key(path, "reductions"), i);
      int64_t index = last + 1 + in.below(int64_t(1) << 40, "index gap");
      last = index;
      uint8_t flags = in.u8();
      if (in.ok() && flags > 1)
        return in.fail("unknown reduction flags " + num(flags));
      int64_t peer = in.below(world, "peer rank");
      Reduction red;
      bool toMe = flags & kToMe;
      red.src = toMe ? peer : rank;
      red.dst = toMe ? rank : peer;
      red.param =
          in.below(static_cast<int64_t>(plan.params.size()), "parameter");
      red.summand = in.svarint();
      red.elements = in.svarint();
      ex.reductions.push_back(red);
      if (items)
        (*items)[e].push_back({index, toMe});
    }
  }
  in.item.clear();
  return in.end();
}

} // namespace planbin
} // namespace muon
