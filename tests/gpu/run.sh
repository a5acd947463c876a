#!/usr/bin/env bash
# Run on a GPU machine: builds the runtime, linac-run and the GPU check
# there (no MLIR needed), checks every package against the fp64 reference
# and benchmarks them. Options (--rounds N, --reps N, --bench-only) go to
# linac-gpu-check; --parallel P runs P checkers side by side (the fp64
# reference runs on the host, one core each), each on a share of the
# packages with every round, or, with fewer packages than checkers, on
# every package with a share of the rounds; each writes its log to
# build-gpu/check-P.log, and then the packages are benchmarked once. --python runs
# the Python package's tests on CUDA tensors instead (python3 with torch,
# its headers and pytest), with linac.torch's C++ module built there.
# Packages default to those tests/gpu/prepare.sh compiled.
set -euo pipefail
cd "$(dirname "$0")/../.."
options=()
packages=()
rounds=1
parallel=1
python=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    --reps) options+=("$1" "$2"); shift 2 ;;
    --*) options+=("$1"); shift ;;
    *) packages+=("$1"); shift ;;
  esac
done
if [ ${#packages[@]} -eq 0 ]; then packages=(.gpu-packages/*.linac); fi
cmake -G Ninja -S . -B build-gpu -DLINAC_RUNTIME_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.deps" >/dev/null
if [ $python -eq 1 ]; then
  # linac.torch's C++ module too, against this python3's torch; the tests
  # then require it.
  cmake -B build-gpu -DLINAC_TORCH_OPS=ON \
    -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
  cmake --build build-gpu --target linac_python
  export LINAC_TORCH_OPS=1
  if [ -d .gpu-python ]; then
    export LINAC_GPU_PACKAGES="$PWD/.gpu-python/packages"
    export LINAC_CACHE_DIR="$PWD/.gpu-python/cache"
    export LINAC_COMPILER="$PWD/.gpu-python/linac"
  fi
  fla=""
  if [ -d .fla ]; then fla="$PWD/.fla:"; fi
  PYTHONPATH="$fla$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
  LINAC_LIBRARY="$PWD/build-gpu/lib/liblinac.so" PYTHONDONTWRITEBYTECODE=1 \
    exec python3 -m pytest -q -rs -p no:cacheprovider \
      tests/python/test_torch_cuda.py tests/python/test_fla_cuda.py \
      tests/python/test_distributed_cuda.py
fi
cmake --build build-gpu --target linac-gpu-check linac-run linac_runtime_shared
check=build-gpu/bin/linac-gpu-check
if [ "$parallel" -le 1 ]; then
  exec "$check" --bench --rounds "$rounds" "${options[@]}" "${packages[@]}"
fi
pids=()
for p in $(seq "$parallel"); do
  if [ ${#packages[@]} -ge "$parallel" ]; then
    share=()
    for ((i = p - 1; i < ${#packages[@]}; i += parallel)); do
      share+=("${packages[$i]}")
    done
    "$check" --rounds "$rounds" "${options[@]}" "${share[@]}" \
      > "build-gpu/check-$p.log" 2>&1 &
  else
    "$check" --rounds $(( (rounds + parallel - 1) / parallel )) \
      "${options[@]}" "${packages[@]}" > "build-gpu/check-$p.log" 2>&1 &
  fi
  pids+=($!)
done
status=0
for p in $(seq "$parallel"); do
  wait "${pids[$((p - 1))]}" || status=1
  grep -E "^round [0-9]+( of |:.*FAIL)" "build-gpu/check-$p.log"
done
[ $status -eq 0 ] || { echo "a checker failed: see build-gpu/check-*.log"; exit 1; }
exec "$check" --bench-only "${options[@]}" "${packages[@]}"
