#!/bin/sh
# gpu-pack.sh - pack a CUDA-enabled build's GPU test programs, with the
# shared libraries they load, for a GPU machine that lacks this project's
# build dependencies (no Criterion, zstd, hwloc, ... packages there, nothing
# to fetch): perf/gpu-check.sh --prebuilt DIR then runs them there.
#
#   perf/gpu-pack.sh [--build-dir DIR] OUT_DIR
#
# The build (default build/) must have the CUDA kernels built in (meson
# option cuda; scripts/test.sh's build has them where nvcc is on PATH).
# OUT_DIR gets tests/, cli/deltacast and lib/ (every library the programs
# load except the C runtime's own: libc, libm, libgcc_s, libstdc++, the
# loader), all stripped of debug information.  The CUDA runtime is linked
# statically; the driver (libcuda.so.1) is the GPU machine's.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build="$src/build"
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-pack: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -eq 1 ] || { echo "gpu-pack: give the output directory (try --help)" >&2; exit 2; }
out=$1
grep -q "DC_HAVE_CUDA 1" "$build/dc_config.h" 2>/dev/null ||
    { echo "gpu-pack: $build has no CUDA kernels built in (meson configure -Dcuda=enabled)" >&2; exit 1; }
# what gpu-check.sh --prebuilt runs (the emu tests it runs with the GPU's
# runtime; the emulated-only ones, arena, kern_cuda and values, stay here:
# each program carries the library and CUDA's static runtime, ~3 MB)
progs="tests/kernels_test_kern_cuda tests/kernels_test_kern_cuda_values tests/verbs_test_gpumem
       tests/engine_test_api tests/kernels/gpu_bench cli/deltacast"
for t in refit ctx dense refit_kinds sender sender_refit; do
    progs="$progs tests/emu_test_emu_$t"
done
rm -rf "$out"
mkdir -p "$out/tests/kernels" "$out/cli" "$out/lib"
for p in $progs; do
    [ -x "$build/$p" ] || { echo "gpu-pack: $build/$p was not built" >&2; exit 1; }
    strip --strip-debug -o "$out/$p" "$build/$p"
    ldd "$build/$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' >>"$out/libs.txt"
done
sort -u "$out/libs.txt" | while read -r l; do
    case "$(basename "$l")" in
    libc.so.*|libm.so.*|libresolv.so.*|libutil.so.*|libgcc_s.so.*|libstdc++.so.*|ld-linux*|libpthread.so.*|libdl.so.*|librt.so.*) continue ;;
    esac
    strip --strip-debug -o "$out/lib/$(basename "$l")" "$l"
done
rm -f "$out/libs.txt"
echo "gpu-pack: $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out"
kib=$(du -sk "$out" | cut -f1)
[ "$kib" -le $((60 * 1024)) ] ||
    echo "gpu-pack: warning: $out is $((kib / 1024)) MiB; the device tool carries 64 MiB in all" >&2
