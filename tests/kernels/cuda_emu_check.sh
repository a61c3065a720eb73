#!/bin/sh
# cuda_emu_check.sh [BUILD_DIR [CRITERION_ARGS...]] - check the CUDA kernels' logic without a GPU:
# compile kernels/kern_cuda.cu for the CPU against tests/kernels/cuda_emu.h
# and run tests/kernels/test_kern_cuda.c on it (sizes trimmed, since every
# emulated GPU thread is an OS thread).  BUILD_DIR (default build/) must be
# configured and built (its dc_config.h and libdeltacast.a are used).
# Takes a few minutes; e.g. `cuda_emu_check.sh build --filter 'kern_cuda/crc*'`
# runs one test.  Not a substitute for perf/gpu-check.sh on a GPU.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
[ $# -gt 0 ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -std=c++20 -O1 -w -include "$src/tests/kernels/cuda_emu.h" -x c++ \
    -I"$src" -I"$src/include" -I"$build" -c "$src/kernels/kern_cuda.cu" -o "$tmp/emu.o"
sed -e 's/16384, 16385, 65537, 300007}/16384, 16385, 40001}/' \
    -e 's/(20u << 20) + 7}/(9u << 20) + 7}/' \
    -e 's/(1 << 20) + 3}/(1 << 16) + 3}/' \
    -e 's/(1u << 20) + 13, (9u << 20) + 3}/(1u << 19) + 13}/' \
    -e 's/!DC_HAVE_CUDA/0/' \
    -e 's/if (DC_HAVE_CUDA)/if (1)/' \
    "$src/tests/kernels/test_kern_cuda.c" > "$tmp/test_kern_cuda_emu.c"
gcc -std=c11 -O1 -D_GNU_SOURCE -I"$src" -I"$src/include" -I"$build" -I"$src/tests/kernels" \
    "$tmp/test_kern_cuda_emu.c" "$tmp/emu.o" "$build/libdeltacast.a" -o "$tmp/test" \
    -lcriterion -lxxhash -lisal -lzstd -ljansson -lcrypto -lpthread -lm -lstdc++
"$tmp/test" --verbose "$@"
