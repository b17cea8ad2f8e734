# -*- Python -*-
import os
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "LLCDIST"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.llcdist_obj_root, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs", "hf_parity.py", "hf_load.py"]

config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.substitutions.append(("%models", os.path.join(config.llcdist_src_root, "models")))
# Plain python (standard library only) for the tests' small helper scripts.
config.substitutions.append(("%python", sys.executable))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    ["llc-dist", "llc-dist-opt"], [config.llcdist_tools_dir])
# The MLIR-free runner (runtime/tools/llcdist-run.cpp), built in the runtime's binary directory.
llvm_config.add_tool_substitutions(
    ["llcdist-run"], [os.path.join(config.llcdist_obj_root, "runtime")])

# The PyTorch reference (test/reference/): Debian's python3-torch, installed by
# scripts/setup-deps.sh, lives beside /usr/bin/python3.
import shutil
import subprocess

for candidate in ["/usr/bin/python3", shutil.which("python3")]:
    if candidate and subprocess.run(
        [candidate, "-c", "import torch, numpy"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
        config.available_features.add("torch")
        config.substitutions.append(("%torch_python", candidate))
        break
else:
    # scripts/test.sh installs python3-torch and asks for the reference to run:
    # there, a missing torch is an error, never a silently skipped test.
    if os.environ.get("LLCDIST_REQUIRE_TORCH") == "1":
        lit_config.fatal("LLCDIST_REQUIRE_TORCH=1 but no python3 can import torch "
                         "and numpy (apt-get install python3-torch python3-numpy)")

# Hugging Face transformers itself (test/reference/hf_load.py): a virtual
# environment over Debian's torch that scripts/setup-deps.sh makes in .venv-hf/
# (Debian 12 packages no transformers). LLCDIST_REQUIRE_TORCH=1 requires it too,
# unless setup-deps recorded that PyPI could not be reached (.venv-hf.unavailable).
hf_python = os.path.join(config.llcdist_src_root, ".venv-hf", "bin", "python")
if os.path.exists(hf_python) and subprocess.run(
        [hf_python, "-c", "import transformers, torch, numpy"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
    config.available_features.add("transformers")
    config.substitutions.append(("%hf_python", hf_python))
elif os.path.exists(os.path.join(config.llcdist_src_root, ".venv-hf.unavailable")):
    # setup-deps could not reach PyPI: say so in every run, with pip's reason.
    with open(os.path.join(config.llcdist_src_root, ".venv-hf.unavailable")) as f:
        lit_config.warning("transformers is not installed (PyPI unreachable when "
                           "scripts/setup-deps.sh ran): reference/hf-load.test is "
                           "UNSUPPORTED. pip said: " + f.read().strip())
elif os.environ.get("LLCDIST_REQUIRE_TORCH") == "1":
    lit_config.fatal("LLCDIST_REQUIRE_TORCH=1 but " + hf_python + " cannot import "
                     "transformers (run scripts/setup-deps.sh)")
# llc-dist run's tests compare exact numbers of the CPU backend: pin it, also on a machine with a GPU
# (scripts/test-gpu.sh checks the CUDA backend against it).
config.environment["LLCDIST_BACKEND"] = "cpu"
config.substitutions.append(("%scripts", os.path.join(config.llcdist_src_root, "scripts")))
# A visible NVIDIA GPU (nvidia-smi -L works): the tests of --backend cuda without one are unsupported.
try:
    if subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      timeout=30).returncode == 0:
        config.available_features.add("gpu")
except (OSError, subprocess.SubprocessError):
    pass
config.substitutions.append(("%data", os.path.join(config.llcdist_src_root, "data")))
config.substitutions.append(("%reference", os.path.join(config.llcdist_src_root, "test", "reference")))
