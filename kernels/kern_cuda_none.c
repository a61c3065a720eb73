/*
 * kern_cuda_none.c - kern_cuda.h when the build has no CUDA (no nvcc):
 * nothing is available and every call says so with DC_ERR_UNSUPPORTED.
 */
#include "kernels/kern_cuda_ops.h"

static dc_status_t no_cuda(void)
{
    return dc_error(DC_ERR_UNSUPPORTED, "CUDA kernels are not built in (nvcc was not found "
                    "when deltacast was configured)");
}

static int none_available(void) { return 0; }
static const char *none_why(void)
{
    return "this build has no CUDA kernels (nvcc was not found when it was configured)";
}
static dc_status_t none_props(dc_kern_cuda_props_t *out) { return no_cuda(); }
static dc_status_t none_malloc(void **dptr, size_t bytes) { return no_cuda(); }
static void none_free(void *dptr) {}
static dc_status_t none_h2d(void *dst, const void *src, size_t bytes) { return no_cuda(); }
static dc_status_t none_d2h(void *dst, const void *src, size_t bytes) { return no_cuda(); }
static dc_status_t none_memset(void *dst, int byte, size_t bytes) { return no_cuda(); }
static dc_status_t none_sync(void *stream) { return no_cuda(); }

static dc_status_t none_count_changed(const void *a, const void *b, size_t n, unsigned w,
                                       size_t *count, void *stream)
{
    return no_cuda();
}

static dc_status_t none_diff(const void *a, const void *b, size_t n, unsigned w,
                              uint32_t *pos, void *xorw, size_t cap, size_t *count,
                              void *stream)
{
    return no_cuda();
}

static dc_status_t none_gather(const void *b, unsigned w, const uint32_t *pos, size_t count,
                                void *vals, void *stream)
{
    return no_cuda();
}

static dc_status_t none_xor_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *xorw, size_t count, void *stream)
{
    return no_cuda();
}

static dc_status_t none_put_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *vals, size_t count, void *stream)
{
    return no_cuda();
}

static dc_status_t none_xor_dense(void *dst, const void *src, size_t bytes, void *stream)
{
    return no_cuda();
}

static dc_status_t none_digest128(const void *buf, size_t len, dc_digest_t *out,
                                   void *stream)
{
    return no_cuda();
}

static dc_status_t none_digest128_dev(const void *buf, size_t len, dc_digest_t *out,
                                      void *stream)
{
    return no_cuda();
}

static dc_status_t none_crc32c(const void *buf, size_t len, uint32_t crc, uint32_t *out,
                                void *stream)
{
    return no_cuda();
}

static dc_status_t none_values_decode(unsigned method, const void *src, size_t len,
                                      size_t count, unsigned w, void *out, void *stream)
{
    return no_cuda();
}

static dc_status_t none_golomb_decode(const void *src, size_t len, size_t count, uint64_t n,
                                      uint32_t *pos, void *stream)
{
    return no_cuda();
}

static dc_status_t none_ctx_apply(void *chunk, size_t n, unsigned w,
                                  const dc_kern_cuda_ctx_spec_t *spec, const uint32_t *ranks,
                                  const void *words, uint32_t *pos_out, void *xor_out, int apply,
                                  void *stream)
{
    return no_cuda();
}

static dc_status_t none_gaps_positions(const uint16_t *q, const void *lo, size_t lo_len,
                                       unsigned b, unsigned E, const uint64_t *escpre,
                                       size_t nesc, uint64_t esc_total, size_t count, uint64_t n,
                                       uint32_t *pos, void *stream)
{
    return no_cuda();
}

static dc_status_t none_golomb_decode_multi(unsigned streams, const void *const *src,
                                            const size_t *len, const size_t *count, uint64_t n,
                                            uint32_t *const *pos, void *stream)
{
    return no_cuda();
}

/* --- device sender ------------------------------------------------------ */

static dc_status_t none_d2d(void *dst, const void *src, size_t bytes)
{
    return no_cuda();
}

static dc_status_t none_ctx_sample(const void *base, size_t n, unsigned w, uint32_t *hist,
                                   size_t *d2h, void *stream)
{
    return no_cuda();
}

static dc_status_t none_ctx_rank(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                 unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                                 uint32_t *rnk, uint64_t *pop, void *stream)
{
    return no_cuda();
}

static dc_status_t none_digest128_dev_pieces(const void *buf, size_t len, size_t piece,
                                             dc_digest_t *outs, void *stream)
{
    return no_cuda();
}

static dc_status_t none_host_register(void *p, size_t bytes)
{
    return no_cuda();
}

static void none_host_unregister(void *p)
{
}

static dc_status_t none_pack_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                   unsigned K, uint8_t *out, size_t *len, int *nibbles,
                                   uint64_t *ccnt, void *stream)
{
    return no_cuda();
}

static dc_status_t none_ctx_values(const void *bw, const void *xorv, size_t count, unsigned w,
                                   void *steps, void *neww, uint8_t *bkt, uint32_t *bhist,
                                   size_t *d2h, void *stream)
{
    return no_cuda();
}

static dc_status_t none_word_hist(const void *words, size_t count, unsigned w, uint8_t *out,
                                  size_t *len, void *stream)
{
    return no_cuda();
}

static dc_status_t none_pack_words(const void *words, size_t count, unsigned w, uint8_t *out,
                                   size_t *len, int *nibbles, void *stream)
{
    return no_cuda();
}

static dc_status_t none_golomb_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                     unsigned K, uint8_t *out, size_t cap, size_t *clen,
                                     uint64_t *ccnt, size_t *d2h, void *stream)
{
    return no_cuda();
}

static dc_status_t none_stream_create(void **stream)
{
    *stream = NULL;
    return no_cuda();
}

static void none_stream_destroy(void *stream)
{
}

static dc_status_t none_copy(void *dst, const void *src, size_t bytes, int dir, void *stream)
{
    return no_cuda();
}

static dc_status_t none_word_syms(const void *words, size_t count, unsigned w, uint8_t *out,
                                  size_t *len, void *stream)
{
    return no_cuda();
}

static dc_status_t none_rans_encode(const void *words, size_t count, unsigned w,
                                    const uint32_t *qs, size_t nsym, unsigned S, unsigned ways,
                                    uint8_t *out, size_t cap, size_t *len, size_t *h2d,
                                    void *stream)
{
    return no_cuda();
}

const dc_kern_cuda_ops_t dc_kern_cuda_build_ops = {
    "none", none_available, none_why, none_props, none_malloc, none_free, none_h2d,
    none_d2h, none_memset, none_sync, none_count_changed, none_diff, none_gather,
    none_xor_scatter, none_put_scatter, none_xor_dense, none_digest128, none_digest128_dev,
    none_crc32c, none_values_decode, none_golomb_decode, none_ctx_apply,
    none_gaps_positions, none_golomb_decode_multi,
    /* device sender */
    none_d2d, none_ctx_sample, none_ctx_rank,
    /* batched device digests */
    none_digest128_dev_pieces,
    /* pinned host memory */
    none_host_register, none_host_unregister,
    /* packed rank lists */
    none_pack_ranks,
    /* ctx values on demand */
    none_ctx_values, none_word_hist, none_pack_words,
    /* Golomb positions */
    none_golomb_ranks,
    /* streams */
    none_stream_create, none_stream_destroy, none_copy,
    /* rANS values */
    none_word_syms, none_rans_encode,
};
