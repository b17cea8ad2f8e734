# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "LLCDIST"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.llcdist_obj_root, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs"]

config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.substitutions.append(("%models", os.path.join(config.llcdist_src_root, "models")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    ["llc-dist", "llc-dist-opt"], [config.llcdist_tools_dir])
