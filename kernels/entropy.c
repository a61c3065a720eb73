/* entropy.c - Golomb positions, order-0 rANS values, zstd/raw fallbacks. */
#include "kernels/entropy.h"
#include "kernels/kern.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#if defined(__x86_64__)
#if DC_KERN_EMU_AVX512
/* -Dkern_emu=avx512: the AVX-512 coders' intrinsics, emulated (kernels/emu) */
#include "kernels/emu/avx512_emu.h"
#else
#include <immintrin.h>
#endif
#endif

#define DC_RANS_L (1u << 23)
#define DC_RANS_MAX_SCALE 16
#define DC_RANS_MIN_SCALE 8
/* in a RANS stream's symbol-bits byte: the data is two- or four-way
 * interleaved */
#define DC_RANS_TWO_WAY 0x80u
#define DC_RANS_FOUR_WAY 0x40u
#define DC_RANS_WAY_MASK 0xC0u
/* ... both bits: 32 states with 16-bit renormalization (the SIMD layout) */
#define DC_RANS_32_WAY 0xC0u
#define DC_R32_L (1u << 15)
/* largest scale of a 32-way stream (x >> S >= 1 keeps one word enough) */
#define DC_R32_MAX_SCALE 15
/* fewest symbols the encoder gives the 32-way layout (its 32 states cost
 * 112 bytes more than four) */
#define DC_R32_MIN 4096u

/* rANS encoder symbol with a reciprocal instead of a division (after
 * F. Giesen's rans_byte.h).  16 bytes: the AVX-512 encoder gathers its
 * four 32-bit words. */
struct dc_rans_esym {
    uint32_t x_max, rcp_freq, bias;
    uint16_t cmpl_freq, rcp_shift;
};
_Static_assert(sizeof(struct dc_rans_esym) == 16, "dc_rans_esym is four 32-bit words");

#if defined(__x86_64__)
#if DC_KERN_EMU_AVX512
#define DC_AVX512_TARGET DC_EMU_TARGET
#define DC_AVX512_GOLOMB_TARGET DC_EMU_TARGET
#else
#define DC_AVX512_TARGET                                                      \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,popcnt,bmi2")))
#define DC_AVX512_GOLOMB_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,bmi2")))
#endif
#define DC_AVX2_TARGET __attribute__((target("avx2,popcnt,bmi2")))
#endif

struct dc_ent_scratch {
    size_t max_count; /* bytes of values coded at once */
    uint32_t *hist;   /* 65536 */
    uint32_t *qfreq;  /* 65536 */
    uint32_t *cum;    /* 65537 */
    /* decoder tables, two sets (positions and values decode at once): */
    uint64_t *dtab[2]; /* 1-4-way: per slot, sym | (slot - cum) << 16 | freq << 32 */
    uint16_t *syms;   /* 65536: list of used symbols */
    struct dc_rans_esym *esym; /* 65536: encoder symbols (reciprocals) */
    /* 32-way: per slot freq << 16 | (slot - cum), and the symbol (+ 16
     * entries so that a 32-bit gather of the last one stays inside) */
    uint32_t *ftab[2];
    uint16_t *stab[2];
    uint16_t *gsym;   /* gap quotients (encoder), gsym_cap entries */
    size_t gsym_cap;
    unsigned max_ways; /* largest interleave the encoder writes (32 or 4) */
    uint8_t *tmp[2];  /* candidate outputs, each val_bound(max_count, 8) */
    size_t tmp_cap;
    uint64_t *hkeys;  /* hash table for w > 2 entropy */
    uint32_t *hcnt;
    size_t hcap;
};

unsigned dc_ent_rans_ways = 0;

const char *dc_ent_method_name(unsigned method)
{
    static const char *const names[] = {"raw", "zstd", "rans", "planes", "golomb", "gaps"};
    return method < DC_ENT_METHOD_COUNT ? names[method] : "?";
}

dc_status_t dc_ent_scratch_create(size_t max_count, dc_ent_scratch_t **out)
{
    dc_ent_scratch_t *s = calloc(1, sizeof(*s));
    if (!s)
        return dc_error(DC_ERR_NOMEM, "entropy scratch");
    s->max_count = max_count;
    s->max_ways = 32;
    s->tmp_cap = dc_ent_val_bound(max_count, 1);
    s->hcap = 16;
    while (s->hcap < max_count / 2) /* words of >= 4 bytes: load <= 50% */
        s->hcap <<= 1;
    s->hist = calloc(65536, sizeof(uint32_t));
    s->qfreq = calloc(65536, sizeof(uint32_t));
    s->cum = calloc(65537, sizeof(uint32_t));
    s->dtab[0] = malloc(65536 * sizeof(uint64_t));
    s->dtab[1] = malloc(65536 * sizeof(uint64_t));
    s->syms = calloc(65536, sizeof(uint16_t));
    s->esym = calloc(65536, sizeof(*s->esym));
    for (unsigned j = 0; j < 2; j++) {
        s->ftab[j] = calloc(65536, sizeof(uint32_t));
        s->stab[j] = calloc(65536 + 16, sizeof(uint16_t));
    }
    s->tmp[0] = malloc(s->tmp_cap);
    s->tmp[1] = malloc(s->tmp_cap);
    s->hkeys = malloc(s->hcap * sizeof(uint64_t));
    s->hcnt = calloc(s->hcap, sizeof(uint32_t));
    if (!s->hist || !s->qfreq || !s->cum || !s->dtab[0] || !s->dtab[1] || !s->syms ||
        !s->esym || !s->tmp[0] || !s->tmp[1] || !s->hkeys || !s->hcnt ||
        !s->ftab[0] || !s->ftab[1] || !s->stab[0] || !s->stab[1]) {
        dc_ent_scratch_free(s);
        return dc_error(DC_ERR_NOMEM, "entropy scratch for %zu words", max_count);
    }
    *out = s;
    return DC_OK;
}

void dc_ent_scratch_set_max_ways(dc_ent_scratch_t *s, unsigned ways)
{
    s->max_ways = ways >= 32 ? 32 : 4;
}

void dc_ent_scratch_free(dc_ent_scratch_t *s)
{
    if (!s)
        return;
    free(s->hist);
    free(s->qfreq);
    free(s->cum);
    free(s->dtab[0]);
    free(s->dtab[1]);
    free(s->syms);
    free(s->esym);
    for (unsigned j = 0; j < 2; j++) {
        free(s->ftab[j]);
        free(s->stab[j]);
    }
    free(s->gsym);
    free(s->tmp[0]);
    free(s->tmp[1]);
    free(s->hkeys);
    free(s->hcnt);
    free(s);
}

/* --- varints -------------------------------------------------------------- */

size_t dc_ent_put_varint(uint8_t *dst, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        dst[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    dst[n++] = (uint8_t)v;
    return n;
}

dc_status_t dc_ent_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    const uint8_t *q = *p;
    for (unsigned i = 0; i < 10; i++) {
        if (q >= end)
            return dc_error(DC_ERR_FORMAT, "truncated varint");
        uint8_t b = *q++;
        if (i == 9 && b > 1)
            return dc_error(DC_ERR_FORMAT, "varint overflows 64 bits");
        r |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *p = q;
            *v = r;
            return DC_OK;
        }
    }
    return dc_error(DC_ERR_FORMAT, "varint longer than 10 bytes");
}

/* A stream written at at + 5 (len bytes) gets its varint length in front:
 * the length goes at `at` and the stream moves up to follow it; returns
 * the bytes both take. */
static size_t dc_ent_prefix_len(uint8_t *at, size_t len)
{
    uint8_t vb[10];
    size_t vl = dc_ent_put_varint(vb, len);
    memmove(at + vl, at + 5, len);
    memcpy(at, vb, vl);
    return vl + len;
}

/* --- positions: Golomb-coded gaps ----------------------------------------- */

size_t dc_ent_pos_bound(size_t count, uint64_t n)
{
    /* With the chosen m, a gap costs at most q+1+ceil(log2 m) bits and the
     * sum of q is <= n/m; generous: 10 + count * 34 bits + n/8. */
    return 16 + (count * 34 + 7) / 8 + (size_t)(n / 8) + 8;
}

static unsigned dc_ceil_log2_u64(uint64_t m)
{
    unsigned b = 0;
    while (b < 64 && (1ull << b) < m)
        b++;
    return b;
}

static uint64_t dc_golomb_param(size_t count, uint64_t span)
{
    if (count == 0)
        return 1;
    double mean = (double)(span - count) / (double)count; /* mean gap */
    if (mean <= 0.0)
        return 1;
    double theta = mean / (1.0 + mean);
    double m = ceil(log(1.0 + theta) / -log(theta));
    if (!(m >= 1.0))
        m = 1.0;
    if (m > 2147483648.0)
        m = 2147483648.0;
    return (uint64_t)m;
}

/*
 * Golomb encoder.  The bit writer is branch-free: acc's low nb bits (nb < 8
 * between codes) are pending, MSB first; after each code the whole bytes
 * go out with one 8-byte big-endian store (bytes past the whole ones are
 * scratch, rewritten by the next store), so a put never branches on the
 * fill.  Within 8 bytes of the end, bytes go out one at a time, checked.
 */
typedef struct {
    uint64_t acc;
    unsigned nb;
    uint8_t *p, *lim, *end; /* lim: last p an 8-byte store may start at */
} dc_gw_t;

/* Put the L (1..56) low bits of v; 0 when the output is full. */
static inline __attribute__((always_inline)) int dc_gw_put(dc_gw_t *w, uint64_t v, unsigned L)
{
    w->acc = (w->acc << L) | v;
    w->nb += L;
    if (DC_LIKELY(w->p <= w->lim)) {
        uint64_t out = __builtin_bswap64(w->acc << (64 - w->nb));
        memcpy(w->p, &out, 8);
        w->p += w->nb >> 3;
        w->nb &= 7;
        return 1;
    }
    for (; w->nb >= 8; w->nb -= 8) {
        if (w->p >= w->end)
            return 0;
        *w->p++ = (uint8_t)(w->acc >> (w->nb - 8));
    }
    return 1;
}

/* Golomb parameters of a stream: m, b = ceil(log2 m), cut = 2^b - m, and
 * mrcp for g / m by a multiply (g, m < 2^32, M = floor(2^64 / m) + 1:
 * (g * M) >> 64 is exact since g * m < 2^64). */
typedef struct {
    uint64_t m, cut, mrcp;
    unsigned b;
} dc_golomb_t;

/* The codes of the gaps before pos[k0] .. pos[k1 - 1] (the gap before
 * pos[0] is pos[0]); 0 when the output is full. */
static inline __attribute__((always_inline)) int
dc_golomb_range(dc_gw_t *w, const uint32_t *restrict pos, size_t k0, size_t k1,
                const dc_golomb_t *gp)
{
    const uint64_t m = gp->m, cut = gp->cut, mrcp = gp->mrcp;
    const unsigned b = gp->b;
    uint32_t prev = k0 ? pos[k0 - 1] : UINT32_MAX; /* -1 */
    for (size_t k = k0; k < k1; k++) {
        uint64_t g = (uint32_t)(pos[k] - prev - 1u);
        prev = pos[k];
        uint64_t q = m > 1 ? (uint64_t)(((unsigned __int128)g * mrcp) >> 64) : g;
        uint64_t r = g - q * m;
        /* truncated binary remainder: b - 1 bits below cut, else b bits of
         * r + cut (b == 0: m == 1, nothing) */
        uint64_t lt = r < cut;
        unsigned rb = b - (unsigned)lt;
        uint64_t rv = r + (cut & (lt - 1));
        if (DC_LIKELY(q + 1 + rb <= 56)) {
            /* the whole code in one put: q zeros, a one, the remainder */
            if (!dc_gw_put(w, (1ull << rb) | rv, (unsigned)q + 1 + rb))
                return 0;
            continue;
        }
        for (; q >= 32; q -= 32)
            if (!dc_gw_put(w, 0, 32))
                return 0;
        if (!dc_gw_put(w, 1, (unsigned)q + 1))
            return 0;
        if (rb && !dc_gw_put(w, rv, rb))
            return 0;
    }
    return 1;
}

static inline __attribute__((always_inline)) int dc_gw_finish(dc_gw_t *w)
{
    if (w->nb) {
        if (w->p >= w->end)
            return 0;
        *w->p++ = (uint8_t)(w->acc << (8 - w->nb));
        w->nb = 0;
    }
    return 1;
}

/* (The writer works on a local copy: the output's byte stores could alias
 * *w, which would force its fields through memory on every put.) */
static int dc_golomb_all_base(dc_gw_t *wp, const uint32_t *pos, size_t count,
                              const dc_golomb_t *gp)
{
    dc_gw_t w = *wp;
    int ok = dc_golomb_range(&w, pos, 0, count, gp) && dc_gw_finish(&w);
    *wp = w;
    return ok;
}

#if defined(__x86_64__)
/* The same with BMI2's flag-free variable shifts (shlx/shrx: one uop
 * each, where shl %cl is three), for CPUs the avx2 kernels run on. */
__attribute__((target("bmi2"))) static int
dc_golomb_all_bmi2(dc_gw_t *wp, const uint32_t *pos, size_t count, const dc_golomb_t *gp)
{
    dc_gw_t w = *wp;
    int ok = dc_golomb_range(&w, pos, 0, count, gp) && dc_gw_finish(&w);
    *wp = w;
    return ok;
}

/*
 * AVX-512: the codes of 16 gaps at a time in vector lanes (gap, quotient by
 * a double multiply corrected by one step either way, truncated binary
 * remainder, code value and length), joined into 4 (or 8) codes of at most
 * 56 bits, then only the bit packing is scalar.  A group with a code
 * longer than one put goes through the scalar loop.
 * Needs m <= 2^30 (the remainder correction is done in signed 32 bits).
 */
DC_AVX512_GOLOMB_TARGET static int
dc_golomb_all_avx512(dc_gw_t *wp, const uint32_t *pos, size_t count, const dc_golomb_t *gp)
{
    dc_gw_t wl = *wp, *w = &wl;
    int ok = 0;
    size_t k = 0;
    if (gp->m <= (1u << 30)) {
        const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
        const __m512i vm = _mm512_set1_epi32((int)gp->m), vcut = _mm512_set1_epi32((int)gp->cut);
        const __m512i vb = _mm512_set1_epi32((int)gp->b);
        const __m512i c55 = _mm512_set1_epi32(55), c56 = _mm512_set1_epi32(56);
        const __m512d inv = _mm512_set1_pd(1.0 / (double)gp->m);
        __m512i prevv = _mm512_set1_epi32(-1); /* lane 15: the position before */
        _Alignas(64) uint32_t vs[16], ls[16];
        _Alignas(64) uint64_t vq[8], lq[8];
        const __m512i pick_even = _mm512_set_epi64(6, 4, 2, 0, 6, 4, 2, 0);
        const __m512i pick_odd = _mm512_set_epi64(7, 5, 3, 1, 7, 5, 3, 1);
        const __m512i c56q = _mm512_set1_epi64(56);
        for (; k + 16 <= count; k += 16) {
            __m512i cur = _mm512_loadu_si512(pos + k);
            __m512i prv = _mm512_alignr_epi32(cur, prevv, 15);
            prevv = cur;
            __m512i g = _mm512_sub_epi32(_mm512_sub_epi32(cur, prv), one);
            __m256i qlo = _mm512_cvttpd_epu32(
                _mm512_mul_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(g)), inv));
            __m256i qhi = _mm512_cvttpd_epu32(
                _mm512_mul_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(g, 1)), inv));
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(qlo), qhi, 1);
            /* r = g - q*m is exact in signed 32 bits (|error of q| <= 1,
             * m <= 2^30); step q once toward the true quotient */
            __m512i r = _mm512_sub_epi32(g, _mm512_mullo_epi32(q, vm));
            __mmask16 neg = _mm512_cmplt_epi32_mask(r, zero);
            q = _mm512_mask_sub_epi32(q, neg, q, one);
            r = _mm512_mask_add_epi32(r, neg, r, vm);
            __mmask16 big = _mm512_cmpge_epi32_mask(r, vm);
            q = _mm512_mask_add_epi32(q, big, q, one);
            r = _mm512_mask_sub_epi32(r, big, r, vm);
            __mmask16 lt = _mm512_cmplt_epu32_mask(r, vcut);
            __m512i rb = _mm512_mask_sub_epi32(vb, lt, vb, one);
            __m512i rv = _mm512_mask_add_epi32(r, (__mmask16)~lt, r, vcut);
            __m512i len = _mm512_add_epi32(_mm512_add_epi32(q, one), rb);
            __mmask16 slow = _mm512_cmpgt_epu32_mask(q, c55) | _mm512_cmpgt_epu32_mask(len, c56);
            if (DC_UNLIKELY(slow)) {
                if (!dc_golomb_range(w, pos, k, k + 16, gp))
                    goto out;
                continue;
            }
            __m512i val = _mm512_or_si512(_mm512_sllv_epi32(one, rb), rv);
            /* join neighbouring codes while the joint code fits one put:
             * pairs in 64-bit lanes (value < 2^len), then pairs of pairs */
            const __m512i lo32 = _mm512_set1_epi64(0xffffffff);
            __m512i v2 = _mm512_or_si512(
                _mm512_sllv_epi64(_mm512_and_si512(val, lo32), _mm512_srli_epi64(len, 32)),
                _mm512_srli_epi64(val, 32));
            __m512i l2 = _mm512_add_epi64(_mm512_and_si512(len, lo32), _mm512_srli_epi64(len, 32));
            if (DC_UNLIKELY(_mm512_cmpgt_epu64_mask(l2, c56q))) {
                _mm512_store_si512(vs, val);
                _mm512_store_si512(ls, len);
                for (unsigned j = 0; j < 16; j++)
                    if (!dc_gw_put(w, vs[j], ls[j]))
                        goto out;
                continue;
            }
            __m512i ev = _mm512_permutexvar_epi64(pick_even, v2);
            __m512i el = _mm512_permutexvar_epi64(pick_even, l2);
            __m512i ov = _mm512_permutexvar_epi64(pick_odd, v2);
            __m512i ol = _mm512_permutexvar_epi64(pick_odd, l2);
            __m512i l4 = _mm512_add_epi64(el, ol);
            if (DC_LIKELY(!(_mm512_cmpgt_epu64_mask(l4, c56q) & 0x0f))) {
                _mm512_store_si512(vq, _mm512_or_si512(_mm512_sllv_epi64(ev, ol), ov));
                _mm512_store_si512(lq, l4);
                for (unsigned j = 0; j < 4; j++)
                    if (!dc_gw_put(w, vq[j], (unsigned)lq[j]))
                        goto out;
                continue;
            }
            _mm512_store_si512(vq, v2);
            _mm512_store_si512(lq, l2);
            for (unsigned j = 0; j < 8; j++)
                if (!dc_gw_put(w, vq[j], (unsigned)lq[j]))
                    goto out;
        }
    }
    ok = dc_golomb_range(w, pos, k, count, gp) && dc_gw_finish(w);
out:
    *wp = wl;
    return ok;
}
#endif

#if defined(__x86_64__)
/* 1 when the kernels' ISA is avx2 or avx512: the CPU has AVX2, BMI2 and
 * LZCNT (the BMI2 coders and the AVX2 decoders and encoder may run). */
static int dc_ent_avx2(void)
{
    return strcmp(dc_kern_isa(), "scalar") != 0;
}

/* 1 when the AVX-512 decoders and encoder may run: the kernels' ISA is
 * avx512 (which also means AVX512-VBMI2) and the CPU has AVX512-VBMI
 * (every one with VBMI2 so far). */
static int dc_ent_avx512(void)
{
    /* -1 until known (threads may race to the same answer) */
    static _Atomic int vbmi = -1;
    int v = atomic_load_explicit(&vbmi, memory_order_relaxed);
    if (v < 0) {
#if DC_KERN_EMU_AVX512
        v = 1; /* emulated (the kernels' avx512 is supported where this runs) */
#else
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512vbmi") ? 1 : 0;
#endif
        atomic_store_explicit(&vbmi, v, memory_order_relaxed);
    }
    return v && strcmp(dc_kern_isa(), "avx512") == 0;
}
#endif

dc_status_t dc_ent_pos_encode(const uint32_t *pos, size_t count, uint64_t n, uint8_t *dst,
                              size_t cap, size_t *out_len)
{
    if (cap < 10)
        return dc_error(DC_ERR_BUSY, "positions: output buffer too small");
    uint64_t span = count ? (uint64_t)pos[count - 1] + 1 : 0;
    dc_golomb_t gp;
    gp.m = dc_golomb_param(count, span);
    size_t h = dc_ent_put_varint(dst, gp.m);
    gp.b = dc_ceil_log2_u64(gp.m);
    gp.cut = (gp.b >= 64 ? 0 : (1ull << gp.b)) - gp.m;
    gp.mrcp = gp.m > 1 ? UINT64_MAX / gp.m + 1 : 0;
    dc_gw_t w = {.p = dst + h, .end = dst + cap};
    w.lim = cap - h >= 8 ? w.end - 8 : dst + h - 1;
    int ok;
#if defined(__x86_64__)
    if (strcmp(dc_kern_isa(), "avx512") == 0)
        ok = dc_golomb_all_avx512(&w, pos, count, &gp);
    else if (dc_ent_avx2())
        ok = dc_golomb_all_bmi2(&w, pos, count, &gp);
    else
#endif
        ok = dc_golomb_all_base(&w, pos, count, &gp);
    if (!ok)
        return dc_error(DC_ERR_BUSY, "positions: output buffer too small");
    (void)n;
    *out_len = (size_t)(w.p - dst);
    return DC_OK;
}

/* Bits of the positions stream left from (p, bc). */
static inline uint64_t dc_gd_left(const dc_golomb_dec_t *d)
{
    return (uint64_t)(d->end - d->p) * 8 - d->bc;
}

/* The next nb (1..57, <= dc_gd_left) stream bits, right-aligned. */
static inline uint64_t dc_gd_peek(const dc_golomb_dec_t *d, unsigned nb)
{
    uint64_t v = 0;
    if (d->end - d->p >= 8) {
        v = __builtin_bswap64(dc_load_le64(d->p));
    } else {
        for (ptrdiff_t i = 0; i < d->end - d->p; i++)
            v |= (uint64_t)d->p[i] << (56 - 8 * i);
    }
    return (v << d->bc) >> (64 - nb);
}

static inline void dc_gd_skip(dc_golomb_dec_t *d, uint64_t nb)
{
    uint64_t t = d->bc + nb;
    d->p += t >> 3;
    d->bc = (unsigned)(t & 7);
}

/* One code, bit-exact and bounds-checked at every step (long runs of zeros,
 * the last bytes of the stream). */
static dc_status_t dc_gd_careful(dc_golomb_dec_t *d, uint32_t *out)
{
    uint64_t q = 0;
    for (;;) {
        uint64_t left = dc_gd_left(d);
        if (left == 0)
            return dc_error(DC_ERR_FORMAT, "positions: stream truncated");
        unsigned nb = left < 57 ? (unsigned)left : 57;
        uint64_t v = dc_gd_peek(d, nb);
        if (v == 0) {
            q += nb;
            dc_gd_skip(d, nb);
            if (q > d->n)
                return dc_error(DC_ERR_FORMAT, "positions: gap exceeds chunk");
            continue;
        }
        unsigned lz = (unsigned)__builtin_clzll(v) - (64 - nb);
        q += lz;
        dc_gd_skip(d, lz + 1);
        break;
    }
    if (q > d->n)
        return dc_error(DC_ERR_FORMAT, "positions: gap exceeds chunk");
    uint64_t rem = 0;
    unsigned b = d->b;
    if (b) {
        if (dc_gd_left(d) < b - 1)
            return dc_error(DC_ERR_FORMAT, "positions: stream truncated");
        rem = b > 1 ? dc_gd_peek(d, b - 1) : 0;
        if (rem < d->cut) {
            dc_gd_skip(d, b - 1);
        } else {
            if (dc_gd_left(d) < b)
                return dc_error(DC_ERR_FORMAT, "positions: stream truncated");
            rem = dc_gd_peek(d, b) - d->cut;
            dc_gd_skip(d, b);
            if (rem >= d->m)
                return dc_error(DC_ERR_FORMAT, "positions: bad remainder");
        }
    }
    uint64_t g = q * d->m + rem;
    uint64_t ps = d->next + g;
    if (g > d->n || ps >= d->n)
        return dc_error(DC_ERR_FORMAT, "positions: position %llu past chunk of %llu",
                        (unsigned long long)ps, (unsigned long long)d->n);
    *out = (uint32_t)ps;
    d->next = ps + 1;
    return DC_OK;
}

dc_status_t dc_golomb_dec_init(dc_golomb_dec_t *d, const uint8_t *src, size_t len, size_t count,
                               uint64_t n)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t m;
    if (dc_ent_get_varint(&p, end, &m) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "positions: bad Golomb parameter");
    if (m < 1 || m > (1ull << 32))
        return dc_error(DC_ERR_FORMAT, "positions: Golomb parameter %llu out of range",
                        (unsigned long long)m);
    if (count > n)
        return dc_error(DC_ERR_FORMAT, "positions: %zu changes in %llu elements", count,
                        (unsigned long long)n);
    d->p = p;
    d->end = end;
    d->bc = 0;
    d->m = m;
    d->b = dc_ceil_log2_u64(m);
    d->cut = (d->b >= 64 ? 0 : (1ull << d->b)) - m;
    d->n = n;
    d->next = 0;
    d->k = 0;
    d->count = count;
    /* With many gaps and short codes, a table over the next DC_GT_BITS
     * bits gives gap | bits used << 24 for every code that fits in them
     * (0: decode it without the table): each code of q zeros, a one and r
     * in truncated binary fills the 2^(DC_GT_BITS - length) slots it
     * prefixes. */
    unsigned b = d->b;
    d->use_tab = count >= 4096 && b + 1 <= DC_GT_BITS;
    d->glook = 0; /* gtab2 not built yet */
    if (d->use_tab) {
        uint32_t *gtab = d->gtab;
        memset(gtab, 0, sizeof(d->gtab));
        for (uint64_t q = 0; q + 1 + (b ? b - 1 : 0) <= DC_GT_BITS; q++) {
            for (uint64_t r = 0; r < m; r++) {
                unsigned rb = b ? (r < d->cut ? b - 1 : b) : 0;
                uint64_t rv = b ? (r < d->cut ? r : r + d->cut) : 0;
                unsigned clen = (unsigned)q + 1 + rb;
                if (clen > DC_GT_BITS)
                    continue;
                uint32_t code = (uint32_t)(((1ull << rb) | rv) << (DC_GT_BITS - clen));
                uint32_t e = (uint32_t)(q * m + r) | (uint32_t)clen << 24;
                for (uint32_t j = 0; j < (1u << (DC_GT_BITS - clen)); j++)
                    gtab[code | j] = e;
            }
        }
    }
    return DC_OK;
}

/* gtab2 from gtab (what dc_ent_sparse_run decodes with; built on first
 * use).  Every gtab code has <= DC_GT_BITS bits, so its gap is < 2^12
 * ((13 - b) m - 1 < (13 - b) 2^b <= 4096 for b <= 11): the one-code entry
 * is a plain repacking, 0 for 0.  A second code also fits a slot when it
 * fits the bits after the first (zero-filled there: a code that needs the
 * filled bits is longer than what is left, and is refused); the shortest
 * code has max(b, 1) bits, so only b <= DC_GT_BITS / 2 has any. */
static void dc_golomb_build_g2(dc_golomb_dec_t *d)
{
    const uint32_t *gtab = d->gtab;
    uint32_t *g2 = d->gtab2;
    for (uint32_t i = 0; i < (1u << DC_GT_BITS); i++) {
        uint32_t e0 = gtab[i], g0 = e0 & 0xfffu;
        g2[i] = e0 >> 24 | g0 << 7 | g0 << 20;
    }
    size_t twos = 0;
    unsigned minlen = d->b ? d->b : 1;
    if (2 * minlen <= DC_GT_BITS) {
        for (uint32_t i = 0; i < (1u << DC_GT_BITS); i++) {
            uint32_t e0 = gtab[i];
            unsigned l0 = e0 >> 24;
            if (e0 == 0 || l0 + minlen > DC_GT_BITS)
                continue;
            uint32_t e1 = gtab[(i << l0) & ((1u << DC_GT_BITS) - 1)];
            uint32_t g0 = e0 & 0xfffu, o1 = g0 + 1 + (e1 & 0xffffffu);
            if (e1 != 0 && l0 + (e1 >> 24) <= DC_GT_BITS && o1 < (1u << 12)) {
                g2[i] = (l0 + (e1 >> 24)) | 1u << 6 | g0 << 7 | o1 << 20;
                twos++;
            }
        }
    }
    /* three lookups of up to two codes beat four of one from 1/8 of the
     * slots on (measured: the 2.3% gen pair, m = 29, gains 8%; with no
     * two-code slot at all the one-code loop is faster) */
    d->glook = twos * 8 >= (1u << DC_GT_BITS) ? 3 : 4;
}

dc_status_t dc_golomb_dec_run(dc_golomb_dec_t *d, uint32_t *pos, size_t upto)
{
    /*
     * Fast path while >= 8 bytes are left: the stream position is a byte
     * pointer p plus bc < 8 bits already used of p[0], and one big-endian
     * load gives cont, the 64 stream bits from p on (the bits at the
     * position are cont << bc).  With the table, four codes come from one
     * load (4 * DC_GT_BITS + 7 <= 64): the dependency chain per code is a
     * shift, a table load and an add.  Codes that do not fit what is left
     * of cont, and the last bytes, go through dc_gd_careful.
     */
    const uint8_t *p = d->p, *end = d->end;
    unsigned bc = d->bc;
    uint64_t next = d->next;
    const uint64_t n = d->n, m = d->m, cut = d->cut;
    const unsigned b = d->b;
    const uint32_t *gtab = d->gtab;
    size_t k = d->k;
    if (upto > d->count)
        upto = d->count;
    dc_status_t st = DC_OK;
    while (k < upto) {
        if (end - p < 8)
            goto careful;
        uint64_t cont = __builtin_bswap64(dc_load_le64(p));
        if (d->use_tab && upto - k >= 4) {
            uint32_t e0 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            if (DC_UNLIKELY(e0 == 0))
                goto one;
            bc += e0 >> 24;
            uint32_t e1 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            uint64_t n0 = next + (e0 & 0xffffffu);
            pos[k] = (uint32_t)n0;
            next = n0 + 1;
            k += 1;
            if (DC_UNLIKELY(e1 == 0))
                goto renorm;
            bc += e1 >> 24;
            uint32_t e2 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            uint64_t n1 = next + (e1 & 0xffffffu);
            pos[k] = (uint32_t)n1;
            next = n1 + 1;
            k += 1;
            if (DC_UNLIKELY(e2 == 0))
                goto renorm;
            bc += e2 >> 24;
            uint32_t e3 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            uint64_t n2 = next + (e2 & 0xffffffu);
            pos[k] = (uint32_t)n2;
            next = n2 + 1;
            k += 1;
            if (DC_UNLIKELY(e3 == 0))
                goto renorm;
            bc += e3 >> 24;
            uint64_t n3 = next + (e3 & 0xffffffu);
            pos[k] = (uint32_t)n3;
            next = n3 + 1;
            k += 1;
        renorm:
            /* positions only grow: the last one written is the largest */
            if (DC_UNLIKELY(next > n)) {
                st = dc_error(DC_ERR_FORMAT, "positions: position %llu past chunk of %llu",
                              (unsigned long long)(next - 1), (unsigned long long)n);
                goto out;
            }
            p += bc >> 3;
            bc &= 7;
            continue;
        }
    one:
        /* one code from the >= 57 bits left of cont, when it fits them */
        {
            uint64_t win = cont << bc;
            unsigned lz = win ? (unsigned)__builtin_clzll(win) : 64;
            if (lz + 1 + b > 64 - bc)
                goto careful;
            /* in two shifts: with b = 0 the code can be all 64 bits */
            win = (win << lz) << 1;
            unsigned used = lz + 1;
            uint64_t rem = 0;
            if (b) {
                /* truncated binary, branch-free: b-1 bits, or b when >= cut */
                uint64_t short_r = b > 1 ? win >> (65 - b) : 0;
                uint64_t long_r = (win >> (64 - b)) - cut;
                unsigned is_long = short_r >= cut;
                rem = is_long ? long_r : short_r;
                used += b - 1 + is_long;
                if (DC_UNLIKELY(rem >= m)) {
                    st = dc_error(DC_ERR_FORMAT, "positions: bad remainder");
                    goto out;
                }
            }
            uint64_t ps = next + (uint64_t)lz * m + rem;
            if (ps >= n) {
                st = dc_error(DC_ERR_FORMAT, "positions: position %llu past chunk of %llu",
                              (unsigned long long)ps, (unsigned long long)n);
                goto out;
            }
            pos[k++] = (uint32_t)ps;
            next = ps + 1;
            bc += used;
            p += bc >> 3;
            bc &= 7;
            continue;
        }
    careful:
        d->p = p;
        d->bc = bc;
        d->next = next;
        if ((st = dc_gd_careful(d, &pos[k])) != DC_OK)
            goto out;
        k++;
        p = d->p;
        bc = d->bc;
        next = d->next;
    }
out:
    d->p = p;
    d->bc = bc;
    d->next = next;
    d->k = k;
    return st;
}

dc_status_t dc_golomb_dec_finish(const dc_golomb_dec_t *d)
{
    uint64_t left = dc_gd_left(d);
    if (d->k != d->count || left >= 8 || (left && ((d->p[0] << d->bc) & 0xff) != 0))
        return dc_error(DC_ERR_FORMAT, "positions: trailing bytes after %zu positions",
                        d->count);
    return DC_OK;
}

dc_status_t dc_ent_pos_decode(const uint8_t *src, size_t len, size_t count, uint64_t n,
                              uint32_t *pos)
{
    dc_golomb_dec_t *d = malloc(sizeof(*d));
    if (!d)
        return dc_error(DC_ERR_NOMEM, "positions decoder");
    dc_status_t st = dc_golomb_dec_init(d, src, len, count, n);
    if (st == DC_OK)
        st = dc_golomb_dec_run(d, pos, count);
    if (st == DC_OK)
        st = dc_golomb_dec_finish(d);
    free(d);
    return st;
}

/* --- order-0 rANS ---------------------------------------------------------- */

static inline uint32_t dc_sym_at(const uint8_t *v, size_t i, unsigned stride, unsigned bits)
{
    return bits == 16 ? dc_load_le16(v + i * stride) : v[i * stride];
}

/* Quantize the histogram of the nsym symbols s->syms[] (count in all) to
 * frequencies summing to 2^S in s->qfreq[]; returns the coded size in bits
 * those frequencies give (sum of hist * log2(2^S / q)), or -1 when the
 * alphabet does not fit. */
static double dc_rans_quantize(dc_ent_scratch_t *s, size_t nsym, size_t count, unsigned S)
{
    const uint32_t *hist = s->hist;
    uint32_t M = 1u << S;
    if (nsym > M / 2)
        return -1.0;
    uint64_t sum = 0;
    size_t big = 0;
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        uint64_t q = (uint64_t)hist[c] * M / count;
        if (q == 0)
            q = 1;
        s->qfreq[c] = (uint32_t)q;
        sum += q;
        if (hist[c] > hist[s->syms[big]])
            big = k;
    }
    while (sum > M) {
        /* take from the largest quantized frequency */
        size_t bi = 0;
        for (size_t k = 1; k < nsym; k++)
            if (s->qfreq[s->syms[k]] > s->qfreq[s->syms[bi]])
                bi = k;
        uint32_t *q = &s->qfreq[s->syms[bi]];
        uint64_t take = DC_MIN(sum - M, (uint64_t)(*q - (*q + 1) / 2));
        if (take == 0)
            return -1.0;
        *q -= (uint32_t)take;
        sum -= take;
    }
    s->qfreq[s->syms[big]] += (uint32_t)(M - sum);
    double bits = 0.0;
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        bits += (double)hist[c] * ((double)S - log2((double)s->qfreq[c]));
    }
    return bits;
}

/*
 * Encode count symbols (8 or 16 bits, read at v + i*stride) as a RANS
 * stream.  Returns DC_ERR_BUSY when the alphabet is too large for the
 * table precision or cap is too small.
 */
/* Histogram of count symbols into s->hist (all zero before), the used
 * symbols listed (unsorted) in s->syms; returns their number.  The caller
 * clears it with dc_hist_clear. */
static size_t dc_hist_build(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                            unsigned stride, unsigned bits)
{
    uint32_t *hist = s->hist;
    size_t nsym = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t c = dc_sym_at(v, i, stride, bits);
        if (hist[c]++ == 0)
            s->syms[nsym++] = (uint16_t)c;
    }
    return nsym;
}

static void dc_hist_clear(dc_ent_scratch_t *s, size_t nsym)
{
    for (size_t k = 0; k < nsym; k++)
        s->hist[s->syms[k]] = 0;
}

/* count * H(histogram) in bits. */
static double dc_hist_entropy_bits(const dc_ent_scratch_t *s, size_t nsym, size_t count)
{
    double bits = 0.0;
    for (size_t k = 0; k < nsym; k++) {
        double h = s->hist[s->syms[k]];
        bits -= h * log2(h / (double)count);
    }
    return bits;
}

static dc_status_t dc_rans_encode_hist(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                       unsigned stride, unsigned bits, size_t nsym,
                                       uint8_t *dst, size_t cap, size_t *out_len);

static dc_status_t dc_rans_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                  unsigned stride, unsigned bits, uint8_t *dst, size_t cap,
                                  size_t *out_len)
{
    size_t nsym = dc_hist_build(s, v, count, stride, bits);
    dc_status_t st = dc_rans_encode_hist(s, v, count, stride, bits, nsym, dst, cap, out_len);
    dc_hist_clear(s, nsym);
    return st;
}

/*
 * The rANS encode loop, specialized per symbol width and stride: symbols
 * count-1 down to 0 (symbol i by state i % ways) into the bytes below *pp,
 * never below lo; returns 0 when it runs out of room.  Renormalization is
 * branch-free: with x < 2^31 and x_max >= 2^15 at most 2 bytes go out, as
 * many as x >= x_max and x >= 256 * x_max say; both are stored (big-endian
 * at p - 2, the one that does not go out is scratch below the output).
 * Everything the loop needs is in locals (no reloads through the byte
 * stores, which may alias anything).
 */
static inline __attribute__((always_inline)) int
dc_rans_put_all(const struct dc_rans_esym *restrict esym, const uint8_t *restrict v,
                size_t count, const unsigned stride, const unsigned bits, const unsigned ways,
                uint8_t *lo, uint8_t **pp, uint32_t xs[4])
{
    uint8_t *p = *pp;
    uint32_t x0 = xs[0], x1 = xs[1], x2 = xs[2], x3 = xs[3];
#define DC_RANS_PUT(X, I)                                                     \
    do {                                                                      \
        const struct dc_rans_esym *e = &esym[dc_sym_at(v, (I), stride, bits)]; \
        uint32_t xm = e->x_max;                                               \
        unsigned nb_ = (unsigned)(X >= xm) + (unsigned)((uint64_t)X >= (uint64_t)xm << 8); \
        uint16_t be_ = __builtin_bswap16((uint16_t)X);                        \
        memcpy(p - 2, &be_, 2);                                               \
        p -= nb_;                                                             \
        X >>= 8 * nb_;                                                        \
        uint32_t q = (uint32_t)(((uint64_t)X * e->rcp_freq) >> 32) >> e->rcp_shift; \
        X = X + e->bias + q * e->cmpl_freq;                                   \
    } while (0)
    size_t i = count;
    while (i % ways) {
        i--;
        if (p - lo < 4)
            return 0;
        switch (i & (ways - 1)) {
        case 0: DC_RANS_PUT(x0, i); break;
        case 1: DC_RANS_PUT(x1, i); break;
        case 2: DC_RANS_PUT(x2, i); break;
        default: DC_RANS_PUT(x3, i); break;
        }
    }
    if (ways == 4) {
        for (; i >= 4; i -= 4) {
            if (DC_UNLIKELY(p - lo < 16))
                return 0;
            DC_RANS_PUT(x3, i - 1);
            DC_RANS_PUT(x2, i - 2);
            DC_RANS_PUT(x1, i - 3);
            DC_RANS_PUT(x0, i - 4);
        }
    } else if (ways == 2) {
        for (; i >= 2; i -= 2) {
            if (DC_UNLIKELY(p - lo < 8))
                return 0;
            DC_RANS_PUT(x1, i - 1);
            DC_RANS_PUT(x0, i - 2);
        }
    } else {
        for (; i >= 1; i--) {
            if (DC_UNLIKELY(p - lo < 4))
                return 0;
            DC_RANS_PUT(x0, i - 1);
        }
    }
#undef DC_RANS_PUT
    xs[0] = x0;
    xs[1] = x1;
    xs[2] = x2;
    xs[3] = x3;
    *pp = p;
    return 1;
}

/* dc_rans_put_all instantiated for the symbol widths and strides in use
 * (16-bit words; bytes; byte planes of 2-, 4-, 8-byte words). */
#define DC_RANS_PUT_DISPATCH                                                  \
    if (bits == 16)                                                           \
        return dc_rans_put_all(esym, v, count, 2, 16, ways, lo, pp, xs);      \
    switch (stride) {                                                         \
    case 1: return dc_rans_put_all(esym, v, count, 1, 8, ways, lo, pp, xs);   \
    case 2: return dc_rans_put_all(esym, v, count, 2, 8, ways, lo, pp, xs);   \
    case 4: return dc_rans_put_all(esym, v, count, 4, 8, ways, lo, pp, xs);   \
    default: return dc_rans_put_all(esym, v, count, stride, 8, ways, lo, pp, xs); \
    }

static int dc_rans_put_base(const struct dc_rans_esym *esym, const uint8_t *v, size_t count,
                            unsigned stride, unsigned bits, unsigned ways, uint8_t *lo,
                            uint8_t **pp, uint32_t xs[4])
{
    DC_RANS_PUT_DISPATCH
}

#if defined(__x86_64__)
__attribute__((target("bmi2"))) static int
dc_rans_put_bmi2(const struct dc_rans_esym *esym, const uint8_t *v, size_t count,
                 unsigned stride, unsigned bits, unsigned ways, uint8_t *lo, uint8_t **pp,
                 uint32_t xs[4])
{
    DC_RANS_PUT_DISPATCH
}
#endif
#undef DC_RANS_PUT_DISPATCH

/*
 * The 32-way layout's encoder: the table is written (dst[0, h)) and s->esym
 * holds the encoder symbols of scale S <= 15 with x_max for this layout.
 * States stay in [2^15, 2^31) (so the 32-bit reciprocals of
 * dc_rans_esym are exact).  Symbols count-1 down to 0, symbol i by state
 * i % 32, each first renormalizing (at most one 16-bit word out: x < 2^31
 * and x_max >= 2^16) into words stored downwards from dst + cap; the
 * decoder, reading upwards, meets them in symbol order, so a SIMD decoder
 * that renormalizes 16 lanes at once reads them in lane order.  Then the
 * 32 final states, state 0 first.
 */
static int dc_r32_put_all(const struct dc_rans_esym *restrict esym, const uint8_t *restrict v,
                          size_t count, size_t downto, const unsigned stride,
                          const unsigned bits, const uint8_t *lo, uint8_t **pp, uint32_t xs[32])
{
    uint8_t *p = *pp;
    size_t i = count;
    while (i > downto) {
        if (DC_UNLIKELY(p - lo < 64 + 2))
            return 0;
        /* to the next multiple of 32 below (at most 32 words) */
        size_t stop = (i - 1) & ~(size_t)31;
        do {
            i--;
            const struct dc_rans_esym *e = &esym[dc_sym_at(v, i, stride, bits)];
            uint32_t x = xs[i & 31];
            unsigned nb = x >= e->x_max;
            dc_store_le16(p - 2, (uint16_t)x);
            p -= 2 * nb;
            x >>= 16 * nb;
            uint32_t q = (uint32_t)(((uint64_t)x * e->rcp_freq) >> 32) >> e->rcp_shift;
            xs[i & 31] = x + e->bias + q * e->cmpl_freq;
        } while (i > stop);
    }
    *pp = p;
    return 1;
}

#if defined(__x86_64__)
/* One 32-way encode step of 16 states (symbols i0..i0+15, descending in the
 * scalar order): the lanes whose state reaches x_max give their low 16
 * bits, in lane order, just below p (as the scalar loop, going down from
 * lane 15, leaves them), then x = x + bias + (x / freq) * (M - freq) with
 * the reciprocal's high product from two even/odd 32x32 multiplies. */
#define DC_R32_PUT16(X, I0)                                                   \
    do {                                                                      \
        __m512i sym_ = bits == 16                                             \
            ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(v + 2 * (I0)))) \
            : _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(v + (I0))));   \
        __m512i ix_ = _mm512_slli_epi32(sym_, 2);                             \
        __m512i xm_ = _mm512_i32gather_epi32(ix_, eb, 4);                     \
        __m512i rc_ = _mm512_i32gather_epi32(ix_, eb + 1, 4);                 \
        __m512i bi_ = _mm512_i32gather_epi32(ix_, eb + 2, 4);                 \
        __m512i cs_ = _mm512_i32gather_epi32(ix_, eb + 3, 4);                 \
        __mmask16 m_ = _mm512_cmpge_epu32_mask(X, xm_);                       \
        unsigned n_ = (unsigned)__builtin_popcount((unsigned)m_);             \
        p -= 2 * n_;                                                          \
        _mm512_mask_cvtepi32_storeu_epi16(p, (__mmask16)((1u << n_) - 1),     \
                                          _mm512_maskz_compress_epi32(m_, X)); \
        X = _mm512_mask_srli_epi32(X, m_, X, 16);                             \
        __m512i pe_ = _mm512_mul_epu32(X, rc_);                               \
        __m512i po_ = _mm512_mul_epu32(_mm512_srli_epi64(X, 32), _mm512_srli_epi64(rc_, 32)); \
        __m512i hi_ = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe_, 32), po_); \
        __m512i q_ = _mm512_srlv_epi32(hi_, _mm512_srli_epi32(cs_, 16));      \
        X = _mm512_add_epi32(_mm512_add_epi32(X, bi_),                        \
                             _mm512_mullo_epi32(q_, _mm512_and_si512(cs_, lo16))); \
    } while (0)

/* dc_r32_put_all with AVX-512 for 16-bit words or bytes (stride = width):
 * the symbols above the last multiple of 32 by the scalar loop, then 32 a
 * step (states 16-31, then 0-15); the same bytes, and the same room checks
 * at the same places. */
DC_AVX512_TARGET static int dc_r32_put_avx512(const struct dc_rans_esym *esym,
                                              const uint8_t *v, size_t count,
                                              const unsigned bits, const uint8_t *lo,
                                              uint8_t **pp, uint32_t xs[32])
{
    size_t top = count & ~(size_t)31;
    if (!dc_r32_put_all(esym, v, count, top, bits / 8, bits, lo, pp, xs))
        return 0;
    uint8_t *p = *pp;
    const int *eb = (const int *)esym;
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
    __m512i xa = _mm512_loadu_si512(xs), xb = _mm512_loadu_si512(xs + 16);
    for (size_t i = top; i >= 32; i -= 32) {
        if (DC_UNLIKELY(p - lo < 64 + 2))
            return 0;
        DC_R32_PUT16(xb, i - 16);
        DC_R32_PUT16(xa, i - 32);
    }
    _mm512_storeu_si512(xs, xa);
    _mm512_storeu_si512(xs + 16, xb);
    *pp = p;
    return 1;
}
#undef DC_R32_PUT16

/* For the AVX2 encoder: per 8-bit mask of the lanes that give a word, the
 * vpermd indices that put those lanes, in lane order, at the top of the
 * vector (so that 16 bytes stored just below p end with them). */
static uint32_t g_r32_top[256][8];
static pthread_once_t g_r32_top_once = PTHREAD_ONCE_INIT;
static void dc_r32_top_init(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned n = (unsigned)__builtin_popcount(m), at = 8 - n;
        for (unsigned j = 0; j < 8; j++)
            if (m >> j & 1)
                g_r32_top[m][at++] = j;
    }
}

/* DC_R32_PUT16 for 8 states with AVX2: the words go out as 16 bytes
 * stored at p - 16 whose top 2n bytes are the n words (the bytes below
 * are scratch: below the new p, and above the 128 bytes kept free under
 * lo for the states); x >= x_max unsigned as max(x, x_max) == x. */
#define DC_R32_PUT8(X, I0)                                                    \
    do {                                                                      \
        __m256i sym_ = bits == 16                                             \
            ? _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(v + 2 * (I0)))) \
            : _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(v + (I0))));    \
        __m256i ix_ = _mm256_slli_epi32(sym_, 2);                             \
        __m256i xm_ = _mm256_i32gather_epi32(eb, ix_, 4);                     \
        __m256i rc_ = _mm256_i32gather_epi32(eb + 1, ix_, 4);                 \
        __m256i bi_ = _mm256_i32gather_epi32(eb + 2, ix_, 4);                 \
        __m256i cs_ = _mm256_i32gather_epi32(eb + 3, ix_, 4);                 \
        __m256i m_ = _mm256_cmpeq_epi32(_mm256_max_epu32(X, xm_), X);         \
        unsigned mb_ = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m_)); \
        __m256i w_ = _mm256_permutevar8x32_epi32(                             \
            _mm256_and_si256(X, lo16), _mm256_loadu_si256((const void *)g_r32_top[mb_])); \
        w_ = _mm256_permute4x64_epi64(_mm256_packus_epi32(w_, w_), 0xD8);     \
        _mm_storeu_si128((void *)(p - 16), _mm256_castsi256_si128(w_));       \
        p -= 2 * (unsigned)__builtin_popcount(mb_);                           \
        X = _mm256_blendv_epi8(X, _mm256_srli_epi32(X, 16), m_);              \
        __m256i pe_ = _mm256_mul_epu32(X, rc_);                               \
        __m256i po_ = _mm256_mul_epu32(_mm256_srli_epi64(X, 32), _mm256_srli_epi64(rc_, 32)); \
        __m256i hi_ = _mm256_blend_epi32(_mm256_srli_epi64(pe_, 32), po_, 0xAA); \
        __m256i q_ = _mm256_srlv_epi32(hi_, _mm256_srli_epi32(cs_, 16));      \
        X = _mm256_add_epi32(_mm256_add_epi32(X, bi_),                        \
                             _mm256_mullo_epi32(q_, _mm256_and_si256(cs_, lo16))); \
    } while (0)

/* dc_r32_put_avx512 with AVX2: four vectors of 8 states, 24-31 first. */
DC_AVX2_TARGET static int dc_r32_put_avx2(const struct dc_rans_esym *esym, const uint8_t *v,
                                          size_t count, const unsigned bits, const uint8_t *lo,
                                          uint8_t **pp, uint32_t xs[32])
{
    size_t top = count & ~(size_t)31;
    if (!dc_r32_put_all(esym, v, count, top, bits / 8, bits, lo, pp, xs))
        return 0;
    pthread_once(&g_r32_top_once, dc_r32_top_init);
    uint8_t *p = *pp;
    const int *eb = (const int *)esym;
    const __m256i lo16 = _mm256_set1_epi32(0xffff);
    __m256i x0 = _mm256_loadu_si256((const void *)xs);
    __m256i x1 = _mm256_loadu_si256((const void *)(xs + 8));
    __m256i x2 = _mm256_loadu_si256((const void *)(xs + 16));
    __m256i x3 = _mm256_loadu_si256((const void *)(xs + 24));
    for (size_t i = top; i >= 32; i -= 32) {
        if (DC_UNLIKELY(p - lo < 64 + 2))
            return 0;
        DC_R32_PUT8(x3, i - 8);
        DC_R32_PUT8(x2, i - 16);
        DC_R32_PUT8(x1, i - 24);
        DC_R32_PUT8(x0, i - 32);
    }
    _mm256_storeu_si256((void *)xs, x0);
    _mm256_storeu_si256((void *)(xs + 8), x1);
    _mm256_storeu_si256((void *)(xs + 16), x2);
    _mm256_storeu_si256((void *)(xs + 24), x3);
    *pp = p;
    return 1;
}
#undef DC_R32_PUT8
#endif

/* dc_r32_put_all per symbol width and stride (as DC_RANS_PUT_DISPATCH) */
static int dc_r32_put(const struct dc_rans_esym *esym, const uint8_t *v, size_t count,
                      unsigned stride, unsigned bits, const uint8_t *lo, uint8_t **pp,
                      uint32_t xs[32])
{
#if defined(__x86_64__)
    if (stride == bits / 8 && dc_ent_avx512())
        return dc_r32_put_avx512(esym, v, count, bits, lo, pp, xs);
    if (stride == bits / 8 && dc_ent_avx2())
        return dc_r32_put_avx2(esym, v, count, bits, lo, pp, xs);
#endif
    if (bits == 16)
        return dc_r32_put_all(esym, v, count, 0, 2, 16, lo, pp, xs);
    if (stride == 1)
        return dc_r32_put_all(esym, v, count, 0, 1, 8, lo, pp, xs);
    return dc_r32_put_all(esym, v, count, 0, stride, 8, lo, pp, xs);
}

static dc_status_t dc_r32_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                 unsigned stride, unsigned bits, size_t nsym, unsigned S,
                                 uint8_t *dst, size_t h, size_t cap, size_t *out_len)
{
    /* x_max = ((L >> S) << 16) * f: x >= x_max would leave >= 2^31 */
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        s->esym[c].x_max = s->qfreq[c] << (31 - S);
    }
    uint32_t xs[32];
    for (unsigned j = 0; j < 32; j++)
        xs[j] = DC_R32_L;
    uint8_t *lo = dst + h, *p = dst + cap;
    if (cap < h + 128 + 66 || !dc_r32_put(s->esym, v, count, stride, bits, lo + 128, &p, xs))
        return DC_ERR_BUSY;
    for (unsigned j = 32; j-- > 0;) {
        p -= 4;
        dc_store_le32(p, xs[j]);
    }
    size_t dlen = (size_t)(dst + cap - p);
    memmove(lo, p, dlen);
    *out_len = h + dlen;
    return DC_OK;
}

/* dc_rans_encode with the histogram of the symbols already in s->hist /
 * s->syms (dc_hist_build); leaves it there (s->syms reordered). */
static dc_status_t dc_rans_encode_hist(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                       unsigned stride, unsigned bits, size_t nsym,
                                       uint8_t *dst, size_t cap, size_t *out_len)
{
    uint32_t *hist = s->hist;
    dc_status_t st = DC_OK;
    /* symbols in increasing order for the table */
    if (bits == 8 || nsym > 1024) {
        size_t k = 0;
        uint32_t lim = bits == 16 ? 65536u : 256u;
        for (uint32_t c = 0; c < lim; c++)
            if (hist[c])
                s->syms[k++] = (uint16_t)c;
    } else {
        /* insertion sort of a short list */
        for (size_t i = 1; i < nsym; i++) {
            uint16_t x = s->syms[i];
            size_t j = i;
            while (j > 0 && s->syms[j - 1] > x) {
                s->syms[j] = s->syms[j - 1];
                j--;
            }
            s->syms[j] = x;
        }
    }
    unsigned S = DC_RANS_MAX_SCALE;
    if (count < (1u << 12))
        S = 12;
    while ((1u << S) < 2 * nsym && S < DC_RANS_MAX_SCALE)
        S++;
    if (nsym > (1u << S) / 2) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    /* A 12-bit table (4096 slots: the decoder's table stays in L1) decodes
     * about twice as fast as a 16-bit one; take it when it costs at most
     * 0.5% more bits. */
    if (S > 12 && 2 * nsym <= (1u << 12)) {
        double hi = dc_rans_quantize(s, nsym, count, S);
        double lo = dc_rans_quantize(s, nsym, count, 12);
        if (lo >= 0 && (hi < 0 || lo <= hi * 1.005))
            S = 12;
        else if (hi < 0) {
            st = DC_ERR_BUSY;
            goto clear;
        } else
            (void)dc_rans_quantize(s, nsym, count, S);
    } else if (dc_rans_quantize(s, nsym, count, S) < 0) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    uint32_t M = 1u << S;
    /* table */
    size_t h = 0;
    if (cap < 32 + (size_t)nsym * 6) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    dst[h++] = (uint8_t)bits;
    dst[h++] = (uint8_t)S;
    h += dc_ent_put_varint(dst + h, nsym);
    uint32_t c0 = 0, acc = 0;
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        h += dc_ent_put_varint(dst + h, k == 0 ? c : c - c0 - 1);
        h += dc_ent_put_varint(dst + h, s->qfreq[c] - 1);
        s->cum[c] = acc;
        acc += s->qfreq[c];
        c0 = c;
    }
    unsigned ways = dc_ent_rans_ways == 1 || dc_ent_rans_ways == 2 || dc_ent_rans_ways == 4 ||
                            dc_ent_rans_ways == 32
                        ? dc_ent_rans_ways
                    : count >= DC_R32_MIN && (bits == 16 || stride == 1) ? 32
                    : count >= 64                                        ? 4
                    : count >= 16                                        ? 2
                                                                         : 1;
    /* (32-way: scales up to 15, and not in the compact layout) */
    if (ways == 32 && (S > DC_R32_MAX_SCALE || s->max_ways < 32))
        ways = 4;
    /* encoder symbols */
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k], f = s->qfreq[c];
        struct dc_rans_esym *e = &s->esym[c];
        e->x_max = ((DC_RANS_L >> S) << 8) * f;
        e->cmpl_freq = (uint16_t)(M - f);
        if (f < 2) {
            e->rcp_freq = ~0u;
            e->rcp_shift = 0;
            e->bias = s->cum[c] + M - 1;
        } else {
            uint32_t shift = 0;
            while (f > (1u << shift))
                shift++;
            e->rcp_freq = (uint32_t)(((1ull << (shift + 31)) + f - 1) / f);
            e->rcp_shift = (uint16_t)(shift - 1);
            e->bias = s->cum[c];
        }
    }
    if (ways == 32) {
        dst[0] |= DC_RANS_32_WAY;
        st = dc_r32_encode(s, v, count, stride, bits, nsym, S, dst, h, cap, out_len);
        goto clear;
    }
    /* encode backwards; from 16 symbols on two, from 64 on four
     * interleaved states (symbol i: state i % ways) split the dependency
     * chain */
    uint8_t *lo = dst + h, *p = dst + cap;
    uint32_t x0 = DC_RANS_L, x1 = DC_RANS_L, x2 = DC_RANS_L, x3 = DC_RANS_L;
    dst[0] |= ways == 4 ? DC_RANS_FOUR_WAY : ways == 2 ? DC_RANS_TWO_WAY : 0;
    uint32_t xs0[4] = {x0, x1, x2, x3};
    int room =
#if defined(__x86_64__)
        dc_ent_avx2() ? dc_rans_put_bmi2(s->esym, v, count, stride, bits, ways, lo, &p, xs0) :
#endif
                      dc_rans_put_base(s->esym, v, count, stride, bits, ways, lo, &p, xs0);
    if (!room) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    x0 = xs0[0];
    x1 = xs0[1];
    x2 = xs0[2];
    x3 = xs0[3];
    if (p < lo + 16) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    /* the states, state 0 first */
    const uint32_t xs[4] = {x0, x1, x2, x3};
    for (unsigned j = ways; j-- > 0;) {
        p -= 4;
        dc_store_le32(p, xs[j]);
    }
    size_t dlen = (size_t)(dst + cap - p);
    memmove(lo, p, dlen);
    *out_len = h + dlen;
clear:
    return st;
}

/* dc_rans_dec_init with the 32-way tables of set `slot` (0 or 1). */
static dc_status_t dc_rans_dec_init_slot(dc_ent_scratch_t *s, unsigned slot, dc_rans_dec_t *d,
                                         const uint8_t *src, size_t len, size_t count,
                                         unsigned bits)
{
    const uint8_t *p = src, *end = src + len;
    if (len < 2)
        return dc_error(DC_ERR_FORMAT, "rANS stream truncated");
    unsigned sb = *p++, S = *p++;
    unsigned wf = sb & DC_RANS_WAY_MASK;
    unsigned ways = wf == DC_RANS_32_WAY     ? 32
                    : wf == DC_RANS_FOUR_WAY ? 4
                    : wf == DC_RANS_TWO_WAY  ? 2
                                             : 1;
    uint32_t *ftab = s->ftab[slot];
    uint16_t *stab = s->stab[slot];
    sb &= ~DC_RANS_WAY_MASK;
    if (sb != bits)
        return dc_error(DC_ERR_FORMAT, "rANS stream has %u-bit symbols, expected %u", sb, bits);
    if (S < DC_RANS_MIN_SCALE || S > (ways == 32 ? DC_R32_MAX_SCALE : DC_RANS_MAX_SCALE))
        return dc_error(DC_ERR_FORMAT, "rANS scale %u out of range", S);
    uint32_t M = 1u << S;
    uint64_t nsym;
    if (dc_ent_get_varint(&p, end, &nsym) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "rANS table truncated");
    if (nsym < 1 || nsym > M || nsym > (1ull << bits))
        return dc_error(DC_ERR_FORMAT, "rANS table has %llu symbols", (unsigned long long)nsym);
    uint64_t c = 0, acc = 0;
    for (uint64_t k = 0; k < nsym; k++) {
        uint64_t dl, f;
        if (dc_ent_get_varint(&p, end, &dl) != DC_OK || dc_ent_get_varint(&p, end, &f) != DC_OK)
            return dc_error(DC_ERR_FORMAT, "rANS table truncated");
        c = k == 0 ? dl : c + dl + 1;
        f += 1;
        if (c >= (1ull << bits) || dl >= (1ull << bits) || f > M || acc + f > M)
            return dc_error(DC_ERR_FORMAT, "rANS table entry out of range");
        /* slot j of symbol c: x' = f * (x >> S) + (j - cum) */
        /* slot - cum < f <= 2^16: 16 bits; f: 17 bits */
        if (ways == 32) {
            for (uint64_t j = acc; j < acc + f; j++) {
                ftab[j] = (uint32_t)(f << 16 | (j - acc));
                stab[j] = (uint16_t)c;
            }
        } else {
            uint64_t e = c | f << 32;
            for (uint64_t j = acc; j < acc + f; j++)
                s->dtab[slot][j] = e | (j - acc) << 16;
        }
        acc += f;
    }
    if (acc != M)
        return dc_error(DC_ERR_FORMAT, "rANS frequencies sum to %llu, not %u",
                        (unsigned long long)acc, M);
    if ((size_t)(end - p) < 4u * ways)
        return dc_error(DC_ERR_FORMAT, "rANS stream truncated");
    /* states: symbol i is coded by state i % ways */
    const uint32_t L = ways == 32 ? DC_R32_L : DC_RANS_L;
    for (unsigned j = 0; j < 32; j++)
        d->x[j] = L;
    for (unsigned j = 0; j < ways; j++) {
        d->x[j] = dc_load_le32(p + 4 * j);
        if (d->x[j] < L || d->x[j] >= (1u << 31))
            return dc_error(DC_ERR_FORMAT, "rANS initial state out of range");
    }
    p += 4u * ways;
    if (ways == 32 && (size_t)(end - p) % 2)
        return dc_error(DC_ERR_FORMAT, "32-way rANS data of an odd number of bytes");
    d->p = p;
    d->end = end;
    d->dtab = s->dtab[slot];
    d->ftab = ftab;
    d->stab = stab;
    d->S = S;
    d->bits = bits;
    d->ways = ways;
    d->i = 0;
    d->count = count;
    return DC_OK;
}

dc_status_t dc_rans_dec_init(dc_ent_scratch_t *s, dc_rans_dec_t *d, const uint8_t *src,
                             size_t len, size_t count, unsigned bits)
{
    return dc_rans_dec_init_slot(s, 0, d, src, len, count, bits);
}

/* dc_rans_dec_run for one symbol width (a constant after inlining). */
static inline __attribute__((always_inline)) dc_status_t
dc_rans_run_bits(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto,
                 const unsigned bits)
{
    const uint8_t *p = d->p, *end = d->end;
    const unsigned S = d->S, ways = d->ways;
    const uint32_t mask = (1u << S) - 1;
    const uint64_t *dtab = d->dtab;
    uint32_t x0 = d->x[0], x1 = d->x[1], x2 = d->x[2], x3 = d->x[3];
    size_t i = d->i;
    if (upto > d->count)
        upto = d->count;
    dc_status_t st = DC_OK;
    /* Fast loops while the bytes a step can read are surely there: one table
     * load per symbol and a branch-free renormalization (x >= 2^(23-S) >=
     * 2^7 after a step, so at most 2 bytes are needed to get back to >=
     * 2^23; with 2^7 <= x < 2^31, (clz(x) - 1) rounded down to bytes is
     * that count).  Interleaved states are independent dependency chains. */
#define DC_RANS_STEP(X, I)                                                    \
    do {                                                                      \
        uint64_t e = dtab[X & mask];                                          \
        X = (uint32_t)(e >> 32) * (X >> S) + ((uint32_t)e >> 16);             \
        unsigned nbits = ((unsigned)__builtin_clz(X) - 1u) & ~7u;             \
        uint32_t two = (uint32_t)p[0] << 8 | p[1];                            \
        X = (uint32_t)(((uint64_t)X << nbits) | (two >> (16 - nbits)));       \
        p += nbits >> 3;                                                      \
        if (bits == 16)                                                       \
            dc_store_le16(out + (I) * stride, (uint16_t)e);                   \
        else                                                                  \
            out[(I) * stride] = (uint8_t)e;                                   \
    } while (0)
    if (ways == 4) {
        if ((i & 3) == 0)
            for (; i + 4 <= upto && end - p >= 8; i += 4) {
                DC_RANS_STEP(x0, i);
                DC_RANS_STEP(x1, i + 1);
                DC_RANS_STEP(x2, i + 2);
                DC_RANS_STEP(x3, i + 3);
            }
    } else if (ways == 2) {
        if ((i & 1) == 0)
            for (; i + 2 <= upto && end - p >= 4; i += 2) {
                DC_RANS_STEP(x0, i);
                DC_RANS_STEP(x1, i + 1);
            }
    } else {
        for (; i < upto && end - p >= 2; i++)
            DC_RANS_STEP(x0, i);
    }
#undef DC_RANS_STEP
    uint32_t xs[4] = {x0, x1, x2, x3};
    for (; i < upto; i++) {
        uint32_t *xp = &xs[i & (ways - 1)];
        uint32_t x = *xp;
        uint64_t e = dtab[x & mask];
        uint32_t sym = (uint32_t)(e & 0xffff);
        x = (uint32_t)(e >> 32) * (x >> S) + ((uint32_t)e >> 16);
        while (x < DC_RANS_L) {
            if (DC_UNLIKELY(p >= end)) {
                st = dc_error(DC_ERR_FORMAT, "rANS data truncated");
                goto out;
            }
            x = (x << 8) | *p++;
        }
        *xp = x;
        if (bits == 16)
            dc_store_le16(out + i * stride, (uint16_t)sym);
        else
            out[i * stride] = (uint8_t)sym;
    }
out:
    memcpy(d->x, xs, sizeof(xs));
    d->p = p;
    d->i = i;
    return st;
}

/* The 32-way layout, one symbol at a time (the reference, what the SIMD
 * loops leave, and the portable decoder): symbol i by state i % 32, then
 * at most one 16-bit word if the state fell below 2^15.  As the portable
 * decoder it is slower than the four-way loop (measured with
 * DELTACAST_KERN_ISA=scalar, inject 5%: 6.0-7.1 against 4.3 ns per 16-bit
 * symbol; the states live in memory; the unrolled blocks with constant
 * state slots gave 1.2x over indexed ones); tried and dropped: the
 * one-load 64-bit table of the other layouts instead of the two SIMD
 * tables (no change). */
/* dc_r32_run_scalar's blocks of 32 symbols (i a multiple of 32, 64 bytes
 * of data surely there): the state of each step a constant slot of xs,
 * branch-free renormalization (whether a word is read is a coin toss the
 * branch predictor loses); returns the new p, *ip the new i. */
static inline __attribute__((always_inline)) const uint8_t *
dc_r32_blocks(uint32_t *restrict xs, const uint32_t *restrict ftab,
              const uint16_t *restrict stab, const unsigned S, const uint8_t *p,
              const uint8_t *end, uint8_t *out, const unsigned stride, const unsigned bits,
              size_t *ip, size_t upto)
{
    const uint32_t mask = (1u << S) - 1;
    size_t i = *ip;
    while (i + 32 <= upto && end - p >= 64) {
        uint8_t *o = out + i * stride;
#pragma GCC unroll 32
        for (unsigned j = 0; j < 32; j++) {
            uint32_t x = xs[j];
            uint32_t e = ftab[x & mask];
            uint16_t sym = stab[x & mask];
            x = (e >> 16) * (x >> S) + (e & 0xffff);
            unsigned need = x < DC_R32_L;
            uint32_t xw = x << 16 | dc_load_le16(p);
            xs[j] = need ? xw : x;
            p += 2 * need;
            if (bits == 16)
                dc_store_le16(o + j * stride, sym);
            else
                o[j * stride] = (uint8_t)sym;
        }
        i += 32;
    }
    *ip = i;
    return p;
}

static dc_status_t dc_r32_run_scalar(dc_rans_dec_t *d, uint8_t *out, unsigned stride,
                                     size_t upto)
{
    const uint8_t *p = d->p, *end = d->end;
    const unsigned S = d->S;
    const uint32_t mask = (1u << S) - 1;
    const uint32_t *ftab = d->ftab;
    const uint16_t *stab = d->stab;
    size_t i = d->i;
    dc_status_t st = DC_OK;
    /* while 64 bytes are surely there (32 symbols, at most one word
     * each): branch-free renormalization (whether a word is read is a coin
     * toss the branch predictor loses) */
    if ((i & 31) == 0 && i + 32 <= upto && end - p >= 64) {
        /* the states in a local array (the output stores cannot touch it) */
        uint32_t xs[32];
        memcpy(xs, d->x, sizeof(xs));
        if (d->bits == 16 && stride == 2)
            p = dc_r32_blocks(xs, ftab, stab, S, p, end, out, 2, 16, &i, upto);
        else if (d->bits == 8 && stride == 1)
            p = dc_r32_blocks(xs, ftab, stab, S, p, end, out, 1, 8, &i, upto);
        else
            p = dc_r32_blocks(xs, ftab, stab, S, p, end, out, stride, d->bits, &i, upto);
        memcpy(d->x, xs, sizeof(xs));
    }
    for (; i < upto; i++) {
        uint32_t x = d->x[i & 31];
        uint32_t e = ftab[x & mask];
        uint16_t sym = stab[x & mask];
        x = (e >> 16) * (x >> S) + (e & 0xffff);
        if (x < DC_R32_L) {
            if (DC_UNLIKELY(end - p < 2)) {
                st = dc_error(DC_ERR_FORMAT, "rANS data truncated");
                break;
            }
            x = x << 16 | dc_load_le16(p);
            p += 2;
        }
        d->x[i & 31] = x;
        if (d->bits == 16)
            dc_store_le16(out + i * stride, sym);
        else
            out[i * stride] = (uint8_t)sym;
    }
    d->p = p;
    d->i = i;
    return st;
}

#if defined(__x86_64__)
/* One 32-way step of 16 states: decode, renormalize (the lanes below 2^16
 * take the next words at *p in lane order), return the symbols. */
#define DC_R32_STEP16(X, SYM)                                                 \
    do {                                                                      \
        __m512i slot_ = _mm512_and_si512(X, maskv);                           \
        __m512i e_ = _mm512_i32gather_epi32(slot_, (const void *)ftab, 4);    \
        SYM = _mm512_i32gather_epi32(slot_, (const void *)stab, 2);           \
        X = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_srli_epi32(e_, 16),    \
                                                _mm512_srl_epi32(X, sv)),     \
                             _mm512_and_si512(e_, lo16));                     \
        __mmask16 m_ = _mm512_cmplt_epu32_mask(X, lv);                        \
        __m512i w_ = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p)); \
        X = _mm512_mask_or_epi32(X, m_, _mm512_slli_epi32(X, 16),             \
                                 _mm512_maskz_expand_epi32(m_, w_));          \
        p += 2 * (unsigned)__builtin_popcount((unsigned)m_);                  \
    } while (0)

/* The 32-way layout with AVX-512: 32 symbols a step (two vectors of 16
 * states: two dependency chains of gathers) while 64 bytes of data are
 * surely there; the scalar loop does the rest. */
DC_AVX512_TARGET static dc_status_t dc_r32_run_avx512(dc_rans_dec_t *d, uint8_t *out,
                                                      unsigned stride, size_t upto)
{
    size_t i = d->i;
    if ((i & 31) == 0 && (d->bits == 16 ? stride == 2 : stride == 1)) {
        const uint8_t *p = d->p, *end = d->end;
        const uint32_t *ftab = d->ftab;
        const uint16_t *stab = d->stab;
        const __m512i maskv = _mm512_set1_epi32((int)((1u << d->S) - 1));
        const __m512i lo16 = _mm512_set1_epi32(0xffff), lv = _mm512_set1_epi32(DC_R32_L);
        const __m128i sv = _mm_cvtsi32_si128((int)d->S);
        __m512i xa = _mm512_loadu_si512(d->x), xb = _mm512_loadu_si512(d->x + 16);
        for (; i + 32 <= upto && end - p >= 64; i += 32) {
            __m512i sa, sb;
            DC_R32_STEP16(xa, sa);
            DC_R32_STEP16(xb, sb);
            if (d->bits == 16) {
                _mm256_storeu_si256((void *)(out + 2 * i), _mm512_cvtepi32_epi16(sa));
                _mm256_storeu_si256((void *)(out + 2 * i + 32), _mm512_cvtepi32_epi16(sb));
            } else {
                _mm_storeu_si128((void *)(out + i), _mm512_cvtepi32_epi8(sa));
                _mm_storeu_si128((void *)(out + i + 16), _mm512_cvtepi32_epi8(sb));
            }
        }
        _mm512_storeu_si512(d->x, xa);
        _mm512_storeu_si512(d->x + 16, xb);
        d->p = p;
        d->i = i;
    }
    return dc_r32_run_scalar(d, out, stride, upto);
}
#endif

#if defined(__x86_64__)
/* For the AVX2 renormalization: per 8-bit mask of the lanes that read a
 * word, the index of the word each lane takes (lane j: the number of
 * reading lanes below j), for a vpermd over the next 8 words. */
static uint32_t g_r32_perm[256][8];
static pthread_once_t g_r32_perm_once = PTHREAD_ONCE_INIT;
static void dc_r32_perm_init(void)
{
    for (unsigned m = 0; m < 256; m++)
        for (unsigned j = 0; j < 8; j++)
            g_r32_perm[m][j] = (uint32_t)__builtin_popcount(m & ((1u << j) - 1));
}

/* One 32-way step of 8 states with AVX2 (as DC_R32_STEP16) */
#define DC_R32_STEP8(X, SYM)                                                  \
    do {                                                                      \
        __m256i slot_ = _mm256_and_si256(X, maskv);                           \
        __m256i e_ = _mm256_i32gather_epi32((const int *)ftab, slot_, 4);     \
        SYM = _mm256_and_si256(                                               \
            _mm256_i32gather_epi32((const int *)stab, slot_, 2), symmask);    \
        X = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_srli_epi32(e_, 16),    \
                                                _mm256_srl_epi32(X, sv)),     \
                             _mm256_and_si256(e_, lo16));                     \
        __m256i m_ = _mm256_cmpgt_epi32(lv, X);                               \
        unsigned mb_ = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m_)); \
        __m256i w_ = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)p)); \
        w_ = _mm256_permutevar8x32_epi32(                                     \
            w_, _mm256_loadu_si256((const void *)g_r32_perm[mb_]));           \
        X = _mm256_blendv_epi8(X, _mm256_or_si256(_mm256_slli_epi32(X, 16), w_), m_); \
        p += 2 * (unsigned)__builtin_popcount(mb_);                           \
    } while (0)

/* 16 symbols of 32-bit lanes (< 2^16) as 16 little-endian u16 */
#define DC_R32_PACK16(A, B)                                                   \
    _mm256_permute4x64_epi64(_mm256_packus_epi32(A, B), 0xD8)

/* The 32-way layout with AVX2: 32 symbols a step, four vectors of 8 states
 * (four dependency chains of gathers). */
DC_AVX2_TARGET static dc_status_t dc_r32_run_avx2(dc_rans_dec_t *d, uint8_t *out,
                                                  unsigned stride, size_t upto)
{
    size_t i = d->i;
    if ((i & 31) == 0 && (d->bits == 16 ? stride == 2 : stride == 1)) {
        pthread_once(&g_r32_perm_once, dc_r32_perm_init);
        const uint8_t *p = d->p, *end = d->end;
        const uint32_t *ftab = d->ftab;
        const uint16_t *stab = d->stab;
        const __m256i maskv = _mm256_set1_epi32((int)((1u << d->S) - 1));
        const __m256i lo16 = _mm256_set1_epi32(0xffff), lv = _mm256_set1_epi32(DC_R32_L);
        const __m256i symmask = _mm256_set1_epi32(d->bits == 16 ? 0xffff : 0xff);
        const __m128i sv = _mm_cvtsi32_si128((int)d->S);
        __m256i x0 = _mm256_loadu_si256((const void *)d->x);
        __m256i x1 = _mm256_loadu_si256((const void *)(d->x + 8));
        __m256i x2 = _mm256_loadu_si256((const void *)(d->x + 16));
        __m256i x3 = _mm256_loadu_si256((const void *)(d->x + 24));
        for (; i + 32 <= upto && end - p >= 64; i += 32) {
            __m256i s0, s1, s2, s3;
            DC_R32_STEP8(x0, s0);
            DC_R32_STEP8(x1, s1);
            DC_R32_STEP8(x2, s2);
            DC_R32_STEP8(x3, s3);
            __m256i a = DC_R32_PACK16(s0, s1), b = DC_R32_PACK16(s2, s3);
            if (d->bits == 16) {
                _mm256_storeu_si256((void *)(out + 2 * i), a);
                _mm256_storeu_si256((void *)(out + 2 * i + 32), b);
            } else {
                /* 32 words < 256 to bytes */
                __m256i c = _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8);
                _mm256_storeu_si256((void *)(out + i), c);
            }
        }
        _mm256_storeu_si256((void *)d->x, x0);
        _mm256_storeu_si256((void *)(d->x + 8), x1);
        _mm256_storeu_si256((void *)(d->x + 16), x2);
        _mm256_storeu_si256((void *)(d->x + 24), x3);
        d->p = p;
        d->i = i;
    }
    return dc_r32_run_scalar(d, out, stride, upto);
}
#endif


dc_status_t dc_rans_dec_run(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto)
{
    if (d->ways == 32) {
        if (upto > d->count)
            upto = d->count;
#if defined(__x86_64__)
        if (dc_ent_avx512())
            return dc_r32_run_avx512(d, out, stride, upto);
        if (dc_ent_avx2())
            return dc_r32_run_avx2(d, out, stride, upto);
#endif
        return dc_r32_run_scalar(d, out, stride, upto);
    }
    return d->bits == 16 ? dc_rans_run_bits(d, out, stride, upto, 16)
                         : dc_rans_run_bits(d, out, stride, upto, 8);
}

dc_status_t dc_rans_dec_finish(const dc_rans_dec_t *d)
{
    const uint32_t L = d->ways == 32 ? DC_R32_L : DC_RANS_L;
    int ok = d->i == d->count && d->p == d->end;
    for (unsigned j = 0; j < 32; j++)
        ok &= d->x[j] == L;
    if (!ok)
        return dc_error(DC_ERR_FORMAT, "rANS stream does not end cleanly");
    return DC_OK;
}

/* The decode loops' prefetch of the chunk to patch (pf): `steps` steps
 * ask for it over the first half of them, pl lines a step (at most 16). */
typedef struct dc_pf_plan {
    uintptr_t pc, pe;
    unsigned pl;
} dc_pf_plan_t;

static inline dc_pf_plan_t dc_pf_plan(const dc_ent_pf_t *pf, size_t steps)
{
    dc_pf_plan_t q = {0, 0, 0};
    if (pf) {
        q.pc = (uintptr_t)pf->p;
        q.pe = q.pc + pf->len;
        q.pl = (unsigned)DC_MIN((pf->len / 64 + steps - 1) / steps, (size_t)16);
    }
    return q;
}

/* one step's share of the plan */
static inline __attribute__((always_inline)) void dc_pf_step(dc_pf_plan_t *q)
{
    if (q->pc < q->pe) {
        for (unsigned j = 0; j < q->pl; j++)
            __builtin_prefetch((const void *)(q->pc + 64u * j), 0, 2);
        q->pc += 64u * q->pl;
    }
}

/* Where no slot holds two codes (long codes: low change rates), the
 * loop of one code per lookup and four per load, positions and values in
 * step (k counts both); as fast as the general loop below there, and one
 * instruction stream fewer. */
static inline __attribute__((always_inline)) dc_status_t
dc_sparse_fast1(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos, uint8_t *vals,
               size_t upto, const dc_ent_pf_t *pf)
{
    size_t k = gd->k;
    /* steps of four codes */
    dc_pf_plan_t pfq = dc_pf_plan(pf, (upto - k) / 8 + 1);
    {
        /* four positions and four 16-bit values per step, in one loop: the
         * Golomb chain (shift, table load, add per code) runs alongside
         * the four rANS chains instead of before them */
        const uint8_t *gp = gd->p, *gend = gd->end, *p = rd->p, *end = rd->end;
        unsigned bc = gd->bc;
        uint64_t next = gd->next;
        const uint32_t *gtab = gd->gtab;
        const unsigned S = rd->S;
        const uint32_t mask = (1u << S) - 1;
        const uint64_t *dtab = rd->dtab;
        uint32_t x0 = rd->x[0], x1 = rd->x[1], x2 = rd->x[2], x3 = rd->x[3];
        while (k + 4 <= upto && gend - gp >= 8 && end - p >= 8) {
            dc_pf_step(&pfq);
            uint64_t cont = __builtin_bswap64(dc_load_le64(gp));
            /* a code the table lacks reads 0, and so do the lookups after
             * it (they use the same bits): e3 == 0 means some code missed */
            uint32_t e0 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            unsigned b1 = bc + (e0 >> 24);
            uint32_t e1 = gtab[(cont << b1) >> (64 - DC_GT_BITS)];
            unsigned b2 = b1 + (e1 >> 24);
            uint32_t e2 = gtab[(cont << b2) >> (64 - DC_GT_BITS)];
            unsigned b3 = b2 + (e2 >> 24);
            uint32_t e3 = gtab[(cont << b3) >> (64 - DC_GT_BITS)];
            uint64_t n0 = next + (e0 & 0xffffffu);
            uint64_t n1 = n0 + 1 + (e1 & 0xffffffu);
            uint64_t n2 = n1 + 1 + (e2 & 0xffffffu);
            uint64_t n3 = n2 + 1 + (e3 & 0xffffffu);
            if (DC_LIKELY(e3 != 0 && n3 < gd->n)) {
                bc = b3 + (e3 >> 24);
                pos[k] = (uint32_t)n0;
                pos[k + 1] = (uint32_t)n1;
                pos[k + 2] = (uint32_t)n2;
                pos[k + 3] = (uint32_t)n3;
                next = n3 + 1;
                gp += bc >> 3;
                bc &= 7;
            } else {
                /* a code the table lacks (or a bad position): these four
                 * through the general decoder */
                gd->p = gp;
                gd->bc = bc;
                gd->next = next;
                gd->k = k;
                dc_status_t st = dc_golomb_dec_run(gd, pos, k + 4);
                if (st != DC_OK)
                    return st;
                gp = gd->p;
                bc = gd->bc;
                next = gd->next;
            }
#define DC_RANS_STEP(X, I)                                                    \
    do {                                                                      \
        uint64_t e = dtab[X & mask];                                          \
        X = (uint32_t)(e >> 32) * (X >> S) + ((uint32_t)e >> 16);             \
        unsigned nbits = ((unsigned)__builtin_clz(X) - 1u) & ~7u;             \
        uint32_t two = (uint32_t)p[0] << 8 | p[1];                            \
        X = (uint32_t)(((uint64_t)X << nbits) | (two >> (16 - nbits)));       \
        p += nbits >> 3;                                                      \
        dc_store_le16(vals + 2 * (I), (uint16_t)e);                           \
    } while (0)
            DC_RANS_STEP(x0, k);
            DC_RANS_STEP(x1, k + 1);
            DC_RANS_STEP(x2, k + 2);
            DC_RANS_STEP(x3, k + 3);
#undef DC_RANS_STEP
            k += 4;
        }
        gd->p = gp;
        gd->bc = bc;
        gd->next = next;
        gd->k = k;
        rd->p = p;
        rd->x[0] = x0;
        rd->x[1] = x1;
        rd->x[2] = x2;
        rd->x[3] = x3;
        rd->i = k;
    }
    return DC_OK;
}

/* The interleaved loop of dc_ent_sparse_run (table Golomb codes, four-way
 * 16-bit rANS) where many slots hold two codes, as far as both fast paths
 * go; compiled with L = 3 lookups per step, for the baseline and with
 * BMI2 (one-uop variable shifts) and LZCNT.
 *
 * A step decodes four values and L table lookups of positions (each up to
 * two codes, gtab2): the Golomb chain per lookup is a shift, a load and a
 * shift, and it runs alongside the four rANS chains.  The two counts move
 * apart (kg positions, k values); what is left when either fast path ends
 * goes through the general decoders.  Steps run in batches whose length is
 * fixed before the batch by the worst case of every bound (stream bytes,
 * counts), so the steps themselves test nothing but a table miss.
 *
 * Measured at inject 5% (24 chunks of 4 MiB, this 2-vCPU VM, each against
 * this loop in the same run): 3.6-5.9 ns per change here, the Golomb
 * decoder alone 4.3-5.0 and the rANS decoder alone 2.5-3.4.  Tried and
 * dropped: a 4-byte rANS table (16 KiB instead of 32, symbol index + freq
 * - 1 + offset; for S <= 12 and <= 256 symbols) so that both tables fit
 * L1: no change; one bitstream of (Golomb gap, Huffman value) pairs, one
 * 12/14-bit lookup per change (88/95% hit): 10.6-11.5 ns, same size; Rice
 * positions split into a unary and a fixed-width remainder stream (same
 * size: 6.13 bits per change): 1.7-2.8 ns alone, but 5.5-6.7 fused with
 * the rANS values in a plain loop.  What went further was SIMD, a format
 * change: the 32-way rANS layout and DC_ENT_GAPS positions (below), which
 * the encoder now writes from 4096 changes on; this loop serves the
 * smaller chunks and older streams. */
static inline __attribute__((always_inline)) dc_status_t
dc_sparse_fast(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos, uint8_t *vals,
               size_t upto, const dc_ent_pf_t *pf, const unsigned L, const unsigned S0)
{
    size_t k = rd->i, kg = gd->k;
    const size_t uptor = DC_MIN(upto, rd->count);
    dc_pf_plan_t pfq = dc_pf_plan(pf, (uptor > k ? uptor - k : 0) / 8 + 1);
    const uint8_t *gp = gd->p, *gend = gd->end, *p = rd->p, *end = rd->end;
    unsigned bc = gd->bc;
    uint64_t next = gd->next;
    const uint64_t gn = gd->n;
    const uint32_t *g2 = gd->gtab2;
    /* S0: the scale as a constant (0: rd->S) */
    const unsigned S = S0 ? S0 : rd->S;
    const uint32_t mask = (1u << S) - 1;
    const uint64_t *dtab = rd->dtab;
    uint32_t x0 = rd->x[0], x1 = rd->x[1], x2 = rd->x[2], x3 = rd->x[3];
    dc_status_t st = DC_OK;
    for (;;) {
        /* steps this batch: each uses <= 12 L bits of positions (and reads
         * 16 bytes from where it starts), <= 8 bytes of values, 4 values
         * and <= 2 L positions */
        if (gend - gp < 16 || end - p < 8 || kg + 2 * L > upto || k + 4 > uptor)
            break;
        size_t nst = DC_MIN((size_t)(gend - gp - 16) / (12 * L / 8 + 1),
                            (size_t)(end - p - 8) / 8) + 1;
        nst = DC_MIN(nst, (upto - kg) / (2 * L));
        nst = DC_MIN(nst, (uptor - k) / 4);
        nst = DC_MIN(nst, (size_t)64);
        uint64_t win = __builtin_bswap64(dc_load_le64(gp)) << bc;
        uint32_t *pk = pos + kg;
        uint8_t *vk = vals + 2 * k;
        size_t it = nst;
        int miss = 0;
        do {
            dc_pf_step(&pfq);
            uint32_t ge = 0;
            unsigned used = bc;
            uint64_t nx0 = next;
            uint32_t *pk0 = pk;
#pragma GCC unroll 4
            for (unsigned j = 0; j < L; j++) {
                ge = g2[win >> (64 - DC_GT_BITS)];
                win <<= ge & 63;
                used += ge & 63;
                pk[0] = (uint32_t)(next + ((ge >> 7) & 0x1fffu));
                uint64_t a1 = next + (ge >> 20);
                pk[1] = (uint32_t)a1;
                next = a1 + 1;
                pk += 1 + ((ge >> 6) & 1);
            }
            if (DC_UNLIKELY(ge == 0 || next > gn)) {
                /* a code the table lacks (or a bad position): this step's
                 * positions go again through the general decoder, after
                 * the values */
                next = nx0;
                pk = pk0;
                miss = 1;
            } else {
                /* the next 64 bits: from the 128 at gp (used <= 55) */
                uint64_t c0 = __builtin_bswap64(dc_load_le64(gp));
                uint64_t c1 = __builtin_bswap64(dc_load_le64(gp + 8));
                win = (c0 << used) | ((c1 >> 1) >> (63 - used));
                gp += used >> 3;
                bc = used & 7;
            }
            /* rANS: one table load per value; x >= 2^(23-S) >= 2^7 after
             * it, so renormalizing takes 0, 1 or 2 bytes: those of one
             * 8-byte load at p (<= 8 bytes a step) */
            uint64_t rw = __builtin_bswap64(dc_load_le64(p));
            unsigned off = 0;
#define DC_RANS_STEP(X, I)                                                    \
    do {                                                                      \
        uint64_t e = dtab[X & mask];                                          \
        X = (uint32_t)(e >> 32) * (X >> S) + ((uint32_t)e >> 16);             \
        unsigned nbits = ((unsigned)__builtin_clz(X) - 1u) & ~7u;             \
        uint32_t two = (uint32_t)((rw << off) >> 48);                         \
        X = (uint32_t)(((uint64_t)X << nbits) | (two >> (16 - nbits)));       \
        off += nbits;                                                         \
        dc_store_le16(vk + 2 * (I), (uint16_t)e);                             \
    } while (0)
            DC_RANS_STEP(x0, 0);
            DC_RANS_STEP(x1, 1);
            DC_RANS_STEP(x2, 2);
            DC_RANS_STEP(x3, 3);
#undef DC_RANS_STEP
            p += off >> 3;
            vk += 8;
            if (miss)
                break;
        } while (--it);
        kg = (size_t)(pk - pos);
        k = (size_t)(vk - vals) / 2;
        if (miss) {
            gd->p = gp;
            gd->bc = bc;
            gd->next = next;
            gd->k = kg;
            if ((st = dc_golomb_dec_run(gd, pos, kg + 1)) != DC_OK)
                goto out;
            gp = gd->p;
            bc = gd->bc;
            next = gd->next;
            kg = gd->k;
        }
    }
out:
    gd->p = gp;
    gd->bc = bc;
    gd->next = next;
    gd->k = kg;
    rd->p = p;
    rd->x[0] = x0;
    rd->x[1] = x1;
    rd->x[2] = x2;
    rd->x[3] = x3;
    rd->i = k;
    return st;
}

static dc_status_t dc_sparse_fast_base(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos,
                                       uint8_t *vals, size_t upto, const dc_ent_pf_t *pf)
{
    if (gd->glook == 3)
        return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 0);
    return dc_sparse_fast1(gd, rd, pos, vals, upto, pf);
}

#if defined(__x86_64__)
/* every CPU with BMI2 has LZCNT (Haswell, Zen) */
__attribute__((target("bmi2,lzcnt"))) static dc_status_t
dc_sparse_fast_bmi2(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos, uint8_t *vals,
                    size_t upto, const dc_ent_pf_t *pf)
{
    if (gd->glook != 3)
        return dc_sparse_fast1(gd, rd, pos, vals, upto, pf);
    /* the two scales encoders pick (12 and 16 bits) as constants: two
     * registers fewer in the loop */
    if (rd->S == 12)
        return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 12);
    if (rd->S == 16)
        return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 16);
    return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 0);
}
#endif

dc_status_t dc_ent_sparse_run(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos,
                              uint8_t *vals, size_t upto, const dc_ent_pf_t *pf)
{
    if (upto > gd->count)
        upto = gd->count;
    if (gd->use_tab && rd->ways == 4 && rd->bits == 16 && (rd->i & 3) == 0 && gd->glook == 0) {
        /* no two-code slots when the shortest code has > half the bits */
        if (2 * (gd->b ? gd->b : 1) > DC_GT_BITS)
            gd->glook = 4;
        else
            dc_golomb_build_g2(gd);
    }
    /* the one-code loop keeps both decoders at one count: they start a call
     * in step (both run to upto) unless a caller ran one of them alone */
    if (gd->use_tab && rd->ways == 4 && rd->bits == 16 && (rd->i & 3) == 0 &&
        (gd->glook == 3 || (gd->glook == 4 && rd->i == gd->k))) {
        dc_status_t st;
#if defined(__x86_64__)
        if (dc_ent_avx2())
            st = dc_sparse_fast_bmi2(gd, rd, pos, vals, upto, pf);
        else
#endif
            st = dc_sparse_fast_base(gd, rd, pos, vals, upto, pf);
        if (st != DC_OK)
            return st;
    }
    dc_status_t st = dc_golomb_dec_run(gd, pos, upto);
    if (st == DC_OK)
        st = dc_rans_dec_run(rd, vals, rd->bits / 8, upto);
    return st;
}

static dc_status_t dc_rans_decode(dc_ent_scratch_t *s, const uint8_t *src, size_t len,
                                  size_t count, unsigned bits, uint8_t *out, unsigned stride)
{
    dc_rans_dec_t d;
    dc_status_t st = dc_rans_dec_init(s, &d, src, len, count, bits);
    if (st == DC_OK)
        st = dc_rans_dec_run(&d, out, stride, count);
    if (st == DC_OK)
        st = dc_rans_dec_finish(&d);
    return st;
}

/* --- positions: rANS-coded gap quotients ------------------------------------ */

/* the largest escape symbol, and E << b at most 2^24 (so that 16 gaps of
 * the SIMD loop sum to < 2^29) */
#define DC_GAPS_MAX_B 16u
#define DC_GAPS_E_SHIFT_MAX 24u

size_t dc_ent_gaps_bound(size_t count)
{
    /* header, a RANS stream of count 16-bit symbols (raw-sized words, the
     * table, 32 states), low bits, escapes */
    return 64 + 6 * 65536 + count * 2 + 128 + count * 2 + count * 5;
}

static dc_status_t dc_gsym_reserve(dc_ent_scratch_t *s, size_t count)
{
    if (count <= s->gsym_cap)
        return DC_OK;
    /* + 16: the SIMD pass loads 16 quotients at a time */
    uint16_t *g = realloc(s->gsym, (count + 16) * sizeof(uint16_t));
    if (!g)
        return dc_error(DC_ERR_NOMEM, "gap quotients for %zu positions", count);
    s->gsym = g;
    s->gsym_cap = count;
    return DC_OK;
}

dc_status_t dc_ent_gaps_encode(dc_ent_scratch_t *s, const uint32_t *pos, size_t count,
                               uint64_t n, uint8_t *dst, size_t cap, size_t *out_len)
{
    if (count == 0 || (uint64_t)pos[count - 1] >= n)
        return dc_error(DC_ERR_INVALID, "gaps: no positions, or one past the chunk");
    dc_status_t st = dc_gsym_reserve(s, count);
    if (st != DC_OK)
        return st;
    /* b: the low bits sent as they are, ~ log2(mean gap) - 2 (quotients
     * of mean ~4-8: a short table, and the low bits of a geometric gap
     * are close to uniform, so little is lost) */
    uint64_t mean = ((uint64_t)pos[count - 1] + 1) / count;
    unsigned b = 0;
    while (b < DC_GAPS_MAX_B && (mean >> (b + 3)) != 0)
        b++;
    size_t lo_len = (count * b + 7) / 8;
    /* header (b, E: <= 3 bytes), the quotients' length (<= 5), then the
     * low bits go after the quotients: written here first, at the end of
     * dst, and moved */
    if (cap < 16 + lo_len + 8)
        return DC_ERR_BUSY;
    uint8_t *lob = dst + cap - lo_len - 8;
    /* one pass: quotients (saturated to 16 bits), their histogram (to
     * 4096; four of them, by k % 4, so that runs of one quotient do not
     * wait on one counter: in s->qfreq, unused until the rANS coder
     * quantizes), the low bits */
    uint32_t qh[4097];
    uint32_t *qh4 = s->qfreq;
    memset(qh4, 0, 4 * 4097 * sizeof(uint32_t));
    uint16_t *gs = s->gsym;
    uint64_t prev = 0, acc = 0;
    unsigned nb = 0;
    uint8_t *o = lob;
    const uint32_t rmask = (1u << b) - 1;
    /* two gaps a step: their low bits join before they go into acc (one
     * shift-or chain per pair) */
    size_t k = 0;
    for (; k + 2 <= count; k += 2) {
        if (DC_UNLIKELY(pos[k] < prev || pos[k + 1] <= pos[k]))
            return dc_error(DC_ERR_INVALID, "gaps: positions not increasing");
        uint64_t g0 = pos[k] - prev, g1 = (uint64_t)pos[k + 1] - pos[k] - 1;
        prev = (uint64_t)pos[k + 1] + 1;
        uint64_t q0 = g0 >> b, q1 = g1 >> b;
        gs[k] = (uint16_t)(q0 < 65535 ? q0 : 65535);
        gs[k + 1] = (uint16_t)(q1 < 65535 ? q1 : 65535);
        qh4[(k & 2) * 4097 + (q0 < 4096 ? q0 : 4096)]++;
        qh4[((k & 2) + 1) * 4097 + (q1 < 4096 ? q1 : 4096)]++;
        acc |= ((g0 & rmask) | (g1 & rmask) << b) << nb;
        nb += 2 * b;
        if (nb >= 32) {
            dc_store_le32(o, (uint32_t)acc);
            o += 4;
            acc >>= 32;
            nb -= 32;
        }
    }
    if (k < count) {
        if (DC_UNLIKELY(pos[k] < prev))
            return dc_error(DC_ERR_INVALID, "gaps: positions not increasing");
        uint64_t g = pos[k] - prev;
        uint64_t q = g >> b;
        gs[k] = (uint16_t)(q < 65535 ? q : 65535);
        qh4[(q < 4096 ? q : 4096)]++;
        acc |= (g & rmask) << nb;
        nb += b;
        if (nb >= 32) {
            dc_store_le32(o, (uint32_t)acc);
            o += 4;
            acc >>= 32;
            nb -= 32;
        }
    }
    while (nb > 0) {
        *o++ = (uint8_t)acc;
        acc >>= 8;
        nb = nb > 8 ? nb - 8 : 0;
    }
    for (uint32_t c = 0; c <= 4096; c++)
        qh[c] = qh4[c] + qh4[4097 + c] + qh4[2 * 4097 + c] + qh4[3 * 4097 + c];
    /* E: quotients >= E are escaped; the smallest E with at most 1/1024 of
     * them beyond (within 2^24 >> b) */
    uint32_t emax = DC_MIN(4095u, (1u << DC_GAPS_E_SHIFT_MAX) >> b);
    uint32_t E = emax;
    {
        uint64_t tail = qh[4096], lim = count >> 10;
        for (uint32_t e = 4096; e-- > 1;) {
            if (tail + qh[e] > lim) {
                E = DC_MIN(e + 1, emax);
                break;
            }
            tail += qh[e];
            E = e;
        }
    }
    size_t h = 0;
    dst[h++] = (uint8_t)b;
    h += dc_ent_put_varint(dst + h, E);
    /* the symbols' histogram for the rANS coder: qh below E, the rest at E */
    size_t nsym = 0;
    uint64_t esc = 0;
    for (uint32_t c = 0; c <= 4096; c++) {
        if (c < E) {
            if (qh[c]) {
                s->hist[c] = qh[c];
                s->syms[nsym++] = (uint16_t)c;
            }
        } else
            esc += qh[c];
    }
    /* escapes: quotients >= E become E, and q - E goes as a varint, for
     * now below the low bits (blocks of 64 with no escape are skipped by
     * their maximum) */
    uint8_t *escb = lob;
    size_t esc_len = 0;
    if (esc) {
        s->hist[E] = (uint32_t)esc;
        s->syms[nsym++] = (uint16_t)E;
        if ((size_t)(lob - dst) < h + 16 + esc * 5) {
            dc_hist_clear(s, nsym);
            return DC_ERR_BUSY;
        }
        escb = lob - esc * 5;
        for (size_t k0 = 0; k0 < count; k0 += 64) {
            size_t k1 = DC_MIN(count, k0 + 64);
            if (k1 == k0 + 64) {
                /* a fixed trip count: the compiler vectorizes it */
                unsigned any = 0;
                for (size_t j = 0; j < 64; j++)
                    any |= gs[k0 + j] >= E;
                if (!any)
                    continue;
            }
            for (size_t j = k0; j < k1; j++) {
                if (gs[j] < E)
                    continue;
                uint64_t q = (pos[j] - (j ? (uint64_t)pos[j - 1] + 1 : 0)) >> b;
                esc_len += dc_ent_put_varint(escb + esc_len, q - E);
                gs[j] = (uint16_t)E;
            }
        }
    }
    /* the RANS stream after a 5-byte room for its length, below the
     * escapes */
    size_t qlen;
    uint8_t *qlim = escb;
    if ((size_t)(qlim - dst) < h + 5 + 16) {
        dc_hist_clear(s, nsym);
        return DC_ERR_BUSY;
    }
    st = dc_rans_encode_hist(s, (const uint8_t *)gs, count, 2, 16, nsym, dst + h + 5,
                             (size_t)(qlim - dst) - h - 5, &qlen);
    dc_hist_clear(s, nsym);
    if (st != DC_OK)
        return st;
    h += dc_ent_prefix_len(dst + h, qlen);
    memmove(dst + h, lob, lo_len);
    h += lo_len;
    memmove(dst + h, escb, esc_len);
    h += esc_len;
    *out_len = h;
    return DC_OK;
}

dc_status_t dc_gaps_dec_init(dc_ent_scratch_t *s, dc_gaps_dec_t *d, const uint8_t *src,
                             size_t len, size_t count, uint64_t n)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t E, qlen;
    /* every field defined, whatever the stream: dc_gaps_dec_finish() of an
     * empty one read a count left from whatever the caller's stack held */
    memset(d, 0, sizeof(*d));
    if (count == 0)
        return len == 0 ? DC_OK : dc_error(DC_ERR_FORMAT, "gaps: bytes without positions");
    if (len < 1)
        return dc_error(DC_ERR_FORMAT, "gaps stream truncated");
    unsigned b = *p++;
    if (b > DC_GAPS_MAX_B)
        return dc_error(DC_ERR_FORMAT, "gaps: %u low bits (at most %u)", b, DC_GAPS_MAX_B);
    if (dc_ent_get_varint(&p, end, &E) != DC_OK || dc_ent_get_varint(&p, end, &qlen) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "gaps stream truncated");
    if (E < 1 || E > 65535 || (E << b) > (1u << DC_GAPS_E_SHIFT_MAX))
        return dc_error(DC_ERR_FORMAT, "gaps: escape %llu with %u low bits out of range",
                        (unsigned long long)E, b);
    if (qlen > (uint64_t)(end - p))
        return dc_error(DC_ERR_FORMAT, "gaps: quotients longer than the stream");
    dc_status_t st = dc_rans_dec_init_slot(s, 1, &d->q, p, (size_t)qlen, count, 16);
    if (st != DC_OK)
        return st;
    p += qlen;
    uint64_t lo_len = ((uint64_t)count * b + 7) / 8;
    if (lo_len > (uint64_t)(end - p))
        return dc_error(DC_ERR_FORMAT, "gaps: low bits truncated");
    if ((st = dc_gsym_reserve(s, count)) != DC_OK)
        return st;
    d->gsym = s->gsym;
    d->lo = p;
    d->lo_len = (size_t)lo_len;
    d->esc = p + lo_len;
    d->esc_end = end;
    d->b = b;
    d->E = (uint32_t)E;
    d->n = n;
    d->next = 0;
    d->k = 0;
    d->count = count;
    return DC_OK;
}

/* the b low bits of gap k */
static inline uint32_t dc_gaps_low(const dc_gaps_dec_t *d, size_t k)
{
    uint64_t bit = (uint64_t)k * d->b;
    size_t at = (size_t)(bit >> 3);
    uint32_t v;
    if (at + 4 <= d->lo_len)
        v = dc_load_le32(d->lo + at);
    else {
        v = 0;
        for (size_t j = 0; at + j < d->lo_len && j < 4; j++)
            v |= (uint32_t)d->lo[at + j] << (8 * j);
    }
    return (v >> (bit & 7)) & ((1u << d->b) - 1);
}

/* positions [d->k, upto) from quotients already in gsym */
static dc_status_t dc_gaps_pos_scalar(dc_gaps_dec_t *d, uint32_t *pos, size_t upto)
{
    uint64_t next = d->next;
    size_t k0 = d->k;
    /* while no escape is in sight and the 4 bytes of a field are inside
     * the low bits: locals only */
    {
        const uint16_t *gs = d->gsym;
        const uint8_t *lo = d->lo;
        const unsigned b = d->b;
        const uint32_t E = d->E, rmask = (1u << b) - 1;
        const uint64_t n = d->n;
        size_t k = k0;
        for (; k < upto && ((uint64_t)k * b >> 3) + 4 <= d->lo_len; k++) {
            uint32_t q = gs[k];
            if (DC_UNLIKELY(q == E))
                break;
            uint64_t bit = (uint64_t)k * b;
            uint32_t r = (dc_load_le32(lo + (bit >> 3)) >> (bit & 7)) & rmask;
            uint64_t at = next + ((uint64_t)q << b | r);
            if (DC_UNLIKELY(at >= n))
                break;
            pos[k] = (uint32_t)at;
            next = at + 1;
        }
        d->k = k0 = k;
        d->next = next;
    }
    for (size_t k = k0; k < upto; k++) {
        uint64_t q = d->gsym[k];
        if (q == d->E) {
            uint64_t x;
            if (dc_ent_get_varint(&d->esc, d->esc_end, &x) != DC_OK || x > UINT32_MAX)
                return dc_error(DC_ERR_FORMAT, "gaps: bad escape");
            q += x;
        }
        uint64_t at = next + ((q << d->b) | dc_gaps_low(d, k));
        if (at >= d->n)
            return dc_error(DC_ERR_FORMAT, "gaps: position %llu past the chunk of %llu",
                            (unsigned long long)at, (unsigned long long)d->n);
        pos[k] = (uint32_t)at;
        next = at + 1;
        d->k = k + 1;
        d->next = next;
    }
    return DC_OK;
}

#if defined(__x86_64__)
/* The SIMD loops' way out for a group of w gaps they do not decode (an
 * escape, or a position past the chunk): the scalar decoder takes it from
 * *k / *next and leaves them after it. */
static inline dc_status_t dc_gaps_group_scalar(dc_gaps_dec_t *d, uint32_t *pos, size_t *k,
                                               uint64_t *next, unsigned w)
{
    d->k = *k;
    d->next = *next;
    dc_status_t st = dc_gaps_pos_scalar(d, pos, *k + w);
    *k = d->k;
    *next = d->next;
    return st;
}

/* positions [d->k, upto) from the quotients in gsym, 16 at a time: the low
 * bits of 16 gaps are 2b bytes from byte 2b * (k / 16) on; a byte
 * permutation gives each lane the 32 bits its field starts in, a variable
 * shift and a mask the field.  Then (q << b | r) + 1 summed up the lanes. */
DC_AVX512_TARGET static dc_status_t dc_gaps_pos_avx512(dc_gaps_dec_t *d, uint32_t *pos,
                                                       size_t upto, const dc_ent_pf_t *pf)
{
    const unsigned b = d->b;
    uint8_t pidx[64];
    uint32_t sh[16];
    for (unsigned j = 0; j < 16; j++) {
        for (unsigned t = 0; t < 4; t++)
            pidx[4 * j + t] = (uint8_t)(((j * b) >> 3) + t);
        sh[j] = (j * b) & 7;
    }
    const __m512i perm = _mm512_loadu_si512(pidx), shv = _mm512_loadu_si512(sh);
    const __m512i lmask = _mm512_set1_epi32((int)((1u << b) - 1)), one = _mm512_set1_epi32(1);
    const __m512i ev = _mm512_set1_epi32((int)d->E), zero = _mm512_setzero_si512();
    const __m128i bv = _mm_cvtsi32_si128((int)b);
    const __mmask64 lm = b ? (~0ull >> (64 - 2 * b)) : 0;
    dc_pf_plan_t pfq = dc_pf_plan(pf, (upto - d->k) / 16 + 1);
    size_t k = d->k;
    uint64_t next = d->next;
    dc_status_t st = DC_OK;
    while (k + 16 <= upto) {
        dc_pf_step(&pfq);
        __m512i q = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(d->gsym + k)));
        if (DC_UNLIKELY(_mm512_cmpeq_epi32_mask(q, ev))) {
            if ((st = dc_gaps_group_scalar(d, pos, &k, &next, 16)) != DC_OK)
                return st;
            continue;
        }
        __m512i g = _mm512_sll_epi32(q, bv);
        if (b) {
            __m512i win = _mm512_maskz_loadu_epi8(lm, d->lo + (k / 16) * 2 * b);
            __m512i r = _mm512_srlv_epi32(_mm512_permutexvar_epi8(perm, win), shv);
            g = _mm512_or_si512(g, _mm512_and_si512(r, lmask));
        }
        g = _mm512_add_epi32(g, one);
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 15));
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 14));
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 12));
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 8));
        uint32_t total = (uint32_t)_mm_extract_epi32(_mm512_extracti32x4_epi32(g, 3), 3);
        if (DC_UNLIKELY(next + total > d->n)) /* the scalar decoder names it */
            return dc_gaps_group_scalar(d, pos, &k, &next, 16);
        _mm512_storeu_si512((void *)(pos + k),
                            _mm512_add_epi32(g, _mm512_set1_epi32((int)(uint32_t)(next - 1))));
        next += total;
        k += 16;
    }
    d->k = k;
    d->next = next;
    return st;
}
#endif

#if defined(__x86_64__)
/* dc_gaps_pos_avx512 with AVX2, 8 gaps a step: the low bits of lane j by a
 * 4-byte gather at bit j * b of the group's b bytes (while those 4 bytes
 * are inside the low bits), a variable shift and a mask. */
DC_AVX2_TARGET static dc_status_t dc_gaps_pos_avx2(dc_gaps_dec_t *d, uint32_t *pos,
                                                   size_t upto, const dc_ent_pf_t *pf)
{
    const unsigned b = d->b;
    int off[8], sh[8];
    for (unsigned j = 0; j < 8; j++) {
        off[j] = (int)((j * b) >> 3);
        sh[j] = (int)((j * b) & 7);
    }
    const __m256i offv = _mm256_loadu_si256((const void *)off);
    const __m256i shv = _mm256_loadu_si256((const void *)sh);
    const __m256i lmask = _mm256_set1_epi32((int)((1u << b) - 1)), one = _mm256_set1_epi32(1);
    const __m256i ev = _mm256_set1_epi32((int)d->E), three = _mm256_set1_epi32(3);
    const __m128i bv = _mm_cvtsi32_si128((int)b);
    dc_pf_plan_t pfq = dc_pf_plan(pf, (upto - d->k) / 8 + 1);
    size_t k = d->k;
    uint64_t next = d->next;
    dc_status_t st = DC_OK;
    /* the gather reads 4 bytes from byte (k / 8) * b + off[j] <= .. + b */
    while (k + 8 <= upto && (k / 8) * b + b + 4 <= d->lo_len) {
        dc_pf_step(&pfq);
        __m256i q = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(d->gsym + k)));
        if (DC_UNLIKELY(_mm256_movemask_epi8(_mm256_cmpeq_epi32(q, ev)))) {
            if ((st = dc_gaps_group_scalar(d, pos, &k, &next, 8)) != DC_OK)
                return st;
            continue;
        }
        __m256i g = _mm256_sll_epi32(q, bv);
        if (b) {
            __m256i r = _mm256_i32gather_epi32((const int *)(d->lo + (k / 8) * b), offv, 1);
            g = _mm256_or_si256(g, _mm256_and_si256(_mm256_srlv_epi32(r, shv), lmask));
        }
        g = _mm256_add_epi32(g, one);
        g = _mm256_add_epi32(g, _mm256_slli_si256(g, 4));
        g = _mm256_add_epi32(g, _mm256_slli_si256(g, 8));
        g = _mm256_add_epi32(g, _mm256_blend_epi32(_mm256_setzero_si256(),
                                                   _mm256_permutevar8x32_epi32(g, three), 0xF0));
        uint32_t total = (uint32_t)_mm256_extract_epi32(g, 7);
        if (DC_UNLIKELY(next + total > d->n)) /* the scalar decoder names it */
            return dc_gaps_group_scalar(d, pos, &k, &next, 8);
        _mm256_storeu_si256((void *)(pos + k),
                            _mm256_add_epi32(g, _mm256_set1_epi32((int)(uint32_t)(next - 1))));
        next += total;
        k += 8;
    }
    d->k = k;
    d->next = next;
    return st;
}
#endif

dc_status_t dc_gaps_dec_run(dc_gaps_dec_t *d, uint32_t *pos, size_t upto,
                            const dc_ent_pf_t *pf)
{
    if (upto > d->count)
        upto = d->count;
    if (upto <= d->k)
        return DC_OK;
    /* the quotients first (as far as upto), then the positions */
    dc_status_t st = dc_rans_dec_run(&d->q, (uint8_t *)d->gsym, 2, upto);
    if (st != DC_OK)
        return st;
#if defined(__x86_64__)
    if (dc_ent_avx512()) {
        if ((d->k & 15) == 0 && (st = dc_gaps_pos_avx512(d, pos, upto, pf)) != DC_OK)
            return st;
    } else if (dc_ent_avx2()) {
        if ((d->k & 7) == 0 && (st = dc_gaps_pos_avx2(d, pos, upto, pf)) != DC_OK)
            return st;
    }
#else
    (void)pf;
#endif
    return dc_gaps_pos_scalar(d, pos, upto);
}

dc_status_t dc_gaps_dec_finish(const dc_gaps_dec_t *d)
{
    if (d->count == 0)
        return DC_OK;
    dc_status_t st = dc_rans_dec_finish(&d->q);
    if (st != DC_OK)
        return st;
    if (d->k != d->count || d->esc != d->esc_end)
        return dc_error(DC_ERR_FORMAT, "gaps stream does not end cleanly");
    /* the padding bits of the last low-bits byte are zero */
    unsigned used = (unsigned)((d->count * d->b) & 7);
    if (used && (d->lo[d->lo_len - 1] >> used) != 0)
        return dc_error(DC_ERR_FORMAT, "gaps: nonzero padding bits");
    return DC_OK;
}

dc_status_t dc_ent_gaps_decode(dc_ent_scratch_t *s, const uint8_t *src, size_t len,
                               size_t count, uint64_t n, uint32_t *pos)
{
    dc_gaps_dec_t d;
    dc_status_t st = dc_gaps_dec_init(s, &d, src, len, count, n);
    if (st == DC_OK && count)
        st = dc_gaps_dec_run(&d, pos, count, NULL);
    if (st == DC_OK)
        st = dc_gaps_dec_finish(&d);
    return st;
}

/* --- values ---------------------------------------------------------------- */

size_t dc_ent_val_bound(size_t count, unsigned w)
{
    size_t raw = count * w;
    size_t z = ZSTD_compressBound(raw);
    return DC_MAX(raw, z) + 64;
}

double dc_ent_words_entropy_bits(dc_ent_scratch_t *s, const void *vals, size_t count,
                                 unsigned w)
{
    if (count == 0)
        return 0.0;
    const uint8_t *v = vals;
    double bits = 0.0;
    if (w <= 2) {
        size_t nsym = dc_hist_build(s, v, count, w, 8 * w);
        bits = dc_hist_entropy_bits(s, nsym, count);
        dc_hist_clear(s, nsym);
        return bits;
    }
    if (count * w > s->max_count)
        return 0.0;
    size_t mask = s->hcap - 1;
    for (size_t i = 0; i < count; i++) {
        uint64_t key = w == 4 ? dc_load_le32(v + 4 * i) : dc_load_le64(v + 8 * i);
        size_t hsh = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
        while (s->hcnt[hsh] && s->hkeys[hsh] != key)
            hsh = (hsh + 1) & mask;
        s->hkeys[hsh] = key;
        s->hcnt[hsh]++;
    }
    for (size_t i = 0; i < s->hcap; i++) {
        if (s->hcnt[i]) {
            double h = s->hcnt[i];
            bits -= h * log2(h / (double)count);
            s->hcnt[i] = 0;
        }
    }
    return bits;
}

static dc_status_t dc_planes_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                    unsigned w, uint8_t *dst, size_t cap, size_t *out_len)
{
    size_t h = 0;
    for (unsigned j = 0; j < w; j++) {
        if (cap - h < 16)
            return DC_ERR_BUSY;
        /* reserve 5 bytes for the varint, then move */
        size_t len;
        dc_status_t st = dc_rans_encode(s, v + j, count, w, 8, dst + h + 5, cap - h - 5, &len);
        if (st != DC_OK)
            return st;
        h += dc_ent_prefix_len(dst + h, len);
    }
    *out_len = h;
    return DC_OK;
}

dc_status_t dc_ent_val_encode(dc_ent_scratch_t *s, const void *vals, size_t count, unsigned w,
                              int allow_zstd, uint8_t *dst, size_t cap, size_t *out_len,
                              unsigned *method)
{
    return dc_ent_val_encode_h(s, vals, count, w, allow_zstd, dst, cap, out_len, method, NULL);
}

dc_status_t dc_ent_val_encode_h(dc_ent_scratch_t *s, const void *vals, size_t count, unsigned w,
                                int allow_zstd, uint8_t *dst, size_t cap, size_t *out_len,
                                unsigned *method, double *h_bits)
{
    size_t raw = count * w;
    if (cap < dc_ent_val_bound(count, w) || count * w > s->max_count)
        return dc_error(DC_ERR_BUSY, "values: output buffer too small");
    const uint8_t *v = vals;
    size_t best = raw;
    unsigned bm = DC_ENT_RAW;
    int bi = -1; /* which tmp holds the best; -1 = raw */
    int free_tmp = 0;
    size_t len;
    if (count == 0) {
        *out_len = 0;
        *method = DC_ENT_RAW;
        if (h_bits)
            *h_bits = 0.0;
        return DC_OK;
    }
    if (w <= 2) {
        /* one histogram for the entropy figure and the rANS table */
        size_t nsym = dc_hist_build(s, v, count, w, 8 * w);
        if (h_bits)
            *h_bits = dc_hist_entropy_bits(s, nsym, count);
        dc_status_t st = dc_rans_encode_hist(s, v, count, w, 8 * w, nsym, s->tmp[free_tmp],
                                             s->tmp_cap, &len);
        dc_hist_clear(s, nsym);
        if (st == DC_OK && len < best) {
            best = len;
            bm = DC_ENT_RANS;
            bi = free_tmp;
            free_tmp ^= 1;
        }
    } else if (h_bits) {
        *h_bits = dc_ent_words_entropy_bits(s, v, count, w);
    }
    if (w >= 2 && (w > 2 || bm == DC_ENT_RAW)) {
        if (dc_planes_encode(s, v, count, w, s->tmp[free_tmp], s->tmp_cap, &len) == DC_OK &&
            len < best) {
            best = len;
            bm = DC_ENT_PLANES;
            bi = free_tmp;
            free_tmp ^= 1;
        }
    }
    /* zstd level 1 only where it can plausibly beat the order-0 coder:
     * streams that order-0 coding leaves above a quarter of their raw size
     * (dense values, wide words).  Sparse BF16 XOR words code to ~0.2x raw
     * with rANS and zstd never wins there; skipping it saves encode time. */
    if (allow_zstd && (best > raw / 4 || w >= 4)) {
        size_t z = ZSTD_compress(s->tmp[free_tmp], s->tmp_cap, v, raw, 1);
        if (!ZSTD_isError(z) && z < best) {
            best = z;
            bm = DC_ENT_ZSTD;
            bi = free_tmp;
        }
    }
    memcpy(dst, bi < 0 ? v : s->tmp[bi], best);
    *out_len = best;
    *method = bm;
    return DC_OK;
}

dc_status_t dc_ent_val_decode(dc_ent_scratch_t *s, unsigned method, const uint8_t *src,
                              size_t len, size_t count, unsigned w, void *vals)
{
    size_t raw = count * w;
    uint8_t *out = vals;
    switch (method) {
    case DC_ENT_RAW:
        if (len != raw)
            return dc_error(DC_ERR_FORMAT, "raw values: %zu bytes, expected %zu", len, raw);
        memcpy(out, src, raw);
        return DC_OK;
    case DC_ENT_ZSTD: {
        unsigned long long fs = ZSTD_getFrameContentSize(src, len);
        if (fs != raw)
            return dc_error(DC_ERR_FORMAT, "zstd values: content size does not match %zu", raw);
        size_t z = ZSTD_decompress(out, raw, src, len);
        if (ZSTD_isError(z) || z != raw)
            return dc_error(DC_ERR_FORMAT, "zstd values: %s",
                            ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short output");
        return DC_OK;
    }
    case DC_ENT_RANS:
        if (w > 2)
            return dc_error(DC_ERR_FORMAT, "rANS values need 1- or 2-byte words");
        if (count == 0)
            return len == 0 ? DC_OK : dc_error(DC_ERR_FORMAT, "rANS values: trailing bytes");
        return dc_rans_decode(s, src, len, count, 8 * w, out, w);
    case DC_ENT_PLANES: {
        const uint8_t *p = src, *end = src + len;
        for (unsigned j = 0; j < w; j++) {
            uint64_t l;
            if (dc_ent_get_varint(&p, end, &l) != DC_OK || l > (uint64_t)(end - p))
                return dc_error(DC_ERR_FORMAT, "plane %u: bad length", j);
            dc_status_t st = dc_rans_decode(s, p, (size_t)l, count, 8, out + j, w);
            if (st != DC_OK)
                return st;
            p += l;
        }
        if (p != end)
            return dc_error(DC_ERR_FORMAT, "planes: trailing bytes");
        return DC_OK;
    }
    default:
        return dc_error(DC_ERR_FORMAT, "unknown values method %u", method);
    }
}
