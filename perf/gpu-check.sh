#!/bin/sh
# gpu-check.sh - on a machine with an NVIDIA GPU: build with CUDA, run the
# CUDA kernel tests (suite 'hw', byte-for-byte against the CPU reference,
# the CRC32C kernel included), the transports' GPU-memory tests (verbs/
# gpumem, and ucx moving GPU memory: skipped with the reason when this UCX
# has no CUDA support), the emulated-runtime suite (emu: the same kernels on
# the CPU, as CI runs them), a refit with weights in GPU memory for real (a
# staging receiver beside a device-apply receiver, engine/devpath.c: bytes
# across PCIe per version, byte-exact, repair and abort; with the order0
# model (xor-sparse) and the default (ctx-sparse decoded on the device:
# its PCIe bytes vs its payload), the ctx-sparse device decoder against
# dc_ctx_decode on the GPU (emu_ctx: random and hostile payloads), and print each
# kernel's throughput as a fraction of the GPU's memory bandwidth (crc32c
# also per 512 KiB piece, the device XXH3-128 digest included).
#
#   perf/gpu-check.sh [--build-dir DIR] [--arch sm_XX] [--mib M] [--bw GBS]
#                     [--params P]
#
# --params: the device refit's model size (default 1e7 parameters).
#
# --arch defaults to the compute capability nvidia-smi reports (else sm_90);
# --bw overrides the peak DRAM bandwidth derived from the driver's memory
# clock and bus width.  Exit status: 0 when the tests pass and the bench
# ran, 1 otherwise.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
build="$src/build-gpu"
arch=""
mib=1024
bw=""
params=1e7
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --bw) bw=$2; shift 2 ;;
    --params) params=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

for tool in meson ninja nvcc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "gpu-check: '$tool' not found" >&2; exit 1; }
done
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2
    exit 1
fi
nvidia-smi -L
if [ -z "$arch" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
    arch="sm_${cc:-90}"
fi
echo "gpu-check: nvcc -arch=$arch, build dir $build"

if [ -f "$build/build.ninja" ]; then
    meson configure "$build" -Dcuda=enabled -Dgpu_arch="$arch" >/dev/null
else
    meson setup "$build" "$src" -Dcuda=enabled -Dgpu_arch="$arch" >/dev/null
fi
ninja -C "$build"

echo "== CUDA kernel tests (suite hw) =="
meson test -C "$build" --suite hw --print-errorlogs
echo "== GPU memory in the transports (verbs_gpumem, verbs_ucx gpu_memory_*) =="
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$build/tests/verbs_test_gpumem" --verbose >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E '^\[(PASS|SKIP|FAIL)' "$log" || true
if [ -x "$build/tests/verbs_test_ucx" ]; then
    "$build/tests/verbs_test_ucx" --verbose --filter 'ucx/gpu_memory_*' >"$log" 2>&1 ||
        { cat "$log"; exit 1; }
    grep -E '^\[(PASS|SKIP|FAIL)' "$log" || true
fi

echo "== weights in GPU memory in the engine (engine_api cuda_memory_*) =="
DELTACAST_BIN="$build/cli/deltacast" "$build/tests/engine_test_api" --verbose \
    --filter 'api/cuda_memory_*' >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E '^\[(PASS|SKIP|FAIL)' "$log" || true

echo "== the emulated CUDA runtime (suite emu: what CI checks without a GPU) =="
meson test -C "$build" --suite emu --print-errorlogs

echo "== weights in GPU memory, device apply vs staging, for real (emu_refit on the GPU, $params params) =="
DELTACAST_TEST_REAL_CUDA=1 DELTACAST_TEST_PARAMS="$params" DELTACAST_LOG=warn \
    DELTACAST_BIN="$build/cli/deltacast" "$build/tests/emu_test_emu_refit" --verbose \
    >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E 'emu_refit:|^\[(PASS|SKIP|FAIL)' "$log" || true
grep -q "the GPU's CUDA runtime" "$log" ||
    { echo "gpu-check: the device refit did not run on the GPU" >&2; exit 1; }

echo "== ctx-sparse decoded and applied on the GPU against the CPU (emu_ctx for real) =="
DELTACAST_TEST_REAL_CUDA=1 DELTACAST_LOG=warn "$build/tests/emu_test_emu_ctx" --verbose \
    >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E 'emu_ctx:|^\[(PASS|SKIP|FAIL)' "$log" || true
grep -q "the GPU's CUDA runtime" "$log" ||
    { echo "gpu-check: the ctx decoder test did not run on the GPU" >&2; exit 1; }
echo "== a device sender, for real (emu_sender: payloads vs the CPU encoder; emu_sender_refit, $params params) =="
DELTACAST_TEST_REAL_CUDA=1 "$build/tests/emu_test_emu_sender" --verbose >"$log" 2>&1 ||
    { cat "$log"; exit 1; }
grep -E 'emu_sender:|^\[(PASS|SKIP|FAIL)' "$log" || true
grep -q "the GPU's CUDA runtime" "$log" ||
    { echo "gpu-check: the device sender's encode did not run on the GPU" >&2; exit 1; }
DELTACAST_TEST_REAL_CUDA=1 DELTACAST_TEST_PARAMS="$params" DELTACAST_LOG=warn \
    DELTACAST_BIN="$build/cli/deltacast" "$build/tests/emu_test_emu_sender_refit" --verbose \
    >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E 'emu_sender_refit:|^\[(PASS|SKIP|FAIL)' "$log" || true
grep -q "the GPU's CUDA runtime" "$log" ||
    { echo "gpu-check: the device sender's refit did not run on the GPU" >&2; exit 1; }

echo "== CUDA kernel throughput =="
bench="$build/tests/kernels/gpu_bench"
[ -x "$bench" ] || { echo "gpu-check: $bench was not built" >&2; exit 1; }
if [ -n "$bw" ]; then
    "$bench" --mib "$mib" --bw "$bw"
else
    "$bench" --mib "$mib"
fi
