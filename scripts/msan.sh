#!/bin/sh
# MemorySanitizer run of the kernel and codec tests, the fuzz corpora of the
# decoders, and (through tests/kernels/test_delta.c) a gen / diff / apply /
# inspect round trip of the deltacast command: a kernel's output must be a
# function of its inputs only, so no read of memory nobody wrote.
#
#   scripts/msan.sh [BUILD_DIR]        (default build-msan; Debian 12, root)
#
# MemorySanitizer needs every library on the path instrumented: zstd and
# jansson are built from Debian's own source packages with clang
# -fsanitize=memory (once, into BUILD_DIR/deps); xxhash is inlined
# (XXH_INLINE_ALL); ISA-L, hwloc, UCX, verbs, TLS and CUDA are left out.
# Criterion's runner cannot run under MSan (its libgit2 and nanomsg are
# uninstrumented), so the test files are compiled against tests/msan's
# Criterion-compatible runner.  Every test binary runs once per ISA this CPU
# has (DELTACAST_KERN_ISA) and under two MALLOC_PERTURB_ values.  Prints
# "N passed, N failed, N skipped" last and writes it to BUILD_DIR/count.txt.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
dir=${1:-build-msan}
case "$dir" in /*) ;; *) dir="$src/$dir" ;; esac
deps="$dir/deps"
prefix="$deps/prefix"
msan="-fsanitize=memory -fsanitize-memory-track-origins"

need=""
for p in clang cmake xz-utils libyaml-dev libssl-dev libcriterion-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
if [ -n "$need" ]; then
  echo "msan: installing:$need" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null
fi

# --- zstd and jansson from Debian's source packages, instrumented -----------
if [ ! -f "$prefix/lib/libzstd.a" ] || [ ! -f "$prefix/lib/libjansson.a" ]; then
  rm -rf "$deps"
  mkdir -p "$deps/apt/lists/partial" "$deps/apt/cache/archives/partial" "$deps/src"
  # a deb-src list of its own, in a private apt state: the system's lists
  # are left as they are
  cat >"$deps/apt/src.sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt_src="-o Dir::Etc::sourcelist=$deps/apt/src.sources -o Dir::Etc::SourceParts=/dev/null
    -o Dir::State::Lists=$deps/apt/lists -o Dir::Cache=$deps/apt/cache"
  # shellcheck disable=SC2086
  apt-get $apt_src update -q >/dev/null
  # shellcheck disable=SC2086
  (cd "$deps/src" && apt-get $apt_src source --download-only -q libzstd jansson >/dev/null 2>&1)
  mkdir -p "$deps/src/zstd" "$deps/src/jansson" "$prefix/lib/pkgconfig" "$prefix/include"
  tar xJf "$deps"/src/libzstd_*.orig.tar.xz -C "$deps/src/zstd" --strip-components=1
  tar xzf "$deps"/src/jansson_*.orig.tar.gz -C "$deps/src/jansson" --strip-components=1
  echo "msan: building zstd and jansson with $msan" >&2
  make -s -C "$deps/src/zstd/lib" -j2 CC=clang CFLAGS="$msan -O1 -g -fPIC" libzstd.a >/dev/null 2>&1
  cp "$deps/src/zstd/lib/libzstd.a" "$prefix/lib/"
  cp "$deps/src/zstd/lib/zstd.h" "$deps/src/zstd/lib/zstd_errors.h" "$prefix/include/"
  cat >"$prefix/lib/pkgconfig/libzstd.pc" <<EOF
prefix=$prefix
Name: libzstd
Description: zstd built with MemorySanitizer
Version: $(sed -n 's/^#define ZSTD_VERSION_MAJOR *//p' "$prefix/include/zstd.h").$(sed -n 's/^#define ZSTD_VERSION_MINOR *//p' "$prefix/include/zstd.h").0
Libs: -L\${prefix}/lib -lzstd
Cflags: -I\${prefix}/include
EOF
  cmake -S "$deps/src/jansson" -B "$deps/jansson-build" -DCMAKE_C_COMPILER=clang \
    -DCMAKE_C_FLAGS="$msan -O1 -g -fPIC" -DJANSSON_BUILD_DOCS=OFF -DJANSSON_WITHOUT_TESTS=ON \
    -DJANSSON_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
  cmake --build "$deps/jansson-build" -j2 >/dev/null
  cmake --install "$deps/jansson-build" >/dev/null
fi

# --- the library and the command, instrumented ---------------------------
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang PKG_CONFIG_PATH="$prefix/lib/pkgconfig" meson setup "$dir" \
    -Db_sanitize=memory -Db_lundef=false -Ddefault_library=static -Dtests=disabled \
    -Dc_args="-fsanitize-memory-track-origins -DXXH_INLINE_ALL=" \
    -Disal=disabled -Dhwloc=disabled -Ducx=disabled -Dverbs=disabled -Dcuda=disabled \
    >/dev/null
fi
ninja -C "$dir" libdeltacast.a testkit/libdctestkit.a cli/deltacast >/dev/null

# --- the tests against tests/msan's runner -----------------------------------
link="$dir/testkit/libdctestkit.a $dir/libdeltacast.a $prefix/lib/libzstd.a $prefix/lib/libjansson.a -lyaml -lssl -lcrypto -lm
  -lpthread -ldl"
cflags="$msan -O1 -g -std=gnu11 -DXXH_INLINE_ALL= -I$src/tests/msan -I$src/tests/kernels
  -I$src/tests -I$src -I$src/include -I$dir -DDC_TEST_SRC_DIR=\"$src\"
  -DDC_TEST_BIN_PATH=\"$dir/cli/deltacast\""
mkdir -p "$dir/t"
tests="kern crc32c digest rans gaps codec frame delta safetensors gen poison"
for t in $tests; do
  # shellcheck disable=SC2086
  clang $cflags "$src/tests/kernels/test_$t.c" "$src/tests/msan/runner.c" $link \
    -o "$dir/t/test_$t"
done
for f in delta safetensors wire; do
  # shellcheck disable=SC2086
  clang $cflags -DDC_FUZZ_REPLAY "$src/tests/fuzz/fuzz_$f.c" $link -o "$dir/t/fuzz_${f}_replay"
done

isas="scalar"
grep -qw avx2 /proc/cpuinfo && isas="$isas avx2"
# no avx512: a MemorySanitizer build does not run it (kernels/kern_isa.c)
passed=0 failed=0 skipped=0
log="$dir/msan.log"
: >"$log"
export DELTACAST_BIN="$dir/cli/deltacast" DELTACAST_LOG=error DELTACAST_SRC="$src"
for isa in $isas; do
  for perturb in 77 140; do
    for t in $tests; do
      out=$(cd "$dir/t" && DELTACAST_KERN_ISA=$isa MALLOC_PERTURB_=$perturb \
        "./test_$t" 2>>"$log" || true)
      echo "$out" | sed "s/^/[$isa perturb $perturb] /" >>"$log"
      last=$(echo "$out" | tail -n 1)
      case "$last" in
        *" passed, "*" failed, "*" skipped")
          set -- $last
          passed=$((passed + $1)); failed=$((failed + $3)); skipped=$((skipped + $5))
          [ "$3" = 0 ] || echo "msan: test_$t ($isa, MALLOC_PERTURB_=$perturb): $last" >&2 ;;
        *)
          failed=$((failed + 1))
          echo "msan: test_$t ($isa, MALLOC_PERTURB_=$perturb) did not finish" >&2 ;;
      esac
    done
    for f in delta safetensors wire; do
      if DELTACAST_KERN_ISA=$isa MALLOC_PERTURB_=$perturb "$dir/t/fuzz_${f}_replay" \
           "$src/tests/fuzz/corpus/$f" --mutations=20 >>"$log" 2>&1; then
        passed=$((passed + 1))
      else
        failed=$((failed + 1))
        echo "msan: fuzz_${f}_replay ($isa, MALLOC_PERTURB_=$perturb) failed" >&2
      fi
    done
  done
done
if grep -q "WARNING: MemorySanitizer" "$log"; then
  echo "msan: MemorySanitizer reports (first one):" >&2
  grep -m1 -A25 "WARNING: MemorySanitizer" "$log" >&2
fi
echo "msan: ISAs $isas; log $log"
echo "$passed passed, $failed failed, $skipped skipped" | tee "$dir/count.txt"
[ "$failed" = 0 ]
