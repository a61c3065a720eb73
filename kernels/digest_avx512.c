/* digest_avx512.c - XXH3-128 with AVX-512 (see digest.h, digest_isa.h). */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,bmi,bmi2")
#define DC_DG_NAME(x) x##_avx512
#define DC_DG_VECTOR XXH_AVX512
#include "kernels/digest_isa.h"
#else
typedef int dc_digest_avx512_unused;
#endif
