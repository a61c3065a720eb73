/*
 * digest.h - XXH3-128 digests (private to kernels/), compiled three ways
 * and chosen at run time with the kernel ISA (dc_kern_isa()):
 *
 *   avx512  XXH3 inlined from <xxhash.h> with XXH_VECTOR = AVX512
 *           (digest_avx512.c),
 *   avx2    the same with AVX2 (digest_avx2.c),
 *   scalar  the same with the baseline vector unit (SSE2 on x86-64;
 *           digest_base.c).
 *
 * All give exactly XXH3_128bits(buf, len) of libxxhash (seed 0).
 *
 * A "span digest" hashes one contiguous buffer whose length is known up
 * front while another kernel walks it: dc_span_digest_advance(s, upto)
 * says that bytes [0, upto) are final and may be hashed now (while they are
 * in cache); dc_span_digest_final() hashes the rest.  It keeps the XXH3
 * accumulators in registers across each advance (libxxhash 0.8.1's
 * streaming API goes through memory for every stripe: ~2x slower).
 */
#ifndef DC_DIGEST_H
#define DC_DIGEST_H

#include "kernels/kern.h"

typedef struct dc_span_digest {
    _Alignas(64) uint64_t acc[8];
    const uint8_t *buf;
    size_t len;    /* total bytes */
    size_t blocks; /* 1024-byte blocks already accumulated */
    unsigned impl;
} dc_span_digest_t;

void dc_span_digest_init(dc_span_digest_t *s, const void *buf, size_t len);
void dc_span_digest_advance(dc_span_digest_t *s, size_t upto);
/** The same, reading bytes [data_off, upto) of the span from a copy at
 *  `data` (e.g. an L1 bounce buffer) instead of the span itself; bytes
 *  before data_off are read from the span.  The copy must hold the bytes
 *  the span will hold when dc_span_digest_final() runs. */
void dc_span_digest_advance_from(dc_span_digest_t *s, const void *data, size_t data_off,
                                 size_t upto);
dc_digest_t dc_span_digest_final(dc_span_digest_t *s);

/** XXH3's default secret (192 bytes), for kernels that fuse its
 *  long-input loop into another pass (kern_impl.h diff_acc). */
extern const uint8_t *const dc_xxh3_secret;

/** The implementation dc_digest128 runs now: "avx512", "avx2" or "base". */
const char *dc_digest_impl(void);

/* Per-ISA entry points (digest_isa.h). */
#define DC_DG_DECLARE(sfx)                                                           \
    dc_digest_t dc_digest128_##sfx(const void *buf, size_t len);                     \
    void dc_span_init_##sfx(dc_span_digest_t *s);                                    \
    void dc_span_advance_##sfx(dc_span_digest_t *s, const void *data, size_t off,    \
                               size_t upto);                                         \
    dc_digest_t dc_span_final_##sfx(dc_span_digest_t *s);
DC_DG_DECLARE(base)
#if defined(__x86_64__)
DC_DG_DECLARE(avx2)
DC_DG_DECLARE(avx512)
#endif
#undef DC_DG_DECLARE

#endif /* DC_DIGEST_H */
