/*
 * digest.h - XXH3-128 digests (private to kernels/), compiled three ways
 * and chosen at run time with the kernel ISA (kern_isa.h: each ISA's row
 * holds its dc_digest_ops_t):
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
    const struct dc_digest_ops *ops; /* the ISA's, fixed at init */
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

/* One ISA's XXH3 (digest_isa.h, compiled per ISA); the kernel ISA's row
 * (kern_isa.h) says which one runs. */
typedef struct dc_digest_ops {
    const char *name; /* "base", "avx2", "avx512" */
    dc_digest_t (*digest128)(const void *buf, size_t len);
    void (*span_init)(dc_span_digest_t *s);
    void (*span_advance)(dc_span_digest_t *s, const void *data, size_t off, size_t upto);
    dc_digest_t (*span_final)(dc_span_digest_t *s);
} dc_digest_ops_t;

extern const dc_digest_ops_t dc_digest_ops_base;
#if defined(__x86_64__)
extern const dc_digest_ops_t dc_digest_ops_avx2;
extern const dc_digest_ops_t dc_digest_ops_avx512;
#endif

#endif /* DC_DIGEST_H */
