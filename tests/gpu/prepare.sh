#!/usr/bin/env bash
# Run here, on the machine with the compiler: compiles every example, and
# the specs in tests/cpu/specs/ and tests/gpu/specs/ that cover other
# paths (read order, growing and zero decays, odd dimensions), for a GPU target
# into .gpu-packages/ and copies the header-only libraries the runtime and
# linac-run need (nlohmann-json, CLI11) into .deps/, for GPU machines that
# lack them. Carry both
# folders (and the working tree) to the GPU machine and run tests/gpu/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:-sm_90a}
mkdir -p .deps/include .deps/share/cmake
tests/gpu/compile_all.sh build/bin/linac "$target" .gpu-packages
cp -r /usr/include/nlohmann .deps/include/
cp -r /usr/share/cmake/nlohmann_json .deps/share/cmake/
cp -r /usr/include/CLI .deps/include/
cp -r /usr/share/cmake/CLI11 .deps/share/cmake/
