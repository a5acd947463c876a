#!/usr/bin/env bash
# compile_all.sh LINAC TARGET OUT: compiles every example and every spec of
# tests/cpu/specs and tests/gpu/specs for TARGET into OUT/NAME.linac, as
# many at a time as there are cores (LINAC_COMPILE_JOBS to say), with a
# cache of its own so that nvcc builds each; on sm_90a, the specs named
# grouped_* and the examples of an erase under a scalar gate or none also
# into OUT/KERNEL_NAME.linac for the pipelined, phased and lockstep
# chunkwise kernels, and those of an erase under a key-vector gate and
# those without an erase under no gate, a scalar one and a key-vector one,
# those reading before the write with an erase and without, and the specs
# named narrow_vector_gate*, for the phased and lockstep
# ones, and those of an erase under a scalar gate or none at K of 64 or 128
# and V of 128 for the warpgroup one (which by default leaves the batches cut
# into segments to the phased kernels).
# tests/gpu/prepare.sh uses it
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
failed=0
running=0
jobs=${LINAC_COMPILE_JOBS:-$(nproc)}
declare -A named
# Waits for one compile to end, noting a failure.
reap() {
  wait -n || failed=1
  running=$((running - 1))
}
compile() { # SPEC PACKAGE-NAME [OPTIONS...]: starts it, `jobs` at a time
  local spec=$1 name=$2
  shift 2
  # tests/gpu/specs repeats two of tests/cpu/specs under their names.
  [[ -z ${named[$name]:-} ]] || return 0
  named[$name]=1
  ((running < jobs)) || reap
  (
    if ! log=$("$linac" compile "$spec" --target "$target" "$@" \
               -o "$out/$name.linac" 2>&1); then
      printf '%s\n%s failed for %s\n' "$log" "$spec" "$target"
      exit 1
    fi
  ) &
  running=$((running + 1))
  count=$((count + 1))
}
for spec in examples/*.mlir tests/cpu/specs/*.mlir tests/gpu/specs/*.mlir; do
  compile "$spec" "$(basename "$spec" .mlir)"
done
if [[ $target == sm_90a ]]; then
  for spec in examples/deltanet.mlir examples/gated_deltanet.mlir \
              tests/gpu/specs/grouped_*.mlir; do
    for kernel in pipelined phased lockstep; do
      compile "$spec" "${kernel}_$(basename "$spec" .mlir)" \
        --chunk-kernel=$kernel
    done
  done
  for spec in examples/deltanet.mlir examples/gated_deltanet.mlir \
              tests/gpu/specs/narrow_keys_erase.mlir; do
    compile "$spec" "warpgroup_$(basename "$spec" .mlir)" \
      --chunk-kernel=warpgroup
  done
  for spec in examples/kda.mlir examples/gdn2.mlir \
              examples/linear_attention.mlir examples/mamba2.mlir \
              examples/gla.mlir examples/rwkv6.mlir \
              tests/cpu/specs/read_order_chunkwise.mlir \
              tests/gpu/specs/narrow_vector_gate*.mlir; do
    for kernel in phased lockstep; do
      compile "$spec" "${kernel}_$(basename "$spec" .mlir)" \
        --chunk-kernel=$kernel
    done
  done
fi
while ((running > 0)); do reap; done
rm -rf "$LINAC_CACHE_DIR"
((failed == 0)) || exit 1
echo "compiled $count packages for $target"
