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
# dc_ctx_decode on the GPU (emu_ctx: random and hostile payloads), the dense
# and put kinds on the GPU against the CPU codec (emu_dense) and a refit
# whose device receiver gets every chunk kind (emu_refit_kinds), and print each
# kernel's throughput as a fraction of the GPU's memory bandwidth (crc32c
# also per 512 KiB piece, the device XXH3-128 digest included).
#
#   perf/gpu-check.sh [--build-dir DIR] [--arch sm_XX] [--mib M] [--bw GBS]
#                     [--params P] [--big-params P] [--prebuilt DIR]
#
# --params: the device refit's model size (default 1e7 parameters).
# --big-params P: after every other step, one more refit at P parameters
#   (emu_refit's default-model variant alone: staging and device apply side
#   by side, byte-exact, with repair and abort), e.g. 1e8 or 1e9 (a 2 GB
#   BF16 model: minutes, most of it the CPU's generation and encode).
# --prebuilt DIR: run the programs perf/gpu-pack.sh packed into DIR (built
#   with CUDA on another machine, with their libraries: for a GPU machine
#   without this project's build dependencies) instead of building; the
#   emulated suite's CPU run is left to CI there.  Every step runs even
#   when one before it failed; the exit status says whether any did.
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
big=""
prebuilt=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --bw) bw=$2; shift 2 ;;
    --params) params=$2; shift 2 ;;
    --big-params) big=$2; shift 2 ;;
    --prebuilt) prebuilt=$2; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2
    exit 1
fi
nvidia-smi -L
nvidia-smi --query-gpu=driver_version,compute_cap,memory.total,clocks.max.memory \
    --format=csv,noheader 2>/dev/null || true
if [ -n "$prebuilt" ]; then
    build=$(cd "$prebuilt" && pwd)
    [ -x "$build/cli/deltacast" ] ||
        { echo "gpu-check: $build/cli/deltacast missing (perf/gpu-pack.sh packs it)" >&2; exit 1; }
    export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu-check: prebuilt programs in $build"
else
    for tool in meson ninja nvcc; do
        command -v "$tool" >/dev/null 2>&1 || { echo "gpu-check: '$tool' not found" >&2; exit 1; }
    done
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
fi
export DELTACAST_BIN="$build/cli/deltacast" DELTACAST_SRC="$src" DELTACAST_BUILD="$build"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=""
# step TITLE PATTERN ONGPU PROGRAM [ARGS...]: run a test program, print
# the lines matching PATTERN and its results (its whole output when it
# fails); ONGPU: a line its output must hold to show the GPU ran it, or -
step() {
    title=$1 pat=$2 ongpu=$3
    shift 3
    echo "== $title =="
    t0=$(date +%s)
    if "$@" >"$log" 2>&1; then
        grep -E "$pat|^\[(PASS|SKIP|FAIL)|^(not )?ok " "$log" || true
        if [ "$ongpu" != - ] && ! grep -q "$ongpu" "$log"; then
            echo "gpu-check: $title did not run on the GPU"
            failed="$failed [$title]"
        fi
    else
        cat "$log"
        failed="$failed [$title]"
    fi
    echo "   ($(($(date +%s) - t0)) s)"
}
gpu="the GPU's CUDA runtime"

if [ -n "$prebuilt" ]; then
    step "CUDA kernel tests (suite hw: kern_cuda)" '^$' - "$build/tests/kernels_test_kern_cuda" --verbose --jobs=1
    step "CUDA kernel tests (suite hw: kern_cuda_values)" '^$' - \
        "$build/tests/kernels_test_kern_cuda_values" --verbose --jobs=1
else
    echo "== CUDA kernel tests (suite hw) =="
    meson test -C "$build" --suite hw --print-errorlogs || failed="$failed [suite hw]"
fi
echo "== CUDA kernel throughput =="
bench="$build/tests/kernels/gpu_bench"
if [ ! -x "$bench" ]; then
    echo "gpu-check: $bench was not built"
    failed="$failed [gpu_bench]"
elif ! "$bench" --mib "$mib" ${bw:+--bw "$bw"}; then
    failed="$failed [gpu_bench]"
fi
step "GPU memory in the transports (verbs_gpumem)" '^$' - "$build/tests/verbs_test_gpumem" --verbose --jobs=1
if [ -x "$build/tests/verbs_test_ucx" ]; then
    step "GPU memory in UCX (verbs_ucx gpu_memory_*)" '^$' - \
        "$build/tests/verbs_test_ucx" --verbose --jobs=1 --filter 'ucx/gpu_memory_*'
fi
step "weights in GPU memory in the engine (engine_api cuda_memory_*)" '^$' - \
    "$build/tests/engine_test_api" --verbose --jobs=1 --filter 'api/cuda_memory_*'
if [ -n "$prebuilt" ]; then
    echo "== the emulated CUDA runtime (suite emu on the CPU): left to CI with --prebuilt =="
else
    echo "== the emulated CUDA runtime (suite emu: what CI checks without a GPU) =="
    meson test -C "$build" --suite emu --print-errorlogs || failed="$failed [suite emu]"
fi
export DELTACAST_TEST_REAL_CUDA=1 DELTACAST_LOG=warn
step "weights in GPU memory, device apply vs staging, for real (emu_refit on the GPU, $params params)" \
    'emu_refit:' "$gpu" env DELTACAST_TEST_PARAMS="$params" "$build/tests/emu_test_emu_refit" --verbose --jobs=1
step "ctx-sparse decoded and applied on the GPU against the CPU (emu_ctx for real)" \
    'emu_ctx:' "$gpu" "$build/tests/emu_test_emu_ctx" --verbose --jobs=1
step "dense and put kinds on the GPU against the CPU (emu_dense for real)" \
    'emu_dense:' "$gpu" "$build/tests/emu_test_emu_dense" --verbose --jobs=1
step "every chunk kind to a device receiver, for real (emu_refit_kinds on the GPU, $params params)" \
    'emu_refit_kinds:' "$gpu" env DELTACAST_TEST_PARAMS="$params" \
    "$build/tests/emu_test_emu_refit_kinds" --verbose --jobs=1
step "a device sender's encode against the CPU encoder (emu_sender for real)" \
    'emu_sender:' "$gpu" "$build/tests/emu_test_emu_sender" --verbose --jobs=1
step "a device sender's refit (emu_sender_refit for real, $params params)" \
    'emu_sender_refit:' "$gpu" env DELTACAST_TEST_PARAMS="$params" \
    "$build/tests/emu_test_emu_sender_refit" --verbose --jobs=1
if [ -n "$big" ]; then
    step "device apply vs staging at $big params (emu_refit, the default model, on the GPU)" \
        'emu_refit:' "$gpu" env DELTACAST_TEST_PARAMS="$big" \
        "$build/tests/emu_test_emu_refit" --verbose --jobs=1 \
        --filter 'emu_refit/ctx_device_receivers_exact_with_repair_and_abort'
fi
unset DELTACAST_TEST_REAL_CUDA

if [ -n "$failed" ]; then
    echo "gpu-check: FAILED:$failed"
    exit 1
fi
echo "gpu-check: every step passed"
