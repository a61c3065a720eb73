/*
 * entropy_internal.h - private to the entropy coders (kernels/ent_*.c):
 * what their files share.  The coders' interface is entropy.h (whose
 * comment is the reference of every stream layout); this header holds the
 * rANS constants, the scratch, the histogram helpers, the prefetch plan of
 * the decode loops, the functions one coder's file calls in another's, and
 * the choice of SIMD code.
 *
 *   ent_scratch.c   the scratch, method names, varints
 *   ent_golomb.c    Golomb positions: encoder (scalar, BMI2, AVX-512 bit
 *                   writers), resumable decoder and its tables
 *   ent_rans.c      order-0 rANS: quantization, tables, the 1/2/4-way
 *                   encoder and decoder, the stream header of every layout
 *   ent_rans32.c    the 32-way (SIMD) layout: encoder and decoders
 *                   (portable, AVX2, AVX-512)
 *   ent_sparse.c    dc_ent_sparse_run: Golomb positions and 4-way rANS
 *                   values decoded in one loop
 *   ent_gaps.c      DC_ENT_GAPS positions (rANS-coded gap quotients):
 *                   encoder, decoders (portable, AVX2, AVX-512)
 *   ent_values.c    values: raw / zstd / rANS / planes, the choice, the
 *                   entropy figure
 *
 * SIMD code: functions with target attributes (DC_AVX2_TARGET,
 * DC_AVX512_TARGET, ...; the emulated intrinsics in -Dkern_emu=avx512
 * builds), run only where dc_ent_isa() says so.  dc_ent_isa() follows the
 * kernels' ISA (kern_isa.h: DELTACAST_KERN_ISA, dc_kern_set_isa), so
 * scalar / avx2 / avx512 force every coder at once; every path writes the
 * same bytes and accepts the same streams.
 */
#ifndef DC_ENTROPY_INTERNAL_H
#define DC_ENTROPY_INTERNAL_H

#include "kernels/entropy.h"
#include "kernels/kern_isa.h"

#include <string.h>
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

/* The coders' code paths, from the kernels' ISA.  A coder's public entry
 * reads it once (dc_ent_isa()) and hands it down, so that one call never
 * mixes paths of two ISAs. */
typedef enum dc_ent_isa {
    DC_ENT_ISA_SCALAR = 0, /* ISA scalar: portable C */
    DC_ENT_ISA_AVX2,       /* ISA avx2: BMI2/LZCNT builds of the scalar loops,
                            * the AVX2 32-way rANS encoder and decoder, the
                            * AVX2 gaps decoder */
    DC_ENT_ISA_AVX512,     /* ISA avx512 on a CPU without AVX512-VBMI: the
                            * AVX-512 Golomb encoder, the rest as avx2 */
    DC_ENT_ISA_AVX512_VBMI /* ISA avx512 with AVX512-VBMI (every AVX-512 CPU
                            * with VBMI2 so far): the AVX-512 32-way rANS
                            * and gaps code too */
} dc_ent_isa_t;

static inline dc_ent_isa_t dc_ent_isa(void)
{
    switch (dc_kern_cur()->level) {
    case DC_KERN_AVX2: return DC_ENT_ISA_AVX2;
    case DC_KERN_AVX512:
        return dc_kern_avx512_vbmi() ? DC_ENT_ISA_AVX512_VBMI : DC_ENT_ISA_AVX512;
    default: return DC_ENT_ISA_SCALAR;
    }
}

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

/* --- ent_scratch.c --------------------------------------------------------- */

/* A stream written at at + 5 (len bytes) gets its varint length in front:
 * the length goes at `at` and the stream moves up to follow it; returns
 * the bytes both take. */
size_t dc_ent_prefix_len(uint8_t *at, size_t len);

/* --- symbols and histograms ------------------------------------------------- */

/* Symbol i of 8 or 16 bits at v + i * stride. */
static inline uint32_t dc_sym_at(const uint8_t *v, size_t i, unsigned stride, unsigned bits)
{
    return bits == 16 ? dc_load_le16(v + i * stride) : v[i * stride];
}

/* Histogram of count symbols into s->hist (all zero before), the used
 * symbols listed (unsorted) in s->syms; returns their number.  The caller
 * clears it with dc_hist_clear. */
static inline size_t dc_hist_build(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
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

static inline void dc_hist_clear(dc_ent_scratch_t *s, size_t nsym)
{
    for (size_t k = 0; k < nsym; k++)
        s->hist[s->syms[k]] = 0;
}

/* --- ent_golomb.c ------------------------------------------------------------ */

/* gtab2 from gtab (what dc_ent_sparse_run decodes with; built on first
 * use, sets d->glook). */
void dc_golomb_build_g2(dc_golomb_dec_t *d);

/* --- ent_rans.c -------------------------------------------------------------- */

/* dc_rans_encode with the histogram of the symbols already in s->hist /
 * s->syms (dc_hist_build); leaves it there (s->syms reordered). */
dc_status_t dc_rans_encode_hist(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                unsigned stride, unsigned bits, size_t nsym, uint8_t *dst,
                                size_t cap, size_t *out_len, dc_ent_isa_t isa);
/* Encode count symbols (8 or 16 bits, read at v + i*stride) as a RANS
 * stream.  DC_ERR_BUSY when the alphabet is too large for the table
 * precision or cap is too small. */
dc_status_t dc_rans_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count, unsigned stride,
                           unsigned bits, uint8_t *dst, size_t cap, size_t *out_len,
                           dc_ent_isa_t isa);
/* dc_rans_dec_init with the decoder tables of set `slot` (0 or 1). */
dc_status_t dc_rans_dec_init_slot(dc_ent_scratch_t *s, unsigned slot, dc_rans_dec_t *d,
                                  const uint8_t *src, size_t len, size_t count, unsigned bits);
/* dc_rans_dec_run on the paths of `isa`. */
dc_status_t dc_rans_dec_run_isa(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto,
                                dc_ent_isa_t isa);
/* A whole RANS stream of count symbols into out + i * stride. */
dc_status_t dc_rans_decode(dc_ent_scratch_t *s, const uint8_t *src, size_t len, size_t count,
                           unsigned bits, uint8_t *out, unsigned stride);

/* --- ent_rans32.c ------------------------------------------------------------ */

/* The 32-way layout's data after the table dst[0, h) (s->esym holds the
 * encoder symbols of scale S <= 15): states and words; *out_len = h +
 * their bytes.  DC_ERR_BUSY when cap is too small. */
dc_status_t dc_r32_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count, unsigned stride,
                          unsigned bits, size_t nsym, unsigned S, uint8_t *dst, size_t h,
                          size_t cap, size_t *out_len, dc_ent_isa_t isa);
/* dc_rans_dec_run of a 32-way stream (upto <= d->count). */
dc_status_t dc_r32_run(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto,
                       dc_ent_isa_t isa);

/* --- the decode loops' prefetch (ent_sparse.c, ent_gaps.c) ------------------- */

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

#endif /* DC_ENTROPY_INTERNAL_H */
