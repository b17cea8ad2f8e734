# Source lists that more than one build compiles (absolute paths): runtime/CMakeLists.txt's
# llcdist_runtime_core and fuzz/CMakeLists.txt's loader targets both include this file, so a file
# added here reaches both (a list kept in each drifted: a new file broke the fuzz link).

# The loaders of every runtime input: the plan (with every op family's checker and binder, src/ops/),
# safetensors, token files and checkpoint.json, and what they call (status, checksums, the RNG, the
# mesh).
set(LLCDIST_RUNTIME_LOADER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/Status.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/FileUtil.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Rng.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Safetensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/TokenData.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/CheckpointManifest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Mesh.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/PlanJson.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/PlanManifest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/PlanOps.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/KernelChecks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/OpDefs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Communication.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Data.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Elementwise.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Embedding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Linear.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Loss.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Moe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Norm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ops/Rope.cpp
)
