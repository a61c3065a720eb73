/*
 * kern.c - portable reference and entry points of the host kernels (the
 * ISA they run is picked in kern_isa.c).
 *
 * The scalar code below is the reference that every vector table and the
 * CUDA kernels are tested against, byte for byte.  It is also reasonably
 * fast: it compares 8 bytes at a time and only looks at single elements in
 * words that differ.
 */
#include "kernels/kern.h"

#include "kernels/digest.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_isa.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* ======================================================================== */
/*  Element helpers                                                         */
/* ======================================================================== */

static inline uint64_t load_w(const uint8_t *p, unsigned w)
{
    switch (w) {
    case 1: return p[0];
    case 2: return dc_load_le16(p);
    case 4: return dc_load_le32(p);
    default: return dc_load_le64(p);
    }
}

static inline void store_w(uint8_t *p, unsigned w, uint64_t v)
{
    switch (w) {
    case 1: p[0] = (uint8_t)v; break;
    case 2: dc_store_le16(p, (uint16_t)v); break;
    case 4: dc_store_le32(p, (uint32_t)v); break;
    default: dc_store_le64(p, v); break;
    }
}

static void check_width(unsigned w, const char *fn)
{
    if (w != 1 && w != 2 && w != 4 && w != 8) {
        /* An invariant: widths come from dc_dtype_size(), never from input. */
        fprintf(stderr, "deltacast: %s: element width %u is not 1, 2, 4 or 8\n", fn, w);
        abort();
    }
}

/* ======================================================================== */
/*  Scalar reference                                                        */
/* ======================================================================== */

size_t dc_kern_scalar_count_range(const void *a, const void *b, size_t begin, size_t end,
                                  unsigned w)
{
    const uint8_t *pa = a, *pb = b;
    size_t cnt = 0, i = begin;
    const size_t epw = 8 / w; /* elements per 64-bit word */

    for (; i + epw <= end; i += epw) {
        uint64_t x = dc_load_le64(pa + i * w) ^ dc_load_le64(pb + i * w);
        if (x == 0)
            continue;
        for (size_t j = 0; j < epw; j++)
            cnt += ((x >> (j * w * 8)) & (w == 8 ? ~0ull : ((1ull << (w * 8)) - 1))) != 0;
    }
    for (; i < end; i++)
        cnt += load_w(pa + i * w, w) != load_w(pb + i * w, w);
    return cnt;
}

size_t dc_kern_scalar_diff_range(const void *a, const void *b, size_t begin, size_t end,
                                 unsigned w, uint32_t *pos, void *xorw, size_t cap,
                                 size_t k)
{
    const uint8_t *pa = a, *pb = b;
    uint8_t *px = xorw;
    const size_t epw = 8 / w;
    const uint64_t emask = w == 8 ? ~0ull : ((1ull << (w * 8)) - 1);
    size_t i = begin;

    for (; i + epw <= end; i += epw) {
        uint64_t x = dc_load_le64(pa + i * w) ^ dc_load_le64(pb + i * w);
        if (x == 0)
            continue;
        for (size_t j = 0; j < epw; j++) {
            uint64_t e = (x >> (j * w * 8)) & emask;
            if (e) {
                if (k < cap) {
                    pos[k] = (uint32_t)(i + j);
                    store_w(px + k * w, w, e);
                }
                k++;
            }
        }
    }
    for (; i < end; i++) {
        uint64_t e = load_w(pa + i * w, w) ^ load_w(pb + i * w, w);
        if (e) {
            if (k < cap) {
                pos[k] = (uint32_t)i;
                store_w(px + k * w, w, e);
            }
            k++;
        }
    }
    return k;
}

static size_t scalar_count(const void *a, const void *b, size_t n, unsigned w)
{
    return dc_kern_scalar_count_range(a, b, 0, n, w);
}

static size_t scalar_diff(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                          void *xorw, size_t cap)
{
    return dc_kern_scalar_diff_range(a, b, 0, n, w, pos, xorw, cap, 0);
}

void dc_kern_scalar_gather(const void *b, unsigned w, const uint32_t *pos, size_t count,
                           void *vals)
{
    const uint8_t *pb = b;
    uint8_t *pv = vals;
    switch (w) {
    case 1:
        for (size_t k = 0; k < count; k++)
            pv[k] = pb[pos[k]];
        break;
    case 2:
        for (size_t k = 0; k < count; k++)
            memcpy(pv + 2 * k, pb + 2 * (size_t)pos[k], 2);
        break;
    case 4:
        for (size_t k = 0; k < count; k++)
            memcpy(pv + 4 * k, pb + 4 * (size_t)pos[k], 4);
        break;
    default:
        for (size_t k = 0; k < count; k++)
            memcpy(pv + 8 * k, pb + 8 * (size_t)pos[k], 8);
        break;
    }
}

size_t dc_kern_scalar_validate(const uint32_t *pos, size_t count, size_t n)
{
    /* The lowest k with pos[k] >= n or pos[k] <= pos[k-1]. */
    if (count == 0)
        return 0;
    if (n == 0 || pos[0] >= n)
        return 0;
    const uint32_t last = n > UINT32_MAX ? UINT32_MAX : (uint32_t)(n - 1);
    /* Branch-free accumulation in blocks; locate the culprit only on failure. */
    size_t k = 1;
    while (k < count) {
        size_t end = DC_MIN(count, k + 1024);
        unsigned bad = 0;
        for (size_t j = k; j < end; j++)
            bad |= (pos[j] <= pos[j - 1]) | (pos[j] > last);
        if (bad) {
            for (size_t j = k; j < end; j++)
                if (pos[j] <= pos[j - 1] || pos[j] > last)
                    return j;
        }
        k = end;
    }
    return count;
}

#define SCATTER_LOOP(T, OP)                                                   \
    do {                                                                      \
        uint8_t *pd = dst;                                                    \
        const uint8_t *ps = src;                                              \
        for (size_t k = 0; k < count; k++) {                                  \
            T v, s;                                                           \
            memcpy(&v, pd + sizeof(T) * (size_t)pos[k], sizeof(T));           \
            memcpy(&s, ps + sizeof(T) * k, sizeof(T));                        \
            v = OP;                                                           \
            memcpy(pd + sizeof(T) * (size_t)pos[k], &v, sizeof(T));           \
        }                                                                     \
    } while (0)

void dc_kern_scalar_xor_scatter(void *dst, unsigned w, const uint32_t *pos,
                                const void *src, size_t count)
{
    switch (w) {
    case 1: SCATTER_LOOP(uint8_t, (uint8_t)(v ^ s)); break;
    case 2: SCATTER_LOOP(uint16_t, (uint16_t)(v ^ s)); break;
    case 4: SCATTER_LOOP(uint32_t, v ^ s); break;
    default: SCATTER_LOOP(uint64_t, v ^ s); break;
    }
}

void dc_kern_scalar_put_scatter(void *dst, unsigned w, const uint32_t *pos,
                                const void *src, size_t count)
{
    uint8_t *pd = dst;
    const uint8_t *ps = src;
    switch (w) {
    case 1:
        for (size_t k = 0; k < count; k++)
            pd[pos[k]] = ps[k];
        break;
    case 2:
        for (size_t k = 0; k < count; k++)
            memcpy(pd + 2 * (size_t)pos[k], ps + 2 * k, 2);
        break;
    case 4:
        for (size_t k = 0; k < count; k++)
            memcpy(pd + 4 * (size_t)pos[k], ps + 4 * k, 4);
        break;
    default:
        for (size_t k = 0; k < count; k++)
            memcpy(pd + 8 * (size_t)pos[k], ps + 8 * k, 8);
        break;
    }
}

static void scalar_xor_dense(void *dst, const void *src, size_t bytes)
{
    uint8_t *pd = dst;
    const uint8_t *ps = src;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8)
        dc_store_le64(pd + i, dc_load_le64(pd + i) ^ dc_load_le64(ps + i));
    for (; i < bytes; i++)
        pd[i] ^= ps[i];
}

const dc_kern_ops_t dc_kern_ops_scalar = {
    .name = "scalar",
    .count_changed = scalar_count,
    .diff = scalar_diff,
    .gather = dc_kern_scalar_gather,
    .validate = dc_kern_scalar_validate,
    .xor_scatter = dc_kern_scalar_xor_scatter,
    .put_scatter = dc_kern_scalar_put_scatter,
    .xor_dense = scalar_xor_dense,
};

/* The ISA in use: kern_isa.c (CPU detection, DELTACAST_KERN_ISA). */
static inline const dc_kern_ops_t *ops_get(void)
{
    return dc_kern_cur()->kern;
}

/* ======================================================================== */
/*  Public entry points                                                     */
/* ======================================================================== */

size_t dc_kern_count_changed(const void *a, const void *b, size_t n, unsigned w)
{
    check_width(w, "dc_kern_count_changed");
    if (n == 0)
        return 0;
    return ops_get()->count_changed(a, b, n, w);
}

size_t dc_kern_diff(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                    void *xorw, size_t cap)
{
    check_width(w, "dc_kern_diff");
    if (n > (size_t)UINT32_MAX + 1) {
        fprintf(stderr, "deltacast: dc_kern_diff: n=%zu does not fit 32-bit positions\n", n);
        abort();
    }
    if (n == 0)
        return 0;
    return ops_get()->diff(a, b, n, w, pos, xorw, cap);
}

void dc_kern_gather(const void *b, unsigned w, const uint32_t *pos, size_t count, void *vals)
{
    check_width(w, "dc_kern_gather");
    if (count == 0)
        return;
    ops_get()->gather(b, w, pos, count, vals);
}

static dc_status_t scatter_check(const dc_kern_ops_t *ops, const uint32_t *pos, size_t count,
                                 size_t n, const char *what)
{
    size_t bad = ops->validate(pos, count, n);
    if (bad == count)
        return DC_OK;
    if (pos[bad] >= n)
        return dc_error(DC_ERR_FORMAT, "%s: position %u at index %zu is out of range (%zu "
                        "elements)", what, pos[bad], bad, n);
    return dc_error(DC_ERR_FORMAT, "%s: positions not strictly increasing at index %zu "
                    "(%u after %u)", what, bad, pos[bad], pos[bad - 1]);
}

dc_status_t dc_kern_xor_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                const void *xorw, size_t count)
{
    check_width(w, "dc_kern_xor_scatter");
    if (count == 0)
        return DC_OK;
    const dc_kern_ops_t *ops = ops_get();
    dc_status_t st = scatter_check(ops, pos, count, n, "xor scatter");
    if (st != DC_OK)
        return st;
    ops->xor_scatter(dst, w, pos, xorw, count);
    return DC_OK;
}

dc_status_t dc_kern_put_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                const void *vals, size_t count)
{
    check_width(w, "dc_kern_put_scatter");
    if (count == 0)
        return DC_OK;
    const dc_kern_ops_t *ops = ops_get();
    dc_status_t st = scatter_check(ops, pos, count, n, "overwrite scatter");
    if (st != DC_OK)
        return st;
    ops->put_scatter(dst, w, pos, vals, count);
    return DC_OK;
}

void dc_kern_xor_dense(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return;
    ops_get()->xor_dense(dst, src, bytes);
}

/* ======================================================================== */
/*  Fused passes: diff / patch + digest, block by block                     */
/* ======================================================================== */

/* Bytes per block: the block of each operand stays in L1 between the kernel
 * that brings it in and the digest that reads it again. */
#define DC_KERN_BLOCK 16384u

/* Order earlier streaming stores (ops->copy_nt) before later loads and
 * stores of this thread and others. */
static inline void dc_kern_nt_fence(void)
{
#if defined(__x86_64__)
    __builtin_ia32_sfence();
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

size_t dc_kern_diff_digest(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                           void *xorw, size_t cap, dc_digest_t *a_dg, dc_digest_t *b_dg)
{
    check_width(w, "dc_kern_diff_digest");
    if (n > (size_t)UINT32_MAX + 1) {
        fprintf(stderr, "deltacast: dc_kern_diff_digest: n=%zu does not fit 32-bit "
                "positions\n", n);
        abort();
    }
    const dc_kern_ops_t *ops = ops_get();
    const uint8_t *pa = a, *pb = b;
    uint8_t *px = xorw;
    dc_span_digest_t sa, sb;
    dc_span_digest_init(&sa, a, n * w);
    dc_span_digest_init(&sb, b, n * w);
    const size_t be = DC_KERN_BLOCK / w;
    size_t k = 0, i0 = 0;
    if (ops->diff_acc && (a_dg || b_dg) && sa.len > 240) {
        /* The blocks XXH3's loop takes (all whole 1024-byte blocks but the
         * last byte's; inputs of <= 240 bytes have none) are hashed by the
         * diff's own loads; the span digests finish from there. */
        size_t nb = (n * w - 1) / 1024;
        i0 = nb * (1024 / w);
        k = ops->diff_acc(pa, pb, i0, w, pos, px, cap, a_dg ? sa.acc : NULL,
                          b_dg ? sb.acc : NULL);
        sa.blocks = nb;
        sb.blocks = nb;
    }
    for (size_t i = i0; i < n; i += be) {
        size_t m = DC_MIN(be, n - i);
        size_t kw = DC_MIN(k, cap);
        size_t c = ops->diff(pa + i * w, pb + i * w, m, w, pos + kw, px + kw * w, cap - kw);
        size_t wrote = DC_MIN(c, cap - kw);
        for (size_t j = 0; j < wrote; j++)
            pos[kw + j] += (uint32_t)i;
        k += c;
        if (a_dg)
            dc_span_digest_advance(&sa, (i + m) * w);
        if (b_dg)
            dc_span_digest_advance(&sb, (i + m) * w);
    }
    if (a_dg)
        *a_dg = dc_span_digest_final(&sa);
    if (b_dg)
        *b_dg = dc_span_digest_final(&sb);
    return k;
}

static void plain_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

/* Block-relative scatter into a bounce buffer b holding elements
 * [base, base + m) of the chunk: the (validated) positions pos[0..cnt) all
 * fall in that range. */
static void scatter_rel(uint8_t *b, unsigned w, const uint32_t *pos, size_t base,
                        const uint8_t *v, size_t cnt, int xor)
{
#define REL_LOOP(T)                                                           \
    for (size_t k = 0; k < cnt; k++) {                                        \
        uint8_t *q = b + sizeof(T) * ((size_t)pos[k] - base);                 \
        T x, s;                                                               \
        memcpy(&s, v + sizeof(T) * k, sizeof(T));                             \
        if (xor) {                                                            \
            memcpy(&x, q, sizeof(T));                                         \
            s ^= x;                                                           \
        }                                                                     \
        memcpy(q, &s, sizeof(T));                                             \
    }
    switch (w) {
    case 1: REL_LOOP(uint8_t) break;
    case 2: REL_LOOP(uint16_t) break;
    case 4: REL_LOOP(uint32_t) break;
    default: REL_LOOP(uint64_t) break;
    }
#undef REL_LOOP
}

dc_status_t dc_kern_patch_digest(void *dst, const void *src, size_t n, unsigned w,
                                 unsigned op, const uint32_t *pos, const void *vals,
                                 size_t count, dc_digest_t *src_dg, dc_digest_t *dst_dg)
{
    check_width(w, "dc_kern_patch_digest");
    const dc_kern_ops_t *ops = ops_get();
    if (op > DC_PATCH_PUT_DENSE || (src == NULL && op != DC_PATCH_PUT_DENSE))
        return dc_error(DC_ERR_INVALID, "dc_kern_patch_digest: edit %u without a baseline", op);
    int sparse = op == DC_PATCH_XOR || op == DC_PATCH_PUT;
    if (sparse && count) {
        dc_status_t st = scatter_check(ops, pos, count, n,
                                       op == DC_PATCH_XOR ? "xor scatter" : "overwrite scatter");
        if (st != DC_OK)
            return st;
    }
    const uint8_t *ps = src, *pv = vals;
    uint8_t *pd = dst;
    const size_t bytes_all = n * w;
    int hash_src = src_dg != NULL && src != NULL;
    int in_place = pd == ps;
    /* a plain copy has the source's digest */
    int hash_dst = dst_dg != NULL && !(op == DC_PATCH_COPY && hash_src);
    dc_digest_t ds = {0, 0};
    if (hash_src && in_place) {
        /* the tail of an XXH3 span is read at the end: hash before editing */
        ds = dc_digest128(ps, bytes_all);
        hash_src = 0;
        *src_dg = ds;
    }
    dc_span_digest_t ss, sd;
    dc_span_digest_init(&ss, ps, bytes_all);
    dc_span_digest_init(&sd, pd, bytes_all);
    const size_t be = DC_KERN_BLOCK / w;
    size_t k = 0;
    if (!in_place) {
        /* To another buffer: each block is built in an L1 bounce buffer
         * (copy, edit), hashed there and written out with streaming
         * stores, so dst's lines are never read for ownership: two memory
         * passes (src in, dst out) instead of three.
         *
         * Where the time goes (inject 5%, 4 MiB chunks, one core of this
         * 2-vCPU VM): the chunk's decode alone runs at ~10 GB/s of
         * checkpoint and this pass alone (COPY) at ~6.7 GB/s, the speed of
         * memcpy here; they run one after the other, hence ~4 GB/s for
         * decode + pass.  Tried to overlap them, measured against this
         * code in the same runs, and dropped: (1) decoding in slices of
         * 16-256 KiB, each slice's baseline prefetched during its decode,
         * then patched: no gain (the decode slows as much as the pass
         * speeds up); (2) the pass done a kilobyte at a time from a
         * callback after every decoder step (copy 4 KiB ahead, edit once
         * the block's positions are decoded, hash, stream out): 15-20%
         * slower (per-step call and state traffic; branch exp-interleave
         * holds it); (3) regular stores instead of streaming ones: 10%
         * slower.  What did help: hashing each stripe as it streams out
         * (ops->copy_nt_acc: one read of the block instead of a hash pass,
         * then a copy pass; the reads and the streaming writes interleave):
         * inject 5%, 11 interleaved pairs, apply 3.68 against 3.14 GB/s
         * (median of the per-pair ratios 1.15x); with the next block's
         * baseline prefetched meanwhile (below), in one process,
         * alternating, against the hash-then-copy pass: opt1 / inj3 / inj5
         * 4.86 / 4.93 / 3.81 against 3.97 / 4.34 / 3.28 GB/s (per-pair
         * ratios 1.21 / 1.19 / 1.16x; the prefetch alone 1.05-1.11x).  A
         * plain streaming copy runs at ~9.6 GB/s here, memcpy at ~6.2. */
        _Alignas(64) uint8_t bb[DC_KERN_BLOCK];
        void (*out)(void *, const void *, size_t) = ops->copy_nt ? ops->copy_nt : plain_copy;
        for (size_t i = 0; i < n; i += be) {
            size_t m = DC_MIN(be, n - i), off = i * w, bytes = m * w;
            const uint8_t *blk; /* the block's result, in cache */
            switch (op) {
            case DC_PATCH_COPY: blk = ps + off; break;
            case DC_PATCH_PUT_DENSE: blk = pv + off; break;
            case DC_PATCH_XOR_DENSE:
                memcpy(bb, ps + off, bytes);
                ops->xor_dense(bb, pv + off, bytes);
                blk = bb;
                break;
            default: {
                size_t k1 = k, end = i + m;
                while (k1 < count && pos[k1] < end)
                    k1++;
                if (k1 == k) {
                    blk = ps + off;
                    break;
                }
                memcpy(bb, ps + off, bytes);
                scatter_rel(bb, w, pos + k, i, pv + k * w, k1 - k, op == DC_PATCH_XOR);
                k = k1;
                blk = bb;
                break;
            }
            }
            if (hash_src)
                dc_span_digest_advance(&ss, off + bytes);
            /* the XXH3 blocks of this block that the span's loop takes,
             * hashed while they stream out */
            size_t hb = 0;
            if (hash_dst && ops->copy_nt_acc && bytes_all > 240 && sd.blocks * 1024 == off) {
                size_t nbmax = (bytes_all - 1) / 1024;
                hb = nbmax > sd.blocks ? DC_MIN(bytes / 1024, nbmax - sd.blocks) * 1024 : 0;
            }
            if (hb) {
                /* a bounced block: the next block's baseline is asked for
                 * while this one streams out, so that its copy into the
                 * bounce buffer finds it in cache (reads and writes
                 * overlap); a block read from the baseline directly needs
                 * none */
                const void *pf = blk != ps + off && i + be < n ? ps + off + bytes : NULL;
                ops->copy_nt_acc(pd + off, blk, bytes, sd.acc, hb, pf);
                sd.blocks += hb / 1024;
            } else {
                if (hash_dst)
                    dc_span_digest_advance_from(&sd, blk, off, off + bytes);
                out(pd + off, blk, bytes);
            }
        }
        /* the digest's tail reads dst: the streamed lines first */
        dc_kern_nt_fence();
    } else {
        for (size_t i = 0; i < n; i += be) {
            size_t m = DC_MIN(be, n - i), off = i * w, bytes = m * w;
            switch (op) {
            case DC_PATCH_XOR_DENSE:
                ops->xor_dense(pd + off, pv + off, bytes);
                break;
            case DC_PATCH_PUT_DENSE:
                memcpy(pd + off, pv + off, bytes);
                break;
            case DC_PATCH_COPY:
                break;
            default: {
                /* the scatter touches a few lines of each block in no
                 * pattern a hardware prefetcher follows, and the hash then
                 * reads them all: ask for the next block now, so its lines
                 * stream in while this one is patched and hashed (+14-20%
                 * in-place apply at 1-3% change) */
                size_t left = bytes_all - off - bytes;
                size_t nb = DC_MIN(left, (size_t)DC_KERN_BLOCK);
                for (size_t q = 0; q < nb; q += 64)
                    __builtin_prefetch(pd + off + bytes + q, 1, 3);
                /* the positions (validated, increasing) that fall in this block */
                size_t k1 = k, end = i + m;
                while (k1 < count && pos[k1] < end)
                    k1++;
                if (k1 > k) {
                    if (op == DC_PATCH_XOR)
                        ops->xor_scatter(pd, w, pos + k, pv + k * w, k1 - k);
                    else
                        ops->put_scatter(pd, w, pos + k, pv + k * w, k1 - k);
                }
                k = k1;
                break;
            }
            }
            if (hash_dst)
                dc_span_digest_advance(&sd, off + bytes);
        }
    }
    if (hash_src) {
        ds = dc_span_digest_final(&ss);
        *src_dg = ds;
    }
    if (dst_dg)
        *dst_dg = hash_dst ? dc_span_digest_final(&sd) : ds;
    return DC_OK;
}

/* ======================================================================== */
/*  Parallel for                                                            */
/* ======================================================================== */

typedef struct pf_state {
    dc_kern_task_fn fn;
    void *arg;
    size_t n_tasks;
    atomic_size_t next;
    atomic_int failed;
    pthread_mutex_t lock;
    size_t err_task;       /* lowest failing task index (under lock) */
    dc_status_t err_st;
    char err_msg[512];
} pf_state_t;

static void pf_run(pf_state_t *s)
{
    for (;;) {
        if (atomic_load_explicit(&s->failed, memory_order_relaxed))
            return;
        size_t t = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
        if (t >= s->n_tasks)
            return;
        dc_status_t st = s->fn(s->arg, t);
        if (st != DC_OK) {
            pthread_mutex_lock(&s->lock);
            if (s->err_st == DC_OK || t < s->err_task) {
                s->err_task = t;
                s->err_st = st;
                snprintf(s->err_msg, sizeof(s->err_msg), "%s", dc_last_error());
            }
            pthread_mutex_unlock(&s->lock);
            atomic_store_explicit(&s->failed, 1, memory_order_relaxed);
        }
    }
}

static void *pf_thread(void *p)
{
    pf_run(p);
    return NULL;
}

dc_status_t dc_kern_parallel_for(size_t n_tasks, dc_kern_task_fn fn, void *arg,
                                 unsigned threads)
{
    if (fn == NULL)
        return dc_error(DC_ERR_INVALID, "dc_kern_parallel_for: no task function");
    if (n_tasks == 0)
        return DC_OK;
    if (threads == 0)
        threads = (unsigned)dc_cpu_count();
    if (threads > n_tasks)
        threads = (unsigned)n_tasks;
    if (threads > 1024)
        threads = 1024;

    pf_state_t s = {.fn = fn, .arg = arg, .n_tasks = n_tasks, .err_st = DC_OK};
    atomic_init(&s.next, 0);
    atomic_init(&s.failed, 0);
    pthread_mutex_init(&s.lock, NULL);

    pthread_t *tids = NULL;
    unsigned started = 0;
    if (threads > 1) {
        tids = malloc(sizeof(*tids) * (threads - 1));
        /* Without memory or threads the caller still runs every task. */
        for (unsigned i = 0; tids != NULL && i < threads - 1; i++) {
            if (pthread_create(&tids[i], NULL, pf_thread, &s) != 0)
                break;
            started++;
        }
    }
    pf_run(&s);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    free(tids);
    pthread_mutex_destroy(&s.lock);

    if (s.err_st != DC_OK)
        return dc_error(s.err_st, "%s", s.err_msg);
    return DC_OK;
}
