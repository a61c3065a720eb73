/* digest_base.c - XXH3-128 for the baseline ISA (see digest.h, digest_isa.h). */
#define DC_DG_NAME(x) x##_base
#define DC_DG_LABEL "base"
#include "kernels/digest_isa.h"

const uint8_t *const dc_xxh3_secret = XXH3_kSecret;
_Static_assert(sizeof(XXH3_kSecret) == 192, "XXH3 default secret size");
