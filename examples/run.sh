#!/usr/bin/env bash
# The main job: parse, verify and print every example spec, check that the
# printed form parses back to the same text, and say which system it is.
set -euo pipefail
cd "$(dirname "$0")/.."
opt=build/bin/linac-opt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '%-26s %-22s %-32s %s\n' spec layer system result
failed=0
for spec in examples/*.mlir; do
  name=$(basename "$spec" .mlir)
  layer=$(grep -o 'linac.layer @[A-Za-z0-9_]*' "$spec" | cut -d' ' -f2)
  system=$(head -n1 "$spec" | sed -E 's|^// ([^:]*):.*|\1|')
  if "$opt" "$spec" > "$tmp/$name.1.mlir" 2> "$tmp/$name.err" &&
     "$opt" "$tmp/$name.1.mlir" > "$tmp/$name.2.mlir" 2>> "$tmp/$name.err" &&
     cmp -s "$tmp/$name.1.mlir" "$tmp/$name.2.mlir"; then
    result="ok (verified, round-trips)"
  else
    result="FAILED"; failed=1; cat "$tmp/$name.err"
  fi
  printf '%-26s %-22s %-32s %s\n' "$name.mlir" "$layer" "$system" "$result"
done
exit $failed
