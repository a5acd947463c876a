# -*- Python -*-

import os
import sys

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "linac"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.substitutions.append(("%python", sys.executable))
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.linac_obj_root, "tests")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "cpu", "runtime", "reference"]

config.substitutions.append(("%examples", os.path.join(config.linac_src_root, "examples")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.linac_tools_dir, config.llvm_tools_dir]
tools = [ToolSubst("linac-opt", unresolved="fatal"), ToolSubst("linac", unresolved="fatal")]
llvm_config.add_tool_substitutions(tools, tool_dirs)
