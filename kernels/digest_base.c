/* digest_base.c - XXH3-128 for the baseline ISA (see digest.h, digest_isa.h). */
#define DC_DG_NAME(x) x##_base
#include "kernels/digest_isa.h"
