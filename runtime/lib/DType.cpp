//===- DType.cpp - Storage element types ----------------------------------===//
#include "muon/Runtime/DType.h"

namespace muon::runtime {

int64_t dtypeBytes(DType type) { return type == DType::F32 ? 4 : 2; }

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  }
  return "?";
}

std::optional<DType> parseDType(const std::string &name) {
  if (name == "f32")
    return DType::F32;
  if (name == "bf16")
    return DType::BF16;
  if (name == "f16")
    return DType::F16;
  return std::nullopt;
}

} // namespace muon::runtime
