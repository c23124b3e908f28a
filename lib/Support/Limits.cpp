//===- Limits.cpp - Documented maxima and checked arithmetic --------------===//
#include "muon/Support/Limits.h"

namespace muon {

std::string limits::describe(int64_t limit) {
  int bit = 0;
  while (bit < 63 && (int64_t(1) << bit) < limit)
    ++bit;
  if (bit < 63 && (int64_t(1) << bit) == limit && bit > 8)
    return "2^" + std::to_string(bit) + " (" + std::to_string(limit) + ")";
  return std::to_string(limit);
}

std::optional<int64_t> boundedProduct(const std::vector<int64_t> &values,
                                      int64_t limit) {
  int64_t product = 1;
  for (int64_t v : values) {
    std::optional<int64_t> next = checkedMul(product, v);
    if (!next || *next > limit)
      return std::nullopt;
    product = *next;
  }
  return product;
}

std::optional<int64_t> parseDecimal(const std::string &text) {
  if (text.empty() || text.size() > 19 || (text.size() > 1 && text[0] == '0'))
    return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    std::optional<int64_t> next = checkedMul(value, 10);
    if (next)
      next = checkedAdd(*next, c - '0');
    if (!next)
      return std::nullopt;
    value = *next;
  }
  return value;
}

} // namespace muon
