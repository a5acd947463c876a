#!/usr/bin/env bash
# Run on a GPU machine: builds the runtime and the GPU check there (no MLIR
# needed), checks every package against the fp64 reference and benchmarks
# them. Options (--rounds N, --reps N, --bench-only) go to linac-gpu-check;
# packages default to those tests/gpu/prepare.sh compiled.
set -euo pipefail
cd "$(dirname "$0")/../.."
options=()
packages=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds|--reps) options+=("$1" "$2"); shift 2 ;;
    --*) options+=("$1"); shift ;;
    *) packages+=("$1"); shift ;;
  esac
done
if [ ${#packages[@]} -eq 0 ]; then packages=(.gpu-packages/*.linac); fi
cmake -G Ninja -S . -B build-gpu -DLINAC_RUNTIME_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.deps" >/dev/null
cmake --build build-gpu --target linac-gpu-check linac-run linac_runtime_shared
build-gpu/bin/linac-gpu-check --bench "${options[@]}" "${packages[@]}"
