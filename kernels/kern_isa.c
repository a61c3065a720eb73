/*
 * kern_isa.c - the kernel ISA: CPU detection, DELTACAST_KERN_ISA, and the
 * per-ISA table of every kernel family (see kern_isa.h).
 */
#include "kernels/kern_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

/* ======================================================================== */
/*  CPU features                                                            */
/* ======================================================================== */

#define DC_CPU_DETECTED (1u << 31)
static _Atomic unsigned g_cpu;

static unsigned cpu_detect(void)
{
    unsigned f = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    /* __builtin_cpu_supports needs a string literal: one line per feature */
    f |= __builtin_cpu_supports("sse4.2") ? DC_CPU_SSE42 : 0;
    f |= __builtin_cpu_supports("pclmul") ? DC_CPU_PCLMUL : 0;
    f |= __builtin_cpu_supports("popcnt") ? DC_CPU_POPCNT : 0;
#if DC_KERN_EMU_AVX512
    /* only the emulation needs it (GCC only; clang 14 has no "lzcnt" here) */
    f |= __builtin_cpu_supports("lzcnt") ? DC_CPU_LZCNT : 0;
#endif
    f |= __builtin_cpu_supports("bmi") ? DC_CPU_BMI : 0;
    f |= __builtin_cpu_supports("bmi2") ? DC_CPU_BMI2 : 0;
    f |= __builtin_cpu_supports("avx2") ? DC_CPU_AVX2 : 0;
    f |= __builtin_cpu_supports("avx512f") ? DC_CPU_AVX512F : 0;
    f |= __builtin_cpu_supports("avx512bw") ? DC_CPU_AVX512BW : 0;
    f |= __builtin_cpu_supports("avx512vl") ? DC_CPU_AVX512VL : 0;
    f |= __builtin_cpu_supports("avx512vbmi2") ? DC_CPU_AVX512VBMI2 : 0;
    f |= __builtin_cpu_supports("avx512vbmi") ? DC_CPU_AVX512VBMI : 0;
    f |= __builtin_cpu_supports("vpclmulqdq") ? DC_CPU_VPCLMULQDQ : 0;
    if (f & DC_CPU_BMI2) {
        /* AMD before family 19h (Zen 3) runs pdep in microcode (~250
         * cycles); Intel's and later AMD's take a few */
        unsigned a, b, c, d;
        if (__builtin_cpu_is("intel"))
            f |= DC_CPU_FAST_PDEP;
        else if (__get_cpuid(1, &a, &b, &c, &d)) {
            unsigned fam = (a >> 8) & 0xf;
            if (fam == 0xf)
                fam += (a >> 20) & 0xff;
            if (__builtin_cpu_is("amd") && fam >= 0x19)
                f |= DC_CPU_FAST_PDEP;
        }
    }
#endif
    return f;
}

unsigned dc_kern_cpu(void)
{
    unsigned f = atomic_load_explicit(&g_cpu, memory_order_relaxed);
    if (DC_UNLIKELY(!(f & DC_CPU_DETECTED))) {
        /* idempotent: racing threads store the same value */
        f = cpu_detect() | DC_CPU_DETECTED;
        atomic_store_explicit(&g_cpu, f, memory_order_relaxed);
    }
    return f & ~DC_CPU_DETECTED;
}

static int cpu_has(unsigned want)
{
    return (dc_kern_cpu() & want) == want;
}

#if defined(__has_feature)
#if __has_feature(memory_sanitizer)
#define DC_KERN_MSAN 1
#endif
#endif
#ifndef DC_KERN_MSAN
#define DC_KERN_MSAN 0
#endif

int dc_kern_level_runs(dc_kern_level_t level)
{
    switch (level) {
    case DC_KERN_SCALAR: return 1;
#if defined(__x86_64__)
    case DC_KERN_AVX2: return cpu_has(DC_CPU_AVX2 | DC_CPU_BMI2 | DC_CPU_POPCNT);
    case DC_KERN_AVX512:
#if DC_KERN_EMU_AVX512
        /* -Dkern_emu=avx512: the avx512 tables are emulated with what
         * kernels/emu/avx512_emu.h's DC_EMU_TARGET needs */
        return dc_kern_level_runs(DC_KERN_AVX2) &&
               cpu_has(DC_CPU_BMI | DC_CPU_LZCNT | DC_CPU_SSE42 | DC_CPU_PCLMUL);
#elif DC_KERN_MSAN
        /* MemorySanitizer does not model AVX-512's masked expands and
         * mask compares lane by lane: it flags lanes the kernels mask off
         * (reports with no origin, or from scratch bytes past a stream).
         * A MemorySanitizer build runs scalar and avx2; the avx512 row is
         * checked against scalar under MALLOC_PERTURB_ (scripts/sweep.sh) */
        return 0;
#else
        return dc_kern_level_runs(DC_KERN_AVX2) &&
               cpu_has(DC_CPU_AVX512F | DC_CPU_AVX512BW | DC_CPU_AVX512VL | DC_CPU_AVX512VBMI2);
#endif
#endif
    default: return 0;
    }
}

int dc_kern_avx512_vbmi(void)
{
#if DC_KERN_EMU_AVX512
    return 1; /* emulated, as the rest of the avx512 code */
#else
    return cpu_has(DC_CPU_AVX512VBMI);
#endif
}

/* ======================================================================== */
/*  The ISAs and their family tables                                        */
/* ======================================================================== */

static const dc_kern_isa_desc_t g_isas[] = {
    {"scalar", DC_KERN_SCALAR, &dc_kern_ops_scalar, &dc_digest_ops_base, &dc_ctx_scan_scalar},
#if defined(__x86_64__)
    {"avx2", DC_KERN_AVX2, &dc_kern_ops_avx2, &dc_digest_ops_avx2, &dc_ctx_scan_avx2},
#if DC_KERN_EMU_AVX512
    {"avx512", DC_KERN_AVX512, &dc_kern_ops_avx512, &dc_digest_ops_avx512,
     &dc_ctx_scan_avx2 /* the AVX2 scan: 64 elements a step already */},
#else
    {"avx512", DC_KERN_AVX512, &dc_kern_ops_avx512, &dc_digest_ops_avx512, &dc_ctx_scan_avx512},
#endif
#endif
};

static const dc_kern_isa_desc_t *isa_by_name(const char *name)
{
    for (size_t i = 0; name != NULL && i < DC_ARRAY_SIZE(g_isas); i++)
        if (strcasecmp(name, g_isas[i].name) == 0)
            return &g_isas[i];
    return NULL;
}

int dc_kern_isa_supported(const char *isa)
{
    const dc_kern_isa_desc_t *d = isa_by_name(isa);
    return d != NULL && dc_kern_level_runs(d->level);
}

/* ======================================================================== */
/*  The ISA in use                                                          */
/* ======================================================================== */

_Atomic(const dc_kern_isa_desc_t *) dc_kern_isa_now;
static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;

static void isa_pick(void)
{
    const dc_kern_isa_desc_t *d = &g_isas[0];
    for (size_t i = DC_ARRAY_SIZE(g_isas); i-- > 0;) {
        if (dc_kern_level_runs(g_isas[i].level)) {
            d = &g_isas[i];
            break;
        }
    }
    /* config key kern_isa (DELTACAST_KERN_ISA); read here only, once per process */
    const char *env = dc_config_get("kern_isa");
    if (env != NULL && env[0] != '\0') {
        if (!dc_kern_isa_supported(env))
            DC_LOG_WARN("DELTACAST_KERN_ISA=%s is not supported by this CPU or build; "
                        "using %s", env, d->name);
        else
            d = isa_by_name(env); /* only lower is meaningful; all give the same bytes */
    }
    const dc_kern_isa_desc_t *expected = NULL;
    atomic_compare_exchange_strong(&dc_kern_isa_now, &expected, d);
}

const dc_kern_isa_desc_t *dc_kern_isa_init(void)
{
    pthread_once(&g_isa_once, isa_pick);
    return atomic_load_explicit(&dc_kern_isa_now, memory_order_acquire);
}

const char *dc_kern_isa(void)
{
    return dc_kern_cur()->name;
}

dc_status_t dc_kern_set_isa(const char *isa)
{
    const dc_kern_isa_desc_t *d = isa_by_name(isa);
    if (d == NULL)
        return dc_error(DC_ERR_INVALID, "kernel ISA '%s' is unknown (scalar, avx2, avx512)",
                        isa ? isa : "(null)");
    if (!dc_kern_level_runs(d->level))
        return dc_error(DC_ERR_UNSUPPORTED, "kernel ISA '%s' is not supported by this CPU",
                        isa);
    pthread_once(&g_isa_once, isa_pick);
    atomic_store_explicit(&dc_kern_isa_now, d, memory_order_release);
    return DC_OK;
}
