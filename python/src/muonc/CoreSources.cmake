# _core's translation units, one per binding (core/Bindings.h), for
# python/CMakeLists.txt (muonc's extension) and unittests/CMakeLists.txt
# (the same over the fake GPU, _core_fakegpu).
set(muonc_core_dir ${CMAKE_CURRENT_LIST_DIR})
set(MUONC_CORE_SOURCES
  ${muonc_core_dir}/_core.cpp
  ${muonc_core_dir}/core/Compiler.cpp
  ${muonc_core_dir}/core/Devices.cpp
  ${muonc_core_dir}/core/Errors.cpp
  ${muonc_core_dir}/core/Groups.cpp
  ${muonc_core_dir}/core/Optimizer.cpp
  ${muonc_core_dir}/core/Plan.cpp
  ${muonc_core_dir}/core/TorchGlue.cpp
)
