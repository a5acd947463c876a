#!/usr/bin/env bash
# Runs the fuzz targets, each for SECONDS (default 3600), or the
# differential run on COUNT mutants (seed SEED, default a random one):
#
#   tests/fuzz/run.sh [SECONDS [spec|manifest|npy]...]
#   tests/fuzz/run.sh --differential COUNT [SEED]
#
# The fuzzers run from the clang build LINAC_BUILD (default build-sanitize,
# see docs/testing.md), each with its corpus in
# $LINAC_BUILD/tests/fuzz/corpus/, seeded from the examples, the tests'
# specs, mutants of the examples, generated manifests and .npy files and
# tests/fuzz/regressions/; a crashing input lands in
# $LINAC_BUILD/tests/fuzz/artifacts/ and the run fails. The differential
# run uses LINAC_BUILD (default build) and copies each defective mutant
# into $LINAC_BUILD/tests/fuzz/long/defects/.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
regressions=$root/tests/fuzz/regressions

if [[ ${1:-} == --differential ]]; then
  build=${LINAC_BUILD:-$root/build}
  count=${2:?usage: run.sh --differential COUNT [SEED]}
  seed=${3:-$RANDOM}
  work=$build/tests/fuzz/long
  echo "== $count mutants, seed $seed"
  rm -rf "$work"
  python3 "$root/tests/fuzz/mutate_specs.py" --count "$count" --seed "$seed" \
    --out "$work/mutants" "$root"/examples/*.mlir "$root"/tests/cpu/specs/*.mlir &&
    "$build/bin/linac-differential" "$work" "$work/mutants" \
      "$regressions/differential"
  exit
fi

build=${LINAC_BUILD:-$root/build-sanitize}
seconds=${1:-3600}
shift $(($# > 0))
fuzzers=("$@")
((${#fuzzers[@]})) || fuzzers=(spec manifest npy)
work=$build/tests/fuzz
# MLIR's libraries are not instrumented, so the allocator code that both
# they and our instrumented code inline would poison memory for one and not
# the other.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allow_user_poisoning=0}

if [[ ! -d $work/seeds ]]; then
  staging=$work/seeds.tmp$$
  python3 "$root/tests/fuzz/make_seeds.py" --linac "$build/bin/linac" \
    --out "$staging" "$root"/examples/*.mlir "$root"/tests/cpu/specs/*.mlir \
    "$root"/tests/gpu/specs/*.mlir &&
    python3 "$root/tests/fuzz/mutate_specs.py" --count 200 --seed 1 \
      --out "$staging/spec" "$root"/examples/*.mlir || exit 1
  # Another run may have just written them.
  mv -T "$staging" "$work/seeds" 2>/dev/null || rm -rf "$staging"
fi

status=0
for fuzzer in "${fuzzers[@]}"; do
  options=()
  case $fuzzer in
    spec) seeds=("$root/examples" "$root"/tests/{dialect,compiler,examples,driver}
                 "$root"/tests/{cpu,gpu}/specs "$regressions/differential"
                 "$work/seeds/spec")
          options=(-dict="$root/tests/fuzz/spec.dict") ;;
    manifest | npy) seeds=("$work/seeds/$fuzzer") ;;
    *) echo "run.sh: unknown fuzzer '$fuzzer'" >&2; exit 2 ;;
  esac
  [[ -d $regressions/$fuzzer ]] && seeds+=("$regressions/$fuzzer")
  mkdir -p "$work/corpus/$fuzzer" "$work/artifacts"
  echo "== ${fuzzer}_fuzzer for ${seconds}s"
  "$build/bin/${fuzzer}_fuzzer" -max_total_time="$seconds" -timeout=30 \
    -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$fuzzer-" "${options[@]}" \
    "$work/corpus/$fuzzer" "${seeds[@]}" || status=1
done
exit $status
