#!/bin/sh
# A host compiler that answers --version and otherwise hangs, so that a
# test can interrupt `linac compile` while it builds.
if [ "$1" = "--version" ]; then
  echo "slow-compiler 1.0"
  exit 0
fi
exec sleep 60
