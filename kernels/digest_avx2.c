/* digest_avx2.c - XXH3-128 with AVX2 (see digest.h, digest_isa.h). */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx2,bmi,bmi2")
#define DC_DG_NAME(x) x##_avx2
#define DC_DG_VECTOR XXH_AVX2
#include "kernels/digest_isa.h"
#else
typedef int dc_digest_avx2_unused;
#endif
