#!/bin/sh
# Configure, build and run the whole test suite (README's test command).
#   scripts/test.sh [BUILD_DIR] [extra meson test args...]
# In CI (CI=true) warnings are errors.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
[ $# -gt 0 ] && shift
werror=false
[ "${CI:-}" = "true" ] && werror=true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Dwerror=$werror >/dev/null
else
  meson configure "$dir" -Dwerror=$werror >/dev/null
fi
ninja -C "$dir"
meson test -C "$dir" --print-errorlogs --num-processes 2 "$@"
