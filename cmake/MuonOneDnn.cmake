# oneDNN for the CPU backend's bf16 Newton-Schulz: bf16 matrix products
# with f32 accumulation on the CPU's bf16 instructions (AVX512_BF16, AMX),
# which Debian's OpenBLAS lacks (no sbgemm). Debian libdnnl-dev (oneDNN
# 2.x, OpenMP threading); `make deps` installs it.
#   -DMUON_ONEDNN=ON  (default) required: configuring fails without it
#   -DMUON_ONEDNN=OFF the CPU backend has no bf16 products: ns_dtype "auto"
#                     is f32 there, and an explicit bf16 rounds f32
#                     products (docs/runtime.md, Newton-Schulz)
# Whether the CPU has the instructions is decided at run time
# (runtime/backends/cpu/lib/OneDnnNewtonSchulz.cpp).
# Defines MUON_HAVE_ONEDNN, MUON_DNNL_INCLUDE_DIR and MUON_DNNL_LIBRARY (a
# path, so that the installed package's link line names it as it is).
include_guard(GLOBAL)
option(MUON_ONEDNN "bf16 Newton-Schulz on the CPU through oneDNN (libdnnl-dev)" ON)
set(MUON_HAVE_ONEDNN OFF)
if(MUON_ONEDNN)
  find_path(MUON_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(MUON_DNNL_LIBRARY NAMES dnnl)
  if(NOT MUON_DNNL_INCLUDE_DIR OR NOT MUON_DNNL_LIBRARY)
    message(FATAL_ERROR "oneDNN not found: install libdnnl-dev (`make deps`),"
      " or configure with -DMUON_ONEDNN=OFF (no bf16 products on the CPU)")
  endif()
  file(STRINGS ${MUON_DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h
    _muon_dnnl_major REGEX "#define DNNL_VERSION_MAJOR")
  string(REGEX REPLACE ".*MAJOR +([0-9]+).*" "\\1" _muon_dnnl_major
    "${_muon_dnnl_major}")
  file(STRINGS ${MUON_DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_config.h
    _muon_dnnl_runtime REGEX "#define DNNL_CPU_RUNTIME ")
  # The code uses oneDNN 2's API (matmul::desc, output scales) and sets
  # OpenMP's thread count (one per rank, as BLAS): the Debian build.
  if(NOT _muon_dnnl_major STREQUAL "2")
    message(FATAL_ERROR "oneDNN ${_muon_dnnl_major}.x found; the CPU backend"
      " is written for oneDNN 2 (Debian 12's libdnnl-dev): configure with"
      " -DMUON_ONEDNN=OFF")
  endif()
  if(NOT _muon_dnnl_runtime MATCHES "DNNL_RUNTIME_OMP")
    message(FATAL_ERROR "this oneDNN does not thread with OpenMP"
      " (${_muon_dnnl_runtime}); the CPU backend sets OpenMP's thread count:"
      " configure with -DMUON_ONEDNN=OFF")
  endif()
  set(MUON_HAVE_ONEDNN ON)
  message(STATUS "CPU bf16 products: oneDNN (${MUON_DNNL_LIBRARY})")
else()
  message(STATUS "CPU bf16 products: none (MUON_ONEDNN=OFF)")
endif()
