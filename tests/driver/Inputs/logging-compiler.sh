#!/bin/sh
# The host compiler, each call's arguments appended to $COMPILER_LOG.
# COMPILER_MODE=not-gcc answers --version as another compiler would;
# COMPILER_MODE=no-headers fails every header precompilation.
if [ "$1" = "--version" ] && [ "$COMPILER_MODE" = "not-gcc" ]; then
  echo "other-compiler 1.0"
  exit 0
fi
echo "$*" >> "$COMPILER_LOG"
case "$COMPILER_MODE $*" in
  no-headers*c++-header*) exit 1 ;;
esac
exec c++ "$@"
