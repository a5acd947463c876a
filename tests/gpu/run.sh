#!/usr/bin/env bash
# Run on a GPU machine: builds the runtime and the GPU check there (no MLIR
# needed), checks every package against the fp64 reference and benchmarks
# them. Packages default to those tests/gpu/prepare.sh compiled.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -eq 0 ]; then set -- .gpu-packages/*.linac; fi
cmake -G Ninja -S . -B build-gpu -DLINAC_RUNTIME_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.deps" >/dev/null
cmake --build build-gpu --target linac-gpu-check linac_runtime_shared
build-gpu/bin/linac-gpu-check --bench "$@"
