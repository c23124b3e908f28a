//===- Format.h - printf into a std::string ---------------------*- C++ -*-===//
//
// The LLVM-free tools format their figures with this (llvm::formatv is not
// available to them).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_FORMAT_H
#define MUON_SUPPORT_FORMAT_H

#include <string>

namespace muon {

/// `std::snprintf` into a string of any length.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

} // namespace muon

#endif // MUON_SUPPORT_FORMAT_H
