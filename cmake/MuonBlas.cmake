# The CPU backend's BLAS, chosen at configure time:
#   -DMUON_BLAS=OpenBLAS (default; Debian libopenblas-dev)
#   -DMUON_BLAS=BLIS     (Debian libblis-serial-dev: BLIS built for one
#                         thread, which is how the runtime runs BLAS)
# Defines BLAS::BLAS (FindBLAS), MUON_CBLAS_INCLUDE_DIR (the directory of
# its cblas.h) and MUON_BLAS_DEFINITIONS (MUON_BLAS_BLIS=1 for BLIS).
# Measurements of both: docs/performance.md. Every rank and the reference
# run the same binary, so either keeps runs bit-exact.
include_guard(GLOBAL)
set(MUON_BLAS "OpenBLAS" CACHE STRING "BLAS of the CPU backend: OpenBLAS or BLIS")
set_property(CACHE MUON_BLAS PROPERTY STRINGS OpenBLAS BLIS)
if(MUON_BLAS STREQUAL "OpenBLAS")
  set(BLA_VENDOR OpenBLAS)
  set(_muon_cblas_suffixes openblas)
  set(_muon_blas_package libopenblas-dev)
  set(MUON_BLAS_DEFINITIONS "")
elseif(MUON_BLAS STREQUAL "BLIS")
  set(BLA_VENDOR FLAME) # FindBLAS's name for BLIS
  # Debian keeps each BLIS build (serial, pthread, openmp) in a directory of
  # its own; the serial one first.
  set(_muon_cblas_suffixes)
  foreach(flavour blis-serial blis-pthread blis-openmp)
    list(APPEND CMAKE_LIBRARY_PATH
      /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/${flavour})
    list(APPEND _muon_cblas_suffixes ${CMAKE_LIBRARY_ARCHITECTURE}/${flavour})
  endforeach()
  list(APPEND _muon_cblas_suffixes blis)
  set(_muon_blas_package libblis-serial-dev)
  set(MUON_BLAS_DEFINITIONS MUON_BLAS_BLIS=1)
else()
  message(FATAL_ERROR "MUON_BLAS is '${MUON_BLAS}'; expected OpenBLAS or BLIS")
endif()
find_package(BLAS)
if(NOT BLAS_FOUND)
  message(FATAL_ERROR "${MUON_BLAS} not found: install ${_muon_blas_package}"
    " (`make deps` installs OpenBLAS)")
endif()
# Cached per choice, so that switching MUON_BLAS finds the other header.
if(MUON_BLAS STREQUAL "OpenBLAS")
  find_path(MUON_CBLAS_INCLUDE_DIR_OpenBLAS cblas.h PATH_SUFFIXES openblas)
else()
  # Only BLIS's own directories: the plain <arch>/cblas.h is whichever
  # BLAS the alternatives system points at.
  find_path(MUON_CBLAS_INCLUDE_DIR_BLIS cblas.h NO_DEFAULT_PATH
    PATHS ${CMAKE_INCLUDE_PATH} /usr/include /usr/local/include
    PATH_SUFFIXES ${_muon_cblas_suffixes})
endif()
if(NOT MUON_CBLAS_INCLUDE_DIR_${MUON_BLAS})
  message(FATAL_ERROR "cblas.h of ${MUON_BLAS} not found: install"
    " ${_muon_blas_package}")
endif()
set(MUON_CBLAS_INCLUDE_DIR ${MUON_CBLAS_INCLUDE_DIR_${MUON_BLAS}})
message(STATUS "CPU BLAS: ${MUON_BLAS} (${BLAS_LIBRARIES}; "
  "${MUON_CBLAS_INCLUDE_DIR}/cblas.h)")
