#!/bin/sh
# The main job on one machine: build, then run the local end-to-end demo.
set -eu
cd "$(dirname "$0")/.."
./scripts/build.sh
exec ./build/cli/deltacast demo "$@"
