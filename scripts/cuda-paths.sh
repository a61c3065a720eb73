#!/bin/sh
# Print the CUDA toolkit's library folder (the one with libcudart_static.a)
# and include folder, one per line, for the nvcc given as $1.  Used by
# meson.build.  nvcc may be a wrapper script (so its own path says nothing
# about the toolkit); nvcc itself reports where its runtime lives with
# --dryrun, which we read first.  Fallbacks: CUDA_HOME / CUDA_PATH, the
# folder above the real nvcc binary, /usr/local/cuda.
nvcc=${1:-nvcc}
lib=""; inc=""
dry=$("$nvcc" --dryrun -c -x cu /dev/null -o /dev/null 2>&1 || true)
for d in $(printf '%s\n' "$dry" | sed -n 's/^#\$ LIBRARIES=//p' | tr -d '"' | tr ' ' '\n' | sed -n 's/^-L//p'); do
  [ -z "$lib" ] && [ -e "$d/libcudart_static.a" ] && lib=$(cd "$d" && pwd -P)
done
for d in $(printf '%s\n' "$dry" | sed -n 's/^#\$ INCLUDES=//p' | tr -d '"' | tr ' ' '\n' | sed -n 's/^-I//p'); do
  [ -z "$inc" ] && [ -e "$d/cuda_runtime.h" ] && inc=$(cd "$d" && pwd -P)
done
for root in "${CUDA_HOME:-}" "${CUDA_PATH:-}" \
            "$(dirname "$(dirname "$(readlink -f "$(command -v "$nvcc")")")")" /usr/local/cuda; do
  [ -n "$root" ] && [ -d "$root" ] || continue
  for d in "$root/lib64" "$root/lib" "$root/targets/x86_64-linux/lib"; do
    [ -z "$lib" ] && [ -e "$d/libcudart_static.a" ] && lib=$(cd "$d" && pwd -P)
  done
  for d in "$root/include" "$root/targets/x86_64-linux/include"; do
    [ -z "$inc" ] && [ -e "$d/cuda_runtime.h" ] && inc=$(cd "$d" && pwd -P)
  done
done
echo "${lib:-none}"
echo "${inc:-none}"
