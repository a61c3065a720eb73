/*
 * digest_isa.h - body of digest_base.c / digest_avx2.c / digest_avx512.c:
 * XXH3-128 inlined from <xxhash.h> (XXH_INLINE_ALL: private static copies,
 * no clash with libxxhash's symbols) under the translation unit's
 * `#pragma GCC target`, which also sets __AVX512F__ / __AVX2__ and so
 * XXH_VECTOR.  The includer defines DC_DG_NAME(x) (x ## _isa), DC_DG_LABEL
 * (the table's name) and, for the vector builds, DC_DG_VECTOR (the
 * XXH_VECTOR it expects); the file defines the table DC_DG_NAME(dc_digest_ops).
 *
 * The span digest reproduces XXH3_hashLong_128b (xxhash 0.8.x, default
 * secret) split at 1024-byte block boundaries: blocks, each followed by a
 * scramble, then the last partial block, the last stripe and the merge.
 * Inputs of <= 240 bytes take the one-shot path.  Tests compare it with
 * libxxhash for many lengths and split points.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kernels/digest.h"

#ifdef DC_DG_VECTOR
#if XXH_VECTOR != DC_DG_VECTOR
#error "XXH_VECTOR is not the vector unit this file is built for"
#endif
#endif

#define DC_DG_SECRET_SIZE sizeof(XXH3_kSecret)
#define DC_DG_STRIPES ((DC_DG_SECRET_SIZE - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE)
#define DC_DG_BLOCK (XXH_STRIPE_LEN * DC_DG_STRIPES)
_Static_assert(DC_DG_BLOCK == 1024, "XXH3 block of the default secret");

static dc_digest_t DC_DG_NAME(dc_digest128)(const void *buf, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(len ? buf : "", len);
    dc_digest_t d = {.lo = h.low64, .hi = h.high64};
    return d;
}

static void DC_DG_NAME(dc_span_init)(dc_span_digest_t *s)
{
    static const uint64_t init[8] = XXH3_INIT_ACC;
    memcpy(s->acc, init, sizeof(init));
    s->blocks = 0;
}

static void DC_DG_NAME(dc_span_advance)(dc_span_digest_t *s, const void *data,
                                        size_t data_off, size_t upto)
{
    if (s->len <= XXH3_MIDSIZE_MAX)
        return;
    /* full blocks the one-shot loop runs: (len - 1) / block */
    size_t nb = DC_MIN(upto, s->len) / DC_DG_BLOCK;
    nb = DC_MIN(nb, (s->len - 1) / DC_DG_BLOCK);
    if (nb <= s->blocks)
        return;
    XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB];
    memcpy(acc, s->acc, sizeof(acc));
    for (size_t n = s->blocks; n < nb; n++) {
        size_t o = n * DC_DG_BLOCK;
        const xxh_u8 *in = o >= data_off ? (const xxh_u8 *)data + (o - data_off) : s->buf + o;
        XXH3_accumulate(acc, in, XXH3_kSecret, DC_DG_STRIPES, XXH3_accumulate_512);
        XXH3_scrambleAcc(acc, XXH3_kSecret + DC_DG_SECRET_SIZE - XXH_STRIPE_LEN);
    }
    memcpy(s->acc, acc, sizeof(acc));
    s->blocks = nb;
}

static dc_digest_t DC_DG_NAME(dc_span_final)(dc_span_digest_t *s)
{
    size_t len = s->len;
    if (len <= XXH3_MIDSIZE_MAX)
        return DC_DG_NAME(dc_digest128)(s->buf, len);
    DC_DG_NAME(dc_span_advance)(s, s->buf, 0, len);
    XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB];
    memcpy(acc, s->acc, sizeof(acc));
    const xxh_u8 *in = s->buf;
    const xxh_u8 *secret = XXH3_kSecret;
    size_t nb = s->blocks;
    /* last partial block */
    size_t stripes = ((len - 1) - DC_DG_BLOCK * nb) / XXH_STRIPE_LEN;
    XXH3_accumulate(acc, in + nb * DC_DG_BLOCK, secret, stripes, XXH3_accumulate_512);
    /* last stripe */
    XXH3_accumulate_512(acc, in + len - XXH_STRIPE_LEN,
                        secret + DC_DG_SECRET_SIZE - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
    dc_digest_t d;
    d.lo = XXH3_mergeAccs(acc, secret + XXH_SECRET_MERGEACCS_START, (xxh_u64)len * XXH_PRIME64_1);
    d.hi = XXH3_mergeAccs(acc,
                          secret + DC_DG_SECRET_SIZE - sizeof(acc) - XXH_SECRET_MERGEACCS_START,
                          ~((xxh_u64)len * XXH_PRIME64_2));
    return d;
}

const dc_digest_ops_t DC_DG_NAME(dc_digest_ops) = {
    .name = DC_DG_LABEL,
    .digest128 = DC_DG_NAME(dc_digest128),
    .span_init = DC_DG_NAME(dc_span_init),
    .span_advance = DC_DG_NAME(dc_span_advance),
    .span_final = DC_DG_NAME(dc_span_final),
};
