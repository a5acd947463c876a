#!/usr/bin/env bash
# The main job: compile every example for the CPU, run it on generated data
# and compare it with the fp64 reference (see tests/cpu/run_examples.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/bin/linac-examples "$work" examples/*.mlir
