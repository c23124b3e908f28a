//===- Format.h - printf into a std::string ---------------------*- C++ -*-===//
//
// The LLVM-free tools format their figures with this (llvm::formatv is not
// available to them).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_FORMAT_H
#define MUON_SUPPORT_FORMAT_H

#include <cstdint>
#include <string>
#include <vector>

namespace muon {

/// `std::snprintf` into a string of any length.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/// "[a, b, c]": ranks, a shape, mesh axes.
std::string formatList(const std::vector<int64_t> &values);

} // namespace muon

#endif // MUON_SUPPORT_FORMAT_H
