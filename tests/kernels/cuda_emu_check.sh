#!/bin/sh
# cuda_emu_check.sh [BUILD_DIR [MESON_TEST_ARGS...]] - check the CUDA kernels' logic without a
# GPU: the `emu` suite (tests/emu/), where kernels/kern_cuda.cu runs on the
# CPU through tests/kernels/cuda_emu.h's thread model over an emulated CUDA
# runtime whose device memory the host must not touch.  BUILD_DIR (default
# build/) must be configured; e.g. `cuda_emu_check.sh build emu_emu_kern_cuda`.
# Not a substitute for perf/gpu-check.sh on a GPU.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
[ $# -gt 0 ] && shift
exec meson test -C "$build" --print-errorlogs --num-processes 2 --suite emu "$@"
