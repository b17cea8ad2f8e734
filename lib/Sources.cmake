# Source lists that more than one build compiles (absolute paths): lib/CMakeLists.txt's
# LLCDistFrontendConfig and fuzz/CMakeLists.txt's compiler-input targets both include this file, so
# a file added here reaches both (a list kept in each drifted: a new file broke the fuzz link).

# The compiler's MLIR-free input parsers: config.json (every family's reader), mesh specs, device and
# topology files.
set(LLCDIST_FRONTEND_CONFIG_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/Frontend/ModelConfig.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Frontend/ModelFamilies.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Frontend/GptFamilies.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Frontend/InitPolicy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Support/MeshSpec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Support/Topology.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Support/Device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Support/NestingDepth.cpp
)
