#!/usr/bin/env bash
# compile_all.sh LINAC TARGET OUT: compiles every example and every spec of
# tests/cpu/specs and tests/gpu/specs for TARGET into OUT/NAME.linac, with
# a cache of its own so that nvcc builds each; specs named pipelined_* take
# the pipelined chunkwise kernel on sm_90a. tests/gpu/prepare.sh uses it
# for the GPU check; ctest runs it for sm_90a and sm_80 without a GPU, where
# the generated sources' static_asserts hold the plan's numbers to the
# kernels' headers.
set -euo pipefail
linac=$1 target=$2 out=$3
cd "$(dirname "$0")/../.."
mkdir -p "$out"
export LINAC_CACHE_DIR="$out/.cache"
rm -rf "$LINAC_CACHE_DIR"
count=0
for spec in examples/*.mlir tests/cpu/specs/*.mlir tests/gpu/specs/*.mlir; do
  name=$(basename "$spec" .mlir)
  options=()
  if [[ $name == pipelined_* && $target == sm_90a ]]; then
    options=(--chunk-kernel=pipelined)
  fi
  if ! log=$("$linac" compile "$spec" --target "$target" "${options[@]}" \
             -o "$out/$name.linac" 2>&1); then
    printf '%s\n%s failed for %s\n' "$log" "$spec" "$target"
    exit 1
  fi
  count=$((count + 1))
done
rm -rf "$LINAC_CACHE_DIR"
echo "compiled $count packages for $target"
