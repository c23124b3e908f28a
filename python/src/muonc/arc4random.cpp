//===- arc4random.cpp - arc4random for LLVM's Support, from getrandom -----===//
//
// LLVM's Support library as Debian 12 builds it calls arc4random
// (Process.cpp, GetRandomNumber), which glibc has from 2.36 on: linked
// statically into _core, it alone would make the wheel need glibc 2.36.
// With --wrap=arc4random (python/CMakeLists.txt) its call comes here
// instead, for the same random bits from getrandom (glibc 2.25), and the
// wheel needs what the rest needs (manylinux_2_35: Ubuntu 22.04 and newer).
//
//===----------------------------------------------------------------------===//
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" uint32_t __wrap_arc4random() {
  uint32_t value = 0;
  while (getrandom(&value, sizeof(value), 0) != sizeof(value))
    if (errno != EINTR) // no getrandom (Linux < 3.17): LLVM's own fallback
      return static_cast<uint32_t>(std::rand());
  return value;
}
