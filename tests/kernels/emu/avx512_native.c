/*
 * avx512_native.c - avx512_ops.h over the real AVX-512 instructions, for
 * test_avx512_emu.c to compare the emulation with where the CPU has them
 * (dc_emu_native_ok()).  Nothing here runs elsewhere.
 */
#include <immintrin.h>
#include <stddef.h>

#include "avx512_ops.h"

#define DC_EMU_OP_ATTR                                                                        \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vbmi2,"       \
                          "vpclmulqdq,pclmul,avx2,sse4.2")))
#define DC_EMU_OP(name) native_##name

int dc_emu_native_ok(void);
extern const dc_emu_op_t dc_emu_native_ops[];
extern const size_t dc_emu_native_nops;

int dc_emu_native_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
           __builtin_cpu_supports("vpclmulqdq");
}

DC_EMU_OPS(DC_EMU_OP_DEFINE)

const dc_emu_op_t dc_emu_native_ops[] = {DC_EMU_OPS(DC_EMU_OP_ENTRY)};
const size_t dc_emu_native_nops = sizeof(dc_emu_native_ops) / sizeof(dc_emu_native_ops[0]);

/* A masked byte load whose unselected bytes lie on a PROT_NONE page: the
 * hardware suppresses the fault. */
DC_EMU_OP_ATTR void dc_emu_native_maskz_load(const void *p, uint64_t k, uint8_t *out);
DC_EMU_OP_ATTR void dc_emu_native_maskz_load(const void *p, uint64_t k, uint8_t *out)
{
    _mm512_storeu_si512(out, _mm512_maskz_loadu_epi8((__mmask64)k, p));
}
