/*
 * digest.c - the 128-bit end-to-end digest: XXH3-128 (libxxhash, seed 0).
 * lo/hi are XXH128_hash_t's low64/high64.
 */
#include "kernels/kern.h"

#include <xxhash.h>

dc_digest_t dc_digest128(const void *buf, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(len ? buf : "", len);
    dc_digest_t d = {.lo = h.low64, .hi = h.high64};
    return d;
}
