/*
 * kern_isa.h - private to kernels/: the one place that knows the CPU and
 * picks the kernel ISA (kern_isa.c).
 *
 *   CPU features      detected once (dc_kern_cpu()); the only
 *                     __builtin_cpu_supports calls of kernels/.
 *   ISA               "scalar", "avx2" or "avx512": the best this CPU and
 *                     build run, lowered by DELTACAST_KERN_ISA (the only
 *                     getenv of it) or dc_kern_set_isa().
 *   family tables     each ISA is one dc_kern_isa_desc_t row holding every
 *                     kernel family's ops table for it (kern_impl.h
 *                     diff/scatter, digest.h XXH3); a family calls through
 *                     dc_kern_cur()->its_table, never compares names.
 *
 * Per-ISA code lives in files of its own compiled for that ISA with a
 * file-level `#pragma GCC target` (kern_avx2.c, kern_avx512.c,
 * digest_avx2.c, digest_avx512.c, crc32c_sse42.c, crc32c_avx512.c); the
 * rest of the library stays baseline x86-64.  CRC32C picks its code from
 * the CPU features (dc_kern_cpu()), not from the ISA: DELTACAST_KERN_ISA
 * does not change it.  The entropy coders (ent_*.c) pick their code
 * paths from the ISA's level (entropy_internal.h dc_ent_isa()), functions
 * with target attributes rather than per-ISA files; where their avx512
 * code needs more than the level guarantees (AVX512-VBMI) they ask
 * dc_kern_avx512_vbmi().
 */
#ifndef DC_KERN_ISA_H
#define DC_KERN_ISA_H

#include "kernels/ctx_scan.h"
#include "kernels/digest.h"
#include "kernels/kern_impl.h"

#include <stdatomic.h>

/* CPU features (bits of dc_kern_cpu()). */
enum {
    DC_CPU_SSE42 = 1u << 0,
    DC_CPU_PCLMUL = 1u << 1,
    DC_CPU_POPCNT = 1u << 2,
    DC_CPU_LZCNT = 1u << 3, /* detected in -Dkern_emu=avx512 builds only */
    DC_CPU_BMI = 1u << 4,
    DC_CPU_BMI2 = 1u << 5,
    DC_CPU_AVX2 = 1u << 6,
    DC_CPU_AVX512F = 1u << 7,
    DC_CPU_AVX512BW = 1u << 8,
    DC_CPU_AVX512VL = 1u << 9,
    DC_CPU_AVX512VBMI2 = 1u << 10,
    DC_CPU_VPCLMULQDQ = 1u << 11,
    DC_CPU_AVX512VBMI = 1u << 12,
    DC_CPU_FAST_PDEP = 1u << 13, /* BMI2 pdep/pext in a few cycles (Intel, AMD
                                    from Zen 3; microcoded before) */
};

/** The CPU's features (DC_CPU_*; 0 off x86-64), detected once. */
unsigned dc_kern_cpu(void);

/* Kernel ISAs, lowest first. */
typedef enum dc_kern_level {
    DC_KERN_SCALAR = 0,
    DC_KERN_AVX2 = 1,
    DC_KERN_AVX512 = 2,
    DC_KERN_NLEVELS
} dc_kern_level_t;

/** 1 when this build has `level` and this CPU runs it.  In builds with
 *  -Dkern_emu=avx512, avx512 means what the emulation is compiled for
 *  (kernels/emu/avx512_emu.h DC_EMU_TARGET_STR). */
int dc_kern_level_runs(dc_kern_level_t level);

/** 1 when avx512 code may also use AVX512-VBMI (vpermb), which the avx512
 *  level does not require: this CPU has it, or the build emulates AVX-512
 *  (-Dkern_emu=avx512, where the emulation has it).  Code that needs it
 *  falls back to its avx2 version without it (the entropy coders' 32-way
 *  rANS and gaps paths). */
int dc_kern_avx512_vbmi(void);

/** One ISA: its name and every kernel family's table for it. */
typedef struct dc_kern_isa_desc {
    const char *name;
    dc_kern_level_t level;
    const dc_kern_ops_t *kern;       /* diff, gather, scatter, copy (kern_impl.h) */
    const dc_digest_ops_t *digest;   /* XXH3-128 (digest.h) */
    const dc_ctx_scan_ops_t *ctx;    /* magnitude-class scan (ctx_scan.h) */
} dc_kern_isa_desc_t;

/* The ISA in use; NULL until the first call of dc_kern_cur(). */
extern _Atomic(const dc_kern_isa_desc_t *) dc_kern_isa_now;
/** Pick the ISA once (best the CPU runs, lowered by DELTACAST_KERN_ISA). */
const dc_kern_isa_desc_t *dc_kern_isa_init(void);

/** The ISA every kernel call uses now. */
static inline const dc_kern_isa_desc_t *dc_kern_cur(void)
{
    const dc_kern_isa_desc_t *d = atomic_load_explicit(&dc_kern_isa_now, memory_order_acquire);
    if (DC_UNLIKELY(d == NULL))
        d = dc_kern_isa_init();
    return d;
}

#endif /* DC_KERN_ISA_H */
