# -*- Python -*-

import os
import shutil
import sys

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "linac"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(
    ("%nvcc", shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"))
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.linac_obj_root, "tests")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "cpu", "runtime", "reference", "harness", "gpu", "fuzz", "Inputs"]

config.substitutions.append(("%examples", os.path.join(config.linac_src_root, "examples")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
# Kernel builds are cached; keep the suite's cache inside the build tree.
config.environment["LINAC_CACHE_DIR"] = os.path.join(config.test_exec_root, "kernel-cache")

tool_dirs = [config.linac_tools_dir, config.llvm_tools_dir]
tools = [ToolSubst("linac-opt", unresolved="fatal"), ToolSubst("linac-run", unresolved="fatal"),
         ToolSubst("linac", unresolved="fatal")]
llvm_config.add_tool_substitutions(tools, tool_dirs)
