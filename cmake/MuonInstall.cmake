# `cmake --install` (and `make install PREFIX=...`): the tools, the headers,
# the libraries, and a CMake package:
#   find_package(Muon CONFIG REQUIRED)          # Muon::Runtime
#   find_package(Muon CONFIG REQUIRED COMPONENTS Compiler)
#   find_package(Muon CONFIG REQUIRED COMPONENTS Cuda)    # builds with CUDA
#   target_link_libraries(trainer PRIVATE Muon::Runtime)  # no LLVM, no MLIR
#   target_link_libraries(tool PRIVATE Muon::Compiler)    # + MLIR/LLVM 22
#   target_link_libraries(trainer PRIVATE Muon::Cuda)     # + the CUDA toolkit
include(CMakePackageConfigHelpers)

install(TARGETS muon-opt muon-translate muon-run muon-bench RUNTIME DESTINATION bin)

# Headers: the plan contract and its plain-C++ support, the runtime (C++
# and C), the CPU backend, and the compiler's library API.
install(DIRECTORY include/muon/Support include/muon/Plan include/muon/Compiler
        DESTINATION include/muon)
install(DIRECTORY runtime/include/muon/ DESTINATION include/muon)
install(DIRECTORY runtime/backends/cpu/include/muon/Runtime/Cpu
        DESTINATION include/muon/Runtime)

# Muon::Runtime: no LLVM, no MLIR.
install(TARGETS MuonSupport MuonPlan MuonRuntime MuonRuntimeCpuDevice
        MuonRuntimeMpi MuonRuntimeCpu MuonRuntimeBackends MuonRuntimeC
        EXPORT MuonRuntimeTargets ARCHIVE DESTINATION lib)
# The C API as a shared library too (libmuon_runtime.so), for trainers in
# other languages that load it (ctypes, FFI): the CPU backend inside.
install(TARGETS MuonRuntimeCShared LIBRARY DESTINATION lib)
add_library(MuonRuntimeAll INTERFACE)
target_link_libraries(MuonRuntimeAll INTERFACE MuonRuntimeC)
set_target_properties(MuonRuntimeAll PROPERTIES EXPORT_NAME Runtime)
install(TARGETS MuonRuntimeAll EXPORT MuonRuntimeTargets)
install(EXPORT MuonRuntimeTargets NAMESPACE Muon:: DESTINATION lib/cmake/Muon)

# Muon::Compiler: the dialect, the passes and the compile API, over the
# MLIR/LLVM 22 the build used.
install(TARGETS MuonPlanner MuonCompiler MLIRMuonDialect MLIRMuonAnalysis
        MLIRMuonTransforms MLIRMuonProcessGroupsToMesh MLIRMuonSpecImport
        EXPORT MuonCompilerTargets ARCHIVE DESTINATION lib)
add_library(MuonCompilerAll INTERFACE)
target_link_libraries(MuonCompilerAll INTERFACE MuonCompiler MuonPlan)
set_target_properties(MuonCompilerAll PROPERTIES EXPORT_NAME Compiler)
install(TARGETS MuonCompilerAll EXPORT MuonCompilerTargets)
install(EXPORT MuonCompilerTargets NAMESPACE Muon:: DESTINATION lib/cmake/Muon)

# Muon::Cuda: the CUDA backend (CudaDevice, the NCCL communicator) over
# Muon::Runtime, where this build has it (MUON_HAVE_CUDA). Its CUDA runtime
# is linked statically from the consumer's CUDA toolkit (find_dependency in
# MuonConfig.cmake); cuBLAS and NCCL are loaded at run time. muon-cuda-check,
# its self-check, goes with it.
if(MUON_HAVE_CUDA)
  install(DIRECTORY runtime/backends/cuda/include/muon/Runtime/Cuda
          DESTINATION include/muon/Runtime)
  install(TARGETS muon-cuda-check RUNTIME DESTINATION bin)
  install(TARGETS MuonRuntimeCuda EXPORT MuonCudaTargets ARCHIVE DESTINATION lib)
  add_library(MuonCudaAll INTERFACE)
  target_link_libraries(MuonCudaAll INTERFACE MuonRuntimeCuda MuonRuntimeCpu)
  set_target_properties(MuonCudaAll PROPERTIES EXPORT_NAME Cuda)
  install(TARGETS MuonCudaAll EXPORT MuonCudaTargets)
  install(EXPORT MuonCudaTargets NAMESPACE Muon:: DESTINATION lib/cmake/Muon)
endif()

configure_package_config_file(cmake/MuonConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/MuonConfig.cmake
  INSTALL_DESTINATION lib/cmake/Muon)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/MuonConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/MuonConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/MuonConfigVersion.cmake
        DESTINATION lib/cmake/Muon)
