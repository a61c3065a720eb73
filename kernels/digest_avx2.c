/* digest_avx2.c - XXH3-128 with AVX2 (see digest.h, digest_isa.h). */
#if defined(__x86_64__) && defined(__GNUC__)
#if defined(__clang__)
/* clang ignores the GCC pragma: give every function (xxhash's inlined ones
 * too) the target and pick xxhash's vector unit by hand */
#pragma clang attribute push(__attribute__((target("avx2,bmi,bmi2"))), apply_to = function)
#define XXH_VECTOR 2
#include <immintrin.h>
#else
#pragma GCC target("avx2,bmi,bmi2")
#endif
#define DC_DG_NAME(x) x##_avx2
#define DC_DG_LABEL "avx2"
#define DC_DG_VECTOR XXH_AVX2
#include "kernels/digest_isa.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
typedef int dc_digest_avx2_unused;
#endif
