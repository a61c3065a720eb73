/* digest_avx512.c - XXH3-128 with AVX-512 (see digest.h, digest_isa.h). */
#if defined(__x86_64__) && defined(__GNUC__)
#if DC_KERN_EMU_AVX512
/* -Dkern_emu=avx512: xxhash's AVX-512 code over the emulated intrinsics
 * (kernels/emu), declared before <xxhash.h> looks for them */
#pragma GCC target("avx2,bmi,bmi2,popcnt,lzcnt,sse4.2,pclmul")
#include "kernels/emu/avx512_emu.h"
#define XXH_VECTOR 3
#elif defined(__clang__)
/* clang ignores the GCC pragma: give every function (xxhash's inlined ones
 * too) the target and pick xxhash's vector unit by hand */
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,bmi,bmi2"))), apply_to = function)
#define XXH_VECTOR 3
#include <immintrin.h>
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,bmi,bmi2")
#endif
#define DC_DG_NAME(x) x##_avx512
#define DC_DG_LABEL "avx512"
#define DC_DG_VECTOR XXH_AVX512
#include "kernels/digest_isa.h"
#if defined(__clang__) && !DC_KERN_EMU_AVX512
#pragma clang attribute pop
#endif
#else
typedef int dc_digest_avx512_unused;
#endif
