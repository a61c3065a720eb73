#!/bin/sh
# Configure (once) and build deltacast into ./build.
set -eu
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release -Db_ndebug=false >/dev/null
fi
ninja -C build >/dev/null
