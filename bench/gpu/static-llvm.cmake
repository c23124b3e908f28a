# bench/gpu/static-llvm.cmake: included into muonc's extension build for a
# lent GPU machine (bundle.sh, CMAKE_PROJECT_INCLUDE): links LLVM's static
# component libraries into _core instead of libLLVM.so (150 MB, which the
# 64 MiB that travel to the machine cannot hold). MLIR's exported targets
# name the LLVM dylib (Debian builds LLVM_LINK_LLVM_DYLIB): once every
# target is imported, the `LLVM` target's file becomes a linker script that
# groups the static archives, from which the linker takes only what _core
# uses (no z3 or libxml2 then: nothing of MLIR's reaches them).
cmake_language(DEFER CALL muon_link_llvm_statically)
function(muon_link_llvm_statically)
  if(NOT TARGET LLVM)
    message(FATAL_ERROR "static-llvm.cmake: no LLVM target to replace")
  endif()
  file(GLOB archives "${LLVM_LIBRARY_DIR}/libLLVM*.a")
  list(JOIN archives " " archives)
  set(script "${CMAKE_BINARY_DIR}/libLLVM-static.ld")
  file(WRITE "${script}" "GROUP ( ${archives} -lz -lzstd )\n")
  foreach(config "" _RELEASE _NOCONFIG _RELWITHDEBINFO _DEBUG)
    set_property(TARGET LLVM PROPERTY IMPORTED_LOCATION${config} "${script}")
  endforeach()
  message(STATUS "static-llvm.cmake: LLVM linked statically (${script})")
endfunction()
