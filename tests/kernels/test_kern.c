/*
 * test_kern.c - host kernels against naive loops, on every ISA this CPU
 * runs: all widths, odd sizes, unaligned pointers, NaN payloads and -0.0,
 * cap truncation, scatter validation, dispatch and parallel_for.
 */
#include <criterion/criterion.h>

#include "kernels/kern.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const ISAS[] = {"scalar", "avx2", "avx512"};
static const unsigned WIDTHS[] = {1, 2, 4, 8};
static const size_t SIZES[] = {0,  1,  2,  3,  7,   8,   15,  16,  17,  31,   32,  33,
                               63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4097, 20011};

#define XORSHIFT_SEED 0x9E3779B97F4A7C15ull
#include "xorshift.h"

static void fill_random(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)rnd();
}

static uint64_t ld(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    memcpy(&v, p, w);
    return v;
}

/* b = a with a fraction `rate` (per mille) of elements changed; changes
 * include sign flips (-0.0 vs +0.0 in BF16/F32) and single-bit NaN payload
 * flips, never "changes" that keep the value. */
static void mutate(const uint8_t *a, uint8_t *b, size_t n, unsigned w, unsigned permille)
{
    memcpy(b, a, n * w);
    for (size_t i = 0; i < n; i++) {
        if (rnd() % 1000 >= permille)
            continue;
        uint64_t v = ld(b + i * w, w);
        switch (rnd() % 3) {
        case 0: v ^= 1ull << (w * 8 - 1); break;   /* sign bit */
        case 1: v ^= 1; break;                      /* lowest payload bit */
        default: v ^= (rnd() | 1) & (w == 8 ? ~0ull : (1ull << (w * 8)) - 1); break;
        }
        memcpy(b + i * w, &v, w);
    }
}

static size_t naive_diff(const uint8_t *a, const uint8_t *b, size_t n, unsigned w,
                         uint32_t *pos, uint8_t *xorw, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = ld(a + i * w, w) ^ ld(b + i * w, w);
        if (x) {
            if (k < cap) {
                pos[k] = (uint32_t)i;
                memcpy(xorw + k * w, &x, w);
            }
            k++;
        }
    }
    return k;
}

static void use_isa(const char *isa)
{
    cr_assert_eq(dc_kern_set_isa(isa), DC_OK, "set_isa(%s)", isa);
    cr_assert_str_eq(dc_kern_isa(), isa);
}

#define CANARY 0xA5

static void check_diff_case(const char *isa, unsigned w, size_t n, unsigned off_a,
                            unsigned off_b, unsigned permille)
{
    uint8_t *ba = malloc(n * w + 64), *bb = malloc(n * w + 64);
    uint8_t *a = ba + off_a, *b = bb + off_b;
    fill_random(a, n * w);
    mutate(a, b, n, w, permille);

    uint32_t *rpos = malloc((n + 1) * 4);
    uint8_t *rx = malloc((n + 1) * w);
    size_t total = naive_diff(a, b, n, w, rpos, rx, n);

    cr_assert_eq(dc_kern_count_changed(a, b, n, w), total, "%s count w=%u n=%zu", isa, w, n);

    size_t caps[] = {n, total, total ? total - 1 : 0, total / 2, 1, 0, n + 7};
    for (size_t c = 0; c < DC_ARRAY_SIZE(caps); c++) {
        size_t cap = caps[c];
        uint32_t *pos = malloc((cap + 16) * 4);
        uint8_t *xw = malloc((cap + 16) * w + 1);
        /* unaligned output pointers too */
        uint8_t *xwo = xw + (c & 1);
        memset(pos, CANARY, (cap + 16) * 4);
        memset(xw, CANARY, (cap + 16) * w + 1);
        size_t got = dc_kern_diff(a, b, n, w, pos, xwo, cap);
        cr_assert_eq(got, total, "%s diff total w=%u n=%zu cap=%zu", isa, w, n, cap);
        size_t wrote = DC_MIN(cap, total);
        cr_assert(memcmp(pos, rpos, wrote * 4) == 0, "%s diff pos w=%u n=%zu cap=%zu", isa, w,
                  n, cap);
        cr_assert(memcmp(xwo, rx, wrote * w) == 0, "%s diff xor w=%u n=%zu cap=%zu", isa, w,
                  n, cap);
        /* nothing at or beyond cap touched */
        for (size_t j = cap * 4; j < (cap + 16) * 4; j++)
            cr_assert_eq(((uint8_t *)pos)[j], CANARY, "%s pos overrun w=%u n=%zu cap=%zu", isa,
                         w, n, cap);
        for (size_t j = cap * w + (c & 1); j < (cap + 16) * w + 1; j++)
            cr_assert_eq(xw[j], CANARY, "%s xor overrun w=%u n=%zu cap=%zu", isa, w, n, cap);
        free(pos);
        free(xw);
    }

    /* gather, then both scatters rebuild b from a */
    uint8_t *vals = malloc(total * w + 1);
    dc_kern_gather(b, w, rpos, total, vals);
    for (size_t k = 0; k < total; k++)
        cr_assert(memcmp(vals + k * w, b + (size_t)rpos[k] * w, w) == 0, "%s gather", isa);

    uint8_t *dst = malloc(n * w + 8);
    uint8_t *d = dst + (off_a ^ 1);
    memcpy(d, a, n * w);
    cr_assert_eq(dc_kern_xor_scatter(d, n, w, rpos, rx, total), DC_OK);
    cr_assert(memcmp(d, b, n * w) == 0, "%s xor_scatter w=%u n=%zu", isa, w, n);
    memcpy(d, a, n * w);
    cr_assert_eq(dc_kern_put_scatter(d, n, w, rpos, vals, total), DC_OK);
    cr_assert(memcmp(d, b, n * w) == 0, "%s put_scatter w=%u n=%zu", isa, w, n);

    /* dense xor: a ^ (a ^ b) == b */
    uint8_t *xd = malloc(n * w + 1);
    for (size_t i = 0; i < n * w; i++)
        xd[i] = a[i] ^ b[i];
    memcpy(d, a, n * w);
    dc_kern_xor_dense(d, xd, n * w);
    cr_assert(memcmp(d, b, n * w) == 0, "%s xor_dense bytes=%zu", isa, n * w);

    free(xd);
    free(dst);
    free(vals);
    free(rpos);
    free(rx);
    free(ba);
    free(bb);
}

static void run_all_for(const char *isa)
{
    if (!dc_kern_isa_supported(isa))
        cr_skip_test("this CPU does not run %s", isa);
    use_isa(isa);
    static const unsigned RATES[] = {0, 10, 300, 600, 1000};
    for (size_t wi = 0; wi < DC_ARRAY_SIZE(WIDTHS); wi++)
        for (size_t si = 0; si < DC_ARRAY_SIZE(SIZES); si++)
            for (size_t ri = 0; ri < DC_ARRAY_SIZE(RATES); ri++)
                check_diff_case(isa, WIDTHS[wi], SIZES[si], (unsigned)(si % 4),
                                (unsigned)((si + ri) % 3), RATES[ri]);
}

Test(kern, scalar_matches_naive) { run_all_for("scalar"); }
Test(kern, avx2_matches_naive) { run_all_for("avx2"); }
Test(kern, avx512_matches_naive) { run_all_for("avx512"); }

Test(kern, bitwise_semantics_bf16)
{
    /* -0.0 vs +0.0, NaN payloads, identical NaNs, infinities */
    uint16_t a[40], b[40];
    for (int i = 0; i < 40; i++)
        a[i] = b[i] = (uint16_t)(0x3f80 + i);
    a[0] = 0x0000; b[0] = 0x8000;   /* +0 / -0: changed */
    a[5] = 0x7fc0; b[5] = 0x7fc1;   /* NaN payloads: changed */
    a[9] = 0x7fc0; b[9] = 0x7fc0;   /* same NaN: unchanged */
    a[33] = 0x7f80; b[33] = 0xff80; /* +inf / -inf: changed */
    a[39] = 0x0001; b[39] = 0x0001; /* same subnormal */
    for (size_t s = 0; s < DC_ARRAY_SIZE(ISAS); s++) {
        if (!dc_kern_isa_supported(ISAS[s]))
            continue;
        use_isa(ISAS[s]);
        uint32_t pos[40];
        uint16_t x[40];
        cr_assert_eq(dc_kern_count_changed(a, b, 40, 2), 3);
        cr_assert_eq(dc_kern_diff(a, b, 40, 2, pos, x, 40), 3);
        cr_assert_eq(pos[0], 0);
        cr_assert_eq(x[0], 0x8000);
        cr_assert_eq(pos[1], 5);
        cr_assert_eq(x[1], 0x0001);
        cr_assert_eq(pos[2], 33);
        cr_assert_eq(x[2], 0x8000);
    }
}

static void check_reject(unsigned w, const uint32_t *pos, size_t count, size_t n)
{
    uint8_t dst[64 * 8], copy[64 * 8], src[64 * 8];
    fill_random(dst, sizeof(dst));
    fill_random(src, sizeof(src));
    memcpy(copy, dst, sizeof(dst));
    cr_assert_eq(dc_kern_xor_scatter(dst, n, w, pos, src, count), DC_ERR_FORMAT);
    cr_assert(memcmp(dst, copy, sizeof(dst)) == 0, "xor_scatter touched dst on failure");
    cr_assert_str_neq(dc_last_error(), "");
    cr_assert_eq(dc_kern_put_scatter(dst, n, w, pos, src, count), DC_ERR_FORMAT);
    cr_assert(memcmp(dst, copy, sizeof(dst)) == 0, "put_scatter touched dst on failure");
}

Test(kern, scatter_rejects_bad_positions)
{
    for (size_t s = 0; s < DC_ARRAY_SIZE(ISAS); s++) {
        if (!dc_kern_isa_supported(ISAS[s]))
            continue;
        use_isa(ISAS[s]);
        for (size_t wi = 0; wi < DC_ARRAY_SIZE(WIDTHS); wi++) {
            unsigned w = WIDTHS[wi];
            uint32_t p[40];
            for (int i = 0; i < 40; i++)
                p[i] = (uint32_t)i + 1; /* 1..40, valid for n=64 */
            /* every place a fault can sit: first, in a vector, tail, last */
            static const int SPOTS[] = {0, 1, 7, 8, 15, 16, 17, 31, 38, 39};
            for (size_t sp = 0; sp < DC_ARRAY_SIZE(SPOTS); sp++) {
                int at = SPOTS[sp];
                uint32_t q[40];
                /* duplicate */
                memcpy(q, p, sizeof(q));
                if (at > 0) {
                    q[at] = q[at - 1];
                    check_reject(w, q, 40, 64);
                    /* decreasing */
                    memcpy(q, p, sizeof(q));
                    q[at] = q[at - 1] - 1;
                    check_reject(w, q, 40, 64);
                }
                /* out of range (and everything after it, still increasing) */
                memcpy(q, p, sizeof(q));
                for (int i = at; i < 40; i++)
                    q[i] = 64 + (uint32_t)i;
                check_reject(w, q, 40, 64);
                /* huge value */
                memcpy(q, p, sizeof(q));
                q[at] = 0xFFFFFFFFu;
                check_reject(w, q, 40, 64);
            }
            /* n = 0 with any position */
            check_reject(w, p, 1, 0);
            /* exactly n-1 is fine; n is not */
            uint32_t edge[2] = {62, 63};
            uint8_t dst[64 * 8] = {0}, src[16];
            memset(src, 0xff, sizeof(src));
            cr_assert_eq(dc_kern_xor_scatter(dst, 64, w, edge, src, 2), DC_OK);
            edge[1] = 64;
            check_reject(w, edge, 2, 64);
            /* count 0 is a no-op */
            cr_assert_eq(dc_kern_put_scatter(dst, 0, w, NULL, NULL, 0), DC_OK);
        }
    }
}

Test(kern, scatter_reports_lowest_bad_index_on_every_isa)
{
    /* index 20 is out of range and index 21 is then "decreasing": the
     * lowest bad index (20, out of range) is reported by every ISA (and by
     * the CUDA validator). */
    uint32_t p[64];
    uint8_t dst[128] = {0}, src[128] = {0};
    for (int i = 0; i < 64; i++)
        p[i] = (uint32_t)i;
    p[20] = 1000;
    char first[512] = "";
    for (size_t s = 0; s < DC_ARRAY_SIZE(ISAS); s++) {
        if (!dc_kern_isa_supported(ISAS[s]))
            continue;
        use_isa(ISAS[s]);
        cr_assert_eq(dc_kern_xor_scatter(dst, 100, 1, p, src, 64), DC_ERR_FORMAT);
        cr_assert(strstr(dc_last_error(), "index 20 is out of range") != NULL, "%s: %s",
                  ISAS[s], dc_last_error());
        if (first[0] == '\0')
            snprintf(first, sizeof(first), "%s", dc_last_error());
        cr_assert_str_eq(dc_last_error(), first);
    }
    p[20] = 20;
    p[40] = 39; /* duplicate of p[39] */
    for (size_t s = 0; s < DC_ARRAY_SIZE(ISAS); s++) {
        if (!dc_kern_isa_supported(ISAS[s]))
            continue;
        use_isa(ISAS[s]);
        cr_assert_eq(dc_kern_put_scatter(dst, 100, 1, p, src, 64), DC_ERR_FORMAT);
        cr_assert(strstr(dc_last_error(), "not strictly increasing at index 40") != NULL,
                  "%s: %s", ISAS[s], dc_last_error());
    }
}

Test(kern, large_scatter_positions_validated_by_vector_path)
{
    /* long valid runs with a fault deep inside, for the blocked checks */
    const size_t count = 10000, n = 40000;
    uint32_t *p = malloc(count * 4);
    uint16_t *src = malloc(count * 2);
    uint16_t *dst = malloc(n * 2), *copy = malloc(n * 2);
    fill_random((uint8_t *)src, count * 2);
    fill_random((uint8_t *)dst, n * 2);
    memcpy(copy, dst, n * 2);
    for (size_t s = 0; s < DC_ARRAY_SIZE(ISAS); s++) {
        if (!dc_kern_isa_supported(ISAS[s]))
            continue;
        use_isa(ISAS[s]);
        for (size_t at = 1; at < count; at += 997) {
            for (size_t i = 0; i < count; i++)
                p[i] = (uint32_t)(i * 4);
            p[at] = p[at - 1];
            cr_assert_eq(dc_kern_xor_scatter(dst, n, 2, p, src, count), DC_ERR_FORMAT,
                         "%s at=%zu", ISAS[s], at);
            cr_assert(memcmp(dst, copy, n * 2) == 0);
        }
        for (size_t i = 0; i < count; i++)
            p[i] = (uint32_t)(i * 4);
        cr_assert_eq(dc_kern_put_scatter(dst, n, 2, p, src, count), DC_OK);
        for (size_t i = 0; i < count; i++)
            cr_assert_eq(dst[i * 4], src[i]);
        memcpy(dst, copy, n * 2);
    }
    free(p);
    free(src);
    free(dst);
    free(copy);
}

Test(kern, xor_dense_all_offsets)
{
    uint8_t a[700], b[700], ref[700], d[700];
    fill_random(a, sizeof(a));
    fill_random(b, sizeof(b));
    for (size_t s = 0; s < DC_ARRAY_SIZE(ISAS); s++) {
        if (!dc_kern_isa_supported(ISAS[s]))
            continue;
        use_isa(ISAS[s]);
        for (size_t off = 0; off < 5; off++)
            for (size_t len = 0; len < 600; len += (len < 300 ? 1 : 37)) {
                memcpy(d, a, sizeof(d));
                memcpy(ref, a, sizeof(ref));
                for (size_t i = 0; i < len; i++)
                    ref[off + i] ^= b[(off * 3) + i];
                dc_kern_xor_dense(d + off, b + off * 3, len);
                cr_assert(memcmp(d, ref, sizeof(d)) == 0, "%s off=%zu len=%zu", ISAS[s], off,
                          len);
            }
    }
}

Test(kern, dispatch_env_forces_isa)
{
    setenv("DELTACAST_KERN_ISA", "scalar", 1);
    cr_assert_str_eq(dc_kern_isa(), "scalar");
}

Test(kern, dispatch_default_is_best)
{
    unsetenv("DELTACAST_KERN_ISA");
    const char *want = dc_kern_isa_supported("avx512") ? "avx512"
                       : dc_kern_isa_supported("avx2") ? "avx2" : "scalar";
    cr_assert_str_eq(dc_kern_isa(), want);
}

Test(kern, dispatch_env_unsupported_ignored)
{
    /* the ISA chosen without the variable, in a child (the choice is made
     * once per process) */
    unsetenv("DELTACAST_KERN_ISA");
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        const char *d = dc_kern_isa();
        if (!d)
            _exit(2);
        size_t dl = strlen(d) + 1;
        _exit(write(p[1], d, dl) == (ssize_t)dl ? 0 : 1);
    }
    close(p[1]);
    char def[32] = "";
    cr_assert(read(p[0], def, sizeof(def) - 1) > 0);
    close(p[0]);
    int status;
    cr_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    setenv("DELTACAST_KERN_ISA", "neon9000", 1);
    cr_assert_str_eq(dc_kern_isa(), def, "an unsupported DELTACAST_KERN_ISA was not ignored");
}

Test(kern, set_isa_rejects_unknown)
{
    cr_assert_eq(dc_kern_set_isa("sse9"), DC_ERR_INVALID);
    cr_assert_eq(dc_kern_set_isa(NULL), DC_ERR_INVALID);
    cr_assert_eq(dc_kern_set_isa("scalar"), DC_OK);
}

/* --- parallel_for ------------------------------------------------------- */

typedef struct pf_arg {
    uint64_t *slots;
    size_t fail_from; /* tasks >= this fail */
} pf_arg_t;

static dc_status_t pf_task(void *p, size_t t)
{
    pf_arg_t *arg = p;
    if (t >= arg->fail_from)
        return dc_error(DC_ERR_FORMAT, "task %zu failed", t);
    arg->slots[t] = t * t + 1;
    return DC_OK;
}

Test(kern, parallel_for_runs_every_task)
{
    unsigned threads[] = {0, 1, 2, 3, 64};
    for (size_t ti = 0; ti < DC_ARRAY_SIZE(threads); ti++) {
        uint64_t slots[1000] = {0};
        pf_arg_t arg = {slots, SIZE_MAX};
        cr_assert_eq(dc_kern_parallel_for(1000, pf_task, &arg, threads[ti]), DC_OK);
        for (size_t t = 0; t < 1000; t++)
            cr_assert_eq(slots[t], t * t + 1);
    }
    cr_assert_eq(dc_kern_parallel_for(0, pf_task, NULL, 4), DC_OK);
    cr_assert_eq(dc_kern_parallel_for(3, NULL, NULL, 4), DC_ERR_INVALID);
}

Test(kern, parallel_for_reports_lowest_failure)
{
    for (unsigned th = 1; th <= 4; th++) {
        uint64_t slots[500] = {0};
        pf_arg_t arg = {slots, 123};
        dc_clear_error();
        cr_assert_eq(dc_kern_parallel_for(500, pf_task, &arg, th), DC_ERR_FORMAT);
        cr_assert_str_eq(dc_last_error(), "task 123 failed");
        for (size_t t = 0; t < 123; t++)
            cr_assert_eq(slots[t], t * t + 1, "task %zu below the failure must run", t);
    }
}
