/*
 * test_avx512_emu.c - the AVX-512 emulation of -Dkern_emu=avx512
 * (kernels/emu/avx512_emu.h) against
 *   - plain C written from the Intel SDM, for the intrinsics the emulation
 *     implements itself (SIMDe 0.7.4 lacks them): everywhere;
 *   - the real instructions (avx512_native.c), for every operation of
 *     avx512_ops.h: only where the CPU has AVX-512 (F/BW/VL/DQ/VBMI/VBMI2,
 *     VPCLMULQDQ); skipped elsewhere;
 * and the properties the library's tests rely on: masked loads read only
 * the selected bytes (a PROT_NONE page under the others), aligned loads and
 * stores trap on a misaligned address.
 */
#include <criterion/criterion.h>

#include "kernels/emu/avx512_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "avx512_ops.h"

/* used by avx512_ops.h only */
#undef _mm512_castpd_si512
#define _mm512_castpd_si512 simde_mm512_castpd_si512

#define DC_EMU_OP_ATTR DC_EMU_TARGET
#define DC_EMU_OP(name) emu_##name
DC_EMU_OPS(DC_EMU_OP_DEFINE)
static const dc_emu_op_t EMU_OPS[] = {DC_EMU_OPS(DC_EMU_OP_ENTRY)};
#define NOPS (sizeof(EMU_OPS) / sizeof(EMU_OPS[0]))

int dc_emu_native_ok(void);
extern const dc_emu_op_t dc_emu_native_ops[];
extern const size_t dc_emu_native_nops;
void dc_emu_native_maskz_load(const void *p, uint64_t k, uint8_t *out);

#define XORSHIFT_SEED 0xD1B54A32D192ED03ull
#include "../xorshift.h"

#define TAB 520 /* p: the gathers read up to 514 bytes */

static void fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

/* inputs with some equal lanes, so that comparisons see both outcomes */
static void inputs(uint8_t *a, uint8_t *b, uint64_t *k, uint8_t *p, unsigned round)
{
    fill(a, 64);
    fill(b, 64);
    fill(p, TAB);
    for (unsigned i = 0; i < 64; i++)
        if (rnd() % 3 == 0)
            b[i] = a[i];
    if (round % 4 == 1)
        memcpy(b, a, 64);
    *k = round % 5 == 0 ? ~0ull : round % 5 == 1 ? 0 : rnd();
}

/* ---- plain C references (Intel SDM pseudo-code) for the emulation's own
 * intrinsics ---------------------------------------------------------------- */

static uint64_t lane(const uint8_t *v, unsigned w, unsigned i)
{
    uint64_t x = 0;
    memcpy(&x, v + w * i, w);
    return x;
}

static void put_lane(uint8_t *v, unsigned w, unsigned i, uint64_t x)
{
    memcpy(v + w * i, &x, w);
}

static int64_t slane32(const uint8_t *v, unsigned i)
{
    return (int32_t)(uint32_t)lane(v, 4, i);
}

/* returns 1 when it knows `name`, with the expected out / mask */
static int reference(const char *name, const uint8_t *a, const uint8_t *b, uint64_t k,
                     const uint8_t *p, uint8_t *out, uint64_t *mo, size_t *out_len)
{
    memset(out, 0, 64);
    *mo = 0;
    *out_len = 64;
    unsigned w = 0;
    if (sscanf(name, "cmpneq_epu%u_mask", &w) == 1 && strcmp(name, "cmpneq_epu64_mask_eq")) {
        w /= 8;
        for (unsigned i = 0; i < 64 / w; i++)
            *mo |= (uint64_t)(lane(a, w, i) != lane(b, w, i)) << i;
        *out_len = 0;
        return 1;
    }
    if (!strcmp(name, "cmpgt_epu32_mask") || !strcmp(name, "cmplt_epu32_mask") ||
        !strcmp(name, "cmplt_epi32_mask") || !strcmp(name, "cmpgt_epu64_mask")) {
        w = name[9] == '6' ? 8 : 4;
        for (unsigned i = 0; i < 64 / w; i++) {
            int r;
            if (!strcmp(name, "cmplt_epi32_mask"))
                r = slane32(a, i) < slane32(b, i);
            else if (name[3] == 'g')
                r = lane(a, w, i) > lane(b, w, i);
            else
                r = lane(a, w, i) < lane(b, w, i);
            *mo |= (uint64_t)r << i;
        }
        *out_len = 0;
        return 1;
    }
    if (!strcmp(name, "maskz_compress_epi8") || !strcmp(name, "maskz_compress_epi16")) {
        w = name[18] == '8' ? 1 : 2;
        unsigned n = 0;
        for (unsigned i = 0; i < 64 / w; i++)
            if (k >> i & 1)
                put_lane(out, w, n++, lane(a, w, i));
        return 1;
    }
    if (!strcmp(name, "maskz_expand_epi32")) {
        unsigned n = 0;
        for (unsigned i = 0; i < 16; i++)
            put_lane(out, 4, i, (k >> i & 1) ? lane(a, 4, n++) : 0);
        return 1;
    }
    unsigned imm;
    if (sscanf(name, "alignr_epi32_%u", &imm) == 1) {
        for (unsigned i = 0; i < 16; i++) {
            unsigned j = i + imm;
            put_lane(out, 4, i, j < 16 ? lane(b, 4, j) : lane(a, 4, j - 16));
        }
        return 1;
    }
    if (sscanf(name, "shuffle_epi32_%x", &imm) == 1) {
        for (unsigned i = 0; i < 16; i++)
            put_lane(out, 4, i, lane(a, 4, (i & ~3u) + (imm >> (2 * (i & 3)) & 3)));
        return 1;
    }
    if (sscanf(name, "mask_srli_epi32_%u", &imm) == 1) {
        for (unsigned i = 0; i < 16; i++)
            put_lane(out, 4, i, (k >> i & 1) ? lane(a, 4, i) >> imm : lane(b, 4, i));
        return 1;
    }
    if (!strcmp(name, "zextsi128_si512")) {
        memcpy(out, a, 16);
        return 1;
    }
    if (!strcmp(name, "cvtepu8_epi32")) {
        for (unsigned i = 0; i < 16; i++)
            put_lane(out, 4, i, a[i]);
        return 1;
    }
    if (!strcmp(name, "cvtepi32_epi8")) {
        for (unsigned i = 0; i < 16; i++)
            out[i] = (uint8_t)lane(a, 4, i);
        *out_len = 16;
        return 1;
    }
    if (!strcmp(name, "cvtepu16_epi32")) {
        for (unsigned i = 0; i < 16; i++)
            put_lane(out, 4, i, lane(a, 2, i));
        return 1;
    }
    if (!strcmp(name, "cvtepi32_epi16")) {
        for (unsigned i = 0; i < 16; i++)
            put_lane(out, 2, i, (uint16_t)lane(a, 4, i));
        *out_len = 32;
        return 1;
    }
    if (!strcmp(name, "cvtepu32_pd")) {
        for (unsigned i = 0; i < 8; i++) {
            double d = (double)lane(a, 4, i);
            memcpy(out + 8 * i, &d, 8);
        }
        return 1;
    }
    if (!strncmp(name, "cvttpd_epu32_", 13)) {
        double s = !strcmp(name + 13, "in") ? 0.37 : !strcmp(name + 13, "big") ? 1.75 : -0.4;
        for (unsigned i = 0; i < 8; i++) {
            uint64_t x = lane(a, 4, i);
            if (s < 0)
                x &= 3;
            double d = (double)x * s;
            /* truncation; NaN and out of range: 2^32 - 1 */
            put_lane(out, 4, i, d > -1.0 && d < 4294967296.0 ? (uint32_t)d : UINT32_MAX);
        }
        *out_len = 32;
        return 1;
    }
    if (!strcmp(name, "castsi256_si512_lo") || !strcmp(name, "extracti64x4_1")) {
        memcpy(out, name[0] == 'c' ? a : a + 32, 32);
        *out_len = 32;
        return 1;
    }
    if (!strcmp(name, "inserti64x4_1") || !strcmp(name, "inserti64x4_0")) {
        memcpy(out, a, 64);
        memcpy(out + (name[12] == '1' ? 32 : 0), b, 32);
        return 1;
    }
    if (sscanf(name, "clmul_%x", &imm) == 1) {
        for (unsigned l = 0; l < 4; l++) {
            uint64_t x = lane(a, 8, 2 * l + (imm & 1)), y = lane(b, 8, 2 * l + (imm >> 4 & 1));
            uint64_t lo = 0, hi = 0;
            for (unsigned i = 0; i < 64; i++)
                if (y >> i & 1) {
                    lo ^= x << i;
                    hi ^= i ? x >> (64 - i) : 0;
                }
            put_lane(out, 8, 2 * l, lo);
            put_lane(out, 8, 2 * l + 1, hi);
        }
        return 1;
    }
    if (!strcmp(name, "maskz_loadu_epi8")) {
        for (unsigned i = 0; i < 64; i++)
            out[i] = (k >> i & 1) ? p[i] : 0;
        return 1;
    }
    if (!strcmp(name, "mask_storeu_epi8")) {
        for (unsigned i = 0; i < 64; i++)
            out[i] = (k >> i & 1) ? a[i] : b[i];
        return 1;
    }
    if (!strcmp(name, "mask_cvtepi32_storeu_epi16")) {
        memcpy(out, b, 64);
        for (unsigned i = 0; i < 16; i++)
            if (k >> i & 1)
                put_lane(out, 2, i, (uint16_t)lane(a, 4, i));
        return 1;
    }
    if (!strncmp(name, "i32gather_epi32_", 16)) {
        for (unsigned i = 0; i < 16; i++) {
            int64_t ix;
            const uint8_t *base = p;
            unsigned sc = 4;
            if (!strcmp(name + 16, "4"))
                ix = (int64_t)(lane(a, 4, i) & 127);
            else if (!strcmp(name + 16, "2"))
                ix = (int64_t)(lane(a, 4, i) & 255), sc = 2;
            else
                ix = (int64_t)(lane(a, 4, i) & 63) - 32, base = p + 256;
            put_lane(out, 4, i, lane(base + ix * (int64_t)sc, 4, 0));
        }
        return 1;
    }
    return 0;
}

/* ---- tests ---------------------------------------------------------------- */

Test(avx512_emu, own_intrinsics_follow_the_sdm)
{
    uint8_t a[64], b[64], p[TAB], out[64], want[64];
    unsigned checked = 0;
    for (unsigned round = 0; round < 400; round++) {
        uint64_t k;
        inputs(a, b, &k, p, round);
        for (size_t i = 0; i < NOPS; i++) {
            uint64_t mo = 0, wmo = 0;
            size_t len;
            if (!reference(EMU_OPS[i].name, a, b, k, p, want, &wmo, &len))
                continue;
            memset(out, 0, sizeof(out));
            EMU_OPS[i].fn(a, b, k, p, out, &mo);
            cr_assert(memcmp(out, want, len) == 0 && mo == wmo, "%s (round %u)",
                      EMU_OPS[i].name, round);
            checked++;
        }
    }
    cr_assert(checked > 400 * 30, "%u checks", checked);
}

Test(avx512_emu, same_bytes_as_the_cpu)
{
    if (!dc_emu_native_ok()) {
        cr_log_info("this CPU has no AVX-512: only the SDM references were checked");
        return;
    }
    cr_assert_eq(dc_emu_native_nops, NOPS);
    uint8_t a[64], b[64], p[TAB], out[64], nat[64];
    for (unsigned round = 0; round < 2000; round++) {
        uint64_t k;
        inputs(a, b, &k, p, round);
        for (size_t i = 0; i < NOPS; i++) {
            uint64_t mo = 0, nmo = 0;
            memset(out, 0, sizeof(out));
            memset(nat, 0, sizeof(nat));
            EMU_OPS[i].fn(a, b, k, p, out, &mo);
            dc_emu_native_ops[i].fn(a, b, k, p, nat, &nmo);
            cr_assert(memcmp(out, nat, 64) == 0 && mo == nmo, "%s (round %u)", EMU_OPS[i].name,
                      round);
        }
    }
}

/* The selected bytes end where a PROT_NONE page starts: only those are
 * read (by the hardware too: it suppresses the fault). */
Test(avx512_emu, masked_loads_read_only_selected_bytes)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(m != MAP_FAILED);
    cr_assert(mprotect(m + pg, pg, PROT_NONE) == 0);
    for (unsigned n = 0; n <= 64; n++) {
        const uint8_t *src = m + pg - n;
        for (unsigned i = 0; i < n; i++)
            m[pg - n + i] = (uint8_t)(i + 1);
        uint64_t k = n == 64 ? ~0ull : (1ull << n) - 1;
        uint8_t out[64];
        _mm512_storeu_si512(out, dc_emu_maskz_loadu_epi8(k, src));
        for (unsigned i = 0; i < 64; i++)
            cr_assert_eq(out[i], i < n ? i + 1 : 0);
        if (dc_emu_native_ok()) {
            uint8_t nat[64];
            dc_emu_native_maskz_load(src, k, nat);
            cr_assert(memcmp(out, nat, 64) == 0);
        }
        _Alignas(64) uint8_t dst[64] = {0};
        dc_emu_mask_storeu_epi8(m + pg - n, k, _mm512_loadu_si512(dst));
    }
    munmap(m, 2 * pg);
}

/* VMOVDQA64 and friends fault on an address that is not 64-byte aligned;
 * so does the emulation (a kernel that got away with it here would crash
 * on an AVX-512 CPU). */
Test(avx512_emu, aligned_accesses_trap_when_misaligned)
{
    _Alignas(64) uint8_t buf[192];
    memset(buf, 1, sizeof(buf));
    __m512i v = _mm512_load_si512(buf + 64);
    _mm512_store_si512(buf + 128, v);
    for (int what = 0; what < 2; what++) {
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            if (what == 0)
                v = _mm512_load_si512(buf + 8);
            else
                _mm512_store_si512(buf + 72, v);
            __asm__ volatile("" : : "m"(v));
            _exit(0);
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFSIGNALED(st), "a misaligned %s did not trap", what ? "store" : "load");
    }
}
