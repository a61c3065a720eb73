/*
 * digest.c - the 128-bit end-to-end digest: XXH3-128 (seed 0).  lo/hi are
 * XXH128_hash_t's low64/high64.  The implementation follows the kernel ISA
 * (digest.h): AVX-512, AVX2 or baseline builds of XXH3 inlined from
 * <xxhash.h>; all give libxxhash's XXH3_128bits.
 */
#include "kernels/digest.h"

enum { DC_DG_BASE = 0, DC_DG_AVX2 = 1, DC_DG_AVX512 = 2 };

/* The kernel ISA's name is one of three fixed strings: "avx512", "avx2",
 * "scalar". */
static inline unsigned dc_dg_pick(void)
{
#if defined(__x86_64__)
    const char *isa = dc_kern_isa();
    if (isa[0] == 'a')
        return isa[3] == '5' ? DC_DG_AVX512 : DC_DG_AVX2;
#endif
    return DC_DG_BASE;
}

const char *dc_digest_impl(void)
{
    static const char *const names[] = {"base", "avx2", "avx512"};
    return names[dc_dg_pick()];
}

dc_digest_t dc_digest128(const void *buf, size_t len)
{
    switch (dc_dg_pick()) {
#if defined(__x86_64__)
    case DC_DG_AVX512: return dc_digest128_avx512(buf, len);
    case DC_DG_AVX2: return dc_digest128_avx2(buf, len);
#endif
    default: return dc_digest128_base(buf, len);
    }
}

void dc_span_digest_init(dc_span_digest_t *s, const void *buf, size_t len)
{
    s->buf = buf;
    s->len = len;
    s->impl = dc_dg_pick();
    switch (s->impl) {
#if defined(__x86_64__)
    case DC_DG_AVX512: dc_span_init_avx512(s); break;
    case DC_DG_AVX2: dc_span_init_avx2(s); break;
#endif
    default: dc_span_init_base(s); break;
    }
}

void dc_span_digest_advance_from(dc_span_digest_t *s, const void *data, size_t data_off,
                                 size_t upto)
{
    switch (s->impl) {
#if defined(__x86_64__)
    case DC_DG_AVX512: dc_span_advance_avx512(s, data, data_off, upto); break;
    case DC_DG_AVX2: dc_span_advance_avx2(s, data, data_off, upto); break;
#endif
    default: dc_span_advance_base(s, data, data_off, upto); break;
    }
}

void dc_span_digest_advance(dc_span_digest_t *s, size_t upto)
{
    dc_span_digest_advance_from(s, s->buf, 0, upto);
}

dc_digest_t dc_span_digest_final(dc_span_digest_t *s)
{
    switch (s->impl) {
#if defined(__x86_64__)
    case DC_DG_AVX512: return dc_span_final_avx512(s);
    case DC_DG_AVX2: return dc_span_final_avx2(s);
#endif
    default: return dc_span_final_base(s);
    }
}
