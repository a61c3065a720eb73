/* kern_cuda_ops.c - kern_cuda.h through the installed table (kern_cuda_ops.h). */
#include "kernels/kern_cuda_ops.h"

#include <pthread.h>
#include <stdatomic.h>

static _Atomic(const dc_kern_cuda_ops_t *) dc_kcu_cur;

const dc_kern_cuda_ops_t *dc_kern_cuda_ops(void)
{
    const dc_kern_cuda_ops_t *o = atomic_load_explicit(&dc_kcu_cur, memory_order_acquire);
    return o ? o : &dc_kern_cuda_build_ops;
}

const dc_kern_cuda_ops_t *dc_kern_cuda_set_ops(const dc_kern_cuda_ops_t *ops)
{
    const dc_kern_cuda_ops_t *old = dc_kern_cuda_ops();
    atomic_store_explicit(&dc_kcu_cur, ops, memory_order_release);
    return old;
}

int dc_kern_cuda_available(void)
{
    return dc_kern_cuda_ops()->available();
}

const char *dc_kern_cuda_why(void)
{
    return dc_kern_cuda_ops()->why();
}

dc_status_t dc_kern_cuda_props(dc_kern_cuda_props_t *out)
{
    return dc_kern_cuda_ops()->props(out);
}

dc_status_t dc_kern_cuda_malloc(void **dptr, size_t bytes)
{
    return dc_kern_cuda_ops()->malloc_(dptr, bytes);
}

void dc_kern_cuda_free(void *dptr)
{
    dc_kern_cuda_ops()->free_(dptr);
}

/* Bytes the callers of h2d / d2h moved, per thread (64 slots, claimed on a
 * thread's first copy) and in all: what the engine's device paths put on
 * PCIe (kernels' own small result copies are not counted). */
typedef struct dc_kcu_slot {
    _Atomic(pthread_t) th;
    _Atomic int used;
    _Atomic uint64_t h2d, d2h;
} dc_kcu_slot_t;
static dc_kcu_slot_t dc_kcu_slots[64];
static _Atomic uint64_t dc_kcu_h2d, dc_kcu_d2h;
static _Thread_local dc_kcu_slot_t *dc_kcu_mine;

static dc_kcu_slot_t *dc_kcu_slot(void)
{
    if (dc_kcu_mine)
        return dc_kcu_mine;
    for (size_t i = 0; i < DC_ARRAY_SIZE(dc_kcu_slots); i++) {
        int zero = 0;
        if (atomic_compare_exchange_strong(&dc_kcu_slots[i].used, &zero, 1)) {
            atomic_store(&dc_kcu_slots[i].th, pthread_self());
            dc_kcu_mine = &dc_kcu_slots[i];
            break;
        }
    }
    return dc_kcu_mine;
}

static void dc_kcu_count(size_t bytes, int up)
{
    dc_kcu_slot_t *s = dc_kcu_slot();
    atomic_fetch_add(up ? &dc_kcu_h2d : &dc_kcu_d2h, bytes);
    if (s)
        atomic_fetch_add(up ? &s->h2d : &s->d2h, bytes);
}

void dc_kern_cuda_pcie(uint64_t *h2d, uint64_t *d2h)
{
    *h2d = atomic_load(&dc_kcu_h2d);
    *d2h = atomic_load(&dc_kcu_d2h);
}

int dc_kern_cuda_pcie_of(pthread_t th, uint64_t *h2d, uint64_t *d2h)
{
    for (size_t i = 0; i < DC_ARRAY_SIZE(dc_kcu_slots); i++)
        if (atomic_load(&dc_kcu_slots[i].used) &&
            pthread_equal(atomic_load(&dc_kcu_slots[i].th), th)) {
            *h2d = atomic_load(&dc_kcu_slots[i].h2d);
            *d2h = atomic_load(&dc_kcu_slots[i].d2h);
            return 1;
        }
    *h2d = *d2h = 0;
    return 0;
}

dc_status_t dc_kern_cuda_h2d(void *dst, const void *src, size_t bytes)
{
    dc_status_t st = dc_kern_cuda_ops()->h2d(dst, src, bytes);
    if (st == DC_OK)
        dc_kcu_count(bytes, 1);
    return st;
}

dc_status_t dc_kern_cuda_d2h(void *dst, const void *src, size_t bytes)
{
    dc_status_t st = dc_kern_cuda_ops()->d2h(dst, src, bytes);
    if (st == DC_OK)
        dc_kcu_count(bytes, 0);
    return st;
}

dc_status_t dc_kern_cuda_memset(void *dst, int byte, size_t bytes)
{
    return dc_kern_cuda_ops()->memset_(dst, byte, bytes);
}

dc_status_t dc_kern_cuda_sync(void *stream)
{
    return dc_kern_cuda_ops()->sync(stream);
}

dc_status_t dc_kern_cuda_count_changed(const void *a, const void *b, size_t n, unsigned w,
                                       size_t *count, void *stream)
{
    return dc_kern_cuda_ops()->count_changed(a, b, n, w, count, stream);
}

dc_status_t dc_kern_cuda_diff(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                              void *xorw, size_t cap, size_t *count, void *stream)
{
    return dc_kern_cuda_ops()->diff(a, b, n, w, pos, xorw, cap, count, stream);
}

dc_status_t dc_kern_cuda_gather(const void *b, unsigned w, const uint32_t *pos, size_t count,
                                void *vals, void *stream)
{
    return dc_kern_cuda_ops()->gather(b, w, pos, count, vals, stream);
}

dc_status_t dc_kern_cuda_xor_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *xorw, size_t count, void *stream)
{
    return dc_kern_cuda_ops()->xor_scatter(dst, n, w, pos, xorw, count, stream);
}

dc_status_t dc_kern_cuda_put_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *vals, size_t count, void *stream)
{
    return dc_kern_cuda_ops()->put_scatter(dst, n, w, pos, vals, count, stream);
}

dc_status_t dc_kern_cuda_xor_dense(void *dst, const void *src, size_t bytes, void *stream)
{
    return dc_kern_cuda_ops()->xor_dense(dst, src, bytes, stream);
}

dc_status_t dc_kern_cuda_digest128(const void *buf, size_t len, dc_digest_t *out, void *stream)
{
    return dc_kern_cuda_ops()->digest128(buf, len, out, stream);
}

dc_status_t dc_kern_cuda_digest128_dev(const void *buf, size_t len, dc_digest_t *out, void *stream)
{
    return dc_kern_cuda_ops()->digest128_dev(buf, len, out, stream);
}

dc_status_t dc_kern_cuda_digest128_dev_pieces(const void *buf, size_t len, size_t piece,
                                              dc_digest_t *outs, void *stream)
{
    return dc_kern_cuda_ops()->digest128_dev_pieces(buf, len, piece, outs, stream);
}

dc_status_t dc_kern_cuda_host_register(void *p, size_t bytes)
{
    return dc_kern_cuda_ops()->host_register(p, bytes);
}

void dc_kern_cuda_host_unregister(void *p)
{
    dc_kern_cuda_ops()->host_unregister(p);
}

dc_status_t dc_kern_cuda_crc32c(const void *buf, size_t len, uint32_t crc, uint32_t *out,
                                void *stream)
{
    return dc_kern_cuda_ops()->crc32c(buf, len, crc, out, stream);
}

dc_status_t dc_kern_cuda_values_decode(unsigned method, const void *src, size_t len,
                                       size_t count, unsigned w, void *out, void *stream)
{
    return dc_kern_cuda_ops()->values_decode(method, src, len, count, w, out, stream);
}

dc_status_t dc_kern_cuda_golomb_decode(const void *src, size_t len, size_t count, uint64_t n,
                                       uint32_t *pos, void *stream)
{
    return dc_kern_cuda_ops()->golomb_decode(src, len, count, n, pos, stream);
}

dc_status_t dc_kern_cuda_ctx_apply(void *chunk, size_t n, unsigned w,
                                   const dc_kern_cuda_ctx_spec_t *spec, const uint32_t *ranks,
                                   const void *words, uint32_t *pos_out, void *xor_out, int apply,
                                   void *stream)
{
    return dc_kern_cuda_ops()->ctx_apply(chunk, n, w, spec, ranks, words, pos_out, xor_out, apply,
                                         stream);
}

dc_status_t dc_kern_cuda_gaps_positions(const uint16_t *q, const void *lo, size_t lo_len,
                                        unsigned b, unsigned E, const uint64_t *escpre,
                                        size_t nesc, uint64_t esc_total, size_t count, uint64_t n,
                                        uint32_t *pos, void *stream)
{
    return dc_kern_cuda_ops()->gaps_positions(q, lo, lo_len, b, E, escpre, nesc, esc_total, count,
                                              n, pos, stream);
}

dc_status_t dc_kern_cuda_golomb_decode_multi(unsigned streams, const void *const *src,
                                             const size_t *len, const size_t *count, uint64_t n,
                                             uint32_t *const *pos, void *stream)
{
    return dc_kern_cuda_ops()->golomb_decode_multi(streams, src, len, count, n, pos, stream);
}

/* --- device sender ------------------------------------------------------ */

dc_status_t dc_kern_cuda_d2d(void *dst, const void *src, size_t bytes)
{
    return dc_kern_cuda_ops()->d2d(dst, src, bytes);
}

dc_status_t dc_kern_cuda_ctx_sample(const void *base, size_t n, unsigned w, uint32_t *hist,
                                    size_t *d2h, void *stream)
{
    return dc_kern_cuda_ops()->ctx_sample(base, n, w, hist, d2h, stream);
}

dc_status_t dc_kern_cuda_pack_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                    unsigned K, uint8_t *out, size_t *len, int *nibbles,
                                    uint64_t *ccnt, void *stream)
{
    return dc_kern_cuda_ops()->pack_ranks(cls, rnk, count, K, out, len, nibbles, ccnt, stream);
}

dc_status_t dc_kern_cuda_ctx_values(const void *bw, const void *xorv, size_t count, unsigned w,
                                    void *steps, void *neww, uint8_t *bkt, uint32_t *bhist,
                                    size_t *d2h, void *stream)
{
    return dc_kern_cuda_ops()->ctx_values(bw, xorv, count, w, steps, neww, bkt, bhist, d2h, stream);
}

dc_status_t dc_kern_cuda_word_hist(const void *words, size_t count, unsigned w, uint8_t *out,
                                   size_t *len, void *stream)
{
    return dc_kern_cuda_ops()->word_hist(words, count, w, out, len, stream);
}

dc_status_t dc_kern_cuda_pack_words(const void *words, size_t count, unsigned w, uint8_t *out,
                                    size_t *len, int *nibbles, void *stream)
{
    return dc_kern_cuda_ops()->pack_words(words, count, w, out, len, nibbles, stream);
}

dc_status_t dc_kern_cuda_golomb_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                      unsigned K, uint8_t *out, size_t cap, size_t *clen,
                                      uint64_t *ccnt, size_t *d2h, void *stream)
{
    return dc_kern_cuda_ops()->golomb_ranks(cls, rnk, count, K, out, cap, clen, ccnt, d2h,
                                            stream);
}

dc_status_t dc_kern_cuda_stream_create(void **stream)
{
    return dc_kern_cuda_ops()->stream_create(stream);
}

void dc_kern_cuda_stream_destroy(void *stream)
{
    dc_kern_cuda_ops()->stream_destroy(stream);
}

dc_status_t dc_kern_cuda_copy(void *dst, const void *src, size_t bytes, int dir, void *stream)
{
    if (dir != DC_KCU_H2D && dir != DC_KCU_D2H && dir != DC_KCU_D2D)
        return dc_error(DC_ERR_INVALID, "cuda copy: direction %d", dir);
    dc_status_t st = dc_kern_cuda_ops()->copy(dst, src, bytes, dir, stream);
    if (st == DC_OK && dir != DC_KCU_D2D)
        dc_kcu_count(bytes, dir == DC_KCU_H2D);
    return st;
}

dc_status_t dc_kern_cuda_word_syms(const void *words, size_t count, unsigned w, uint8_t *out,
                                   size_t *len, void *stream)
{
    return dc_kern_cuda_ops()->word_syms(words, count, w, out, len, stream);
}

dc_status_t dc_kern_cuda_rans_encode(const void *words, size_t count, unsigned w,
                                     const uint32_t *qs, size_t nsym, unsigned S, unsigned ways,
                                     uint8_t *out, size_t cap, size_t *len, size_t *h2d,
                                     void *stream)
{
    dc_status_t st = dc_kern_cuda_ops()->rans_encode(words, count, w, qs, nsym, S, ways, out,
                                                     cap, len, h2d, stream);
    if (st == DC_OK)
        dc_kcu_count(*h2d, 1);
    return st;
}

dc_status_t dc_kern_cuda_ctx_rank(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                  unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                                  uint32_t *rnk, uint64_t *pop, void *stream)
{
    return dc_kern_cuda_ops()->ctx_rank(base, n, w, thr, nt, pos, count, cls, rnk, pop, stream);
}
