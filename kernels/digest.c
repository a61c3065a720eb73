/*
 * digest.c - the 128-bit end-to-end digest: XXH3-128 (seed 0).  lo/hi are
 * XXH128_hash_t's low64/high64.  The implementation is the kernel ISA's
 * (kern_isa.h): AVX-512, AVX2 or baseline builds of XXH3 inlined from
 * <xxhash.h> (digest.h); all give libxxhash's XXH3_128bits.
 */
#include "kernels/digest.h"

#include "kernels/kern_isa.h"

const char *dc_digest_impl(void)
{
    return dc_kern_cur()->digest->name;
}

dc_digest_t dc_digest128(const void *buf, size_t len)
{
    return dc_kern_cur()->digest->digest128(buf, len);
}

void dc_span_digest_init(dc_span_digest_t *s, const void *buf, size_t len)
{
    s->buf = buf;
    s->len = len;
    s->ops = dc_kern_cur()->digest;
    s->ops->span_init(s);
}

void dc_span_digest_advance_from(dc_span_digest_t *s, const void *data, size_t data_off,
                                 size_t upto)
{
    s->ops->span_advance(s, data, data_off, upto);
}

void dc_span_digest_advance(dc_span_digest_t *s, size_t upto)
{
    dc_span_digest_advance_from(s, s->buf, 0, upto);
}

dc_digest_t dc_span_digest_final(dc_span_digest_t *s)
{
    return s->ops->span_final(s);
}
