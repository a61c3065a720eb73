/*
 * test_crc32c.c - CRC32C known vectors (RFC 3720 B.4), chaining, agreement
 * of every implementation; XXH3-128 digest against libxxhash.
 */
#include <criterion/criterion.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#include <stdlib.h>
#include <xxhash.h>

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static const struct {
    const char *name;
    crc_fn fn;
} IMPLS[] = {
    {"dc_crc32c", dc_crc32c},
    {"table", dc_crc32c_sw},
#if defined(__x86_64__)
    {"sse4.2", dc_crc32c_sse42},
    {"vpclmul", dc_crc32c_vpclmul},
#endif
#if DC_HAVE_ISAL
    {"isa-l", dc_crc32c_isal},
#endif
};

static int impl_runs(size_t i)
{
#if defined(__x86_64__)
    if (IMPLS[i].fn == dc_crc32c_sse42)
        return __builtin_cpu_supports("sse4.2");
    if (IMPLS[i].fn == dc_crc32c_vpclmul)
        return dc_crc32c_vpclmul_ok();
#endif
    (void)i;
    return 1;
}

Test(crc32c, known_vectors)
{
    uint8_t zeros[32] = {0}, ones[32], inc[32], dec[32];
    memset(ones, 0xff, sizeof(ones));
    for (int i = 0; i < 32; i++) {
        inc[i] = (uint8_t)i;
        dec[i] = (uint8_t)(31 - i);
    }
    for (size_t i = 0; i < DC_ARRAY_SIZE(IMPLS); i++) {
        if (!impl_runs(i))
            continue;
        crc_fn f = IMPLS[i].fn;
        cr_assert_eq(f(0, "123456789", 9), 0xE3069283u, "%s", IMPLS[i].name);
        cr_assert_eq(f(0, zeros, 32), 0x8A9136AAu, "%s", IMPLS[i].name);
        cr_assert_eq(f(0, ones, 32), 0x62A8AB43u, "%s", IMPLS[i].name);
        cr_assert_eq(f(0, inc, 32), 0x46DD794Eu, "%s", IMPLS[i].name);
        cr_assert_eq(f(0, dec, 32), 0x113FDB5Cu, "%s", IMPLS[i].name);
        cr_assert_eq(f(0, "", 0), 0u, "%s", IMPLS[i].name);
        cr_assert_eq(f(0x12345678u, "", 0), 0x12345678u, "%s", IMPLS[i].name);
    }
    cr_assert(strcmp(dc_crc32c_impl(), "avx512-vpclmulqdq") == 0 ||
              strcmp(dc_crc32c_impl(), "isa-l") == 0 || strcmp(dc_crc32c_impl(), "sse4.2") == 0 ||
              strcmp(dc_crc32c_impl(), "table") == 0);
}

Test(crc32c, chaining_and_agreement)
{
    const size_t len = 3 * 8192 * 2 + 3 * 256 * 3 + 77; /* every code path */
    uint8_t *buf = malloc(len + 8);
    uint64_t s = 42;
    for (size_t i = 0; i < len + 8; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(s >> 56);
    }
    static const size_t LENS[] = {0,    1,     7,     8,     9,     15,    16,   17,
                                  63,   64,    65,    255,   256,   257,   271,  272,
                                  319,  320,   511,   512,   513,   575,   767,  768,
                                  769,  4096,  24575, 24576, 24577, 50000,
                                  3 * 8192 * 2 + 3 * 256 * 3 + 77};
    for (size_t off = 0; off < 8; off++) {
        for (size_t li = 0; li < DC_ARRAY_SIZE(LENS); li++) {
            size_t n = LENS[li];
            if (off + n > len + 8)
                continue;
            uint32_t ref = dc_crc32c_sw(0, buf + off, n);
            for (size_t i = 0; i < DC_ARRAY_SIZE(IMPLS); i++) {
                if (!impl_runs(i))
                    continue;
                crc_fn f = IMPLS[i].fn;
                cr_assert_eq(f(0, buf + off, n), ref, "%s off=%zu n=%zu", IMPLS[i].name, off,
                             n);
                /* chaining at several split points */
                size_t splits[] = {0, 1, n / 3, n / 2, n ? n - 1 : 0, n};
                for (size_t sp = 0; sp < DC_ARRAY_SIZE(splits); sp++) {
                    size_t k = splits[sp];
                    if (k > n)
                        continue;
                    uint32_t c = f(f(0, buf + off, k), buf + off + k, n - k);
                    cr_assert_eq(c, ref, "%s chain off=%zu n=%zu split=%zu", IMPLS[i].name,
                                 off, n, k);
                }
            }
        }
    }
    free(buf);
}

/* Every length up to 1100 and every alignment mod 8 against the tables:
 * each tail of the folding code (256-byte steps, 64-byte steps, lanes,
 * 16-byte steps, the bytes after) and every fallback below 256. */
Test(crc32c, every_short_length)
{
    uint8_t buf[1100 + 8];
    uint64_t s = 99;
    for (size_t i = 0; i < sizeof(buf); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(s >> 56);
    }
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 1100; n++) {
            uint32_t ref = dc_crc32c_sw(0x5a5a5a5au, buf + off, n);
            for (size_t i = 0; i < DC_ARRAY_SIZE(IMPLS); i++)
                if (impl_runs(i))
                    cr_assert_eq(IMPLS[i].fn(0x5a5a5a5au, buf + off, n), ref,
                                 "%s off=%zu n=%zu", IMPLS[i].name, off, n);
        }
}

/* crc(A || B) from crc(A), crc(B) and |B|: every split of a buffer, and a
 * message put together from equal pieces plus a short tail (the way the
 * ucx receiver combines the CRC32Cs of its pieces). */
Test(crc32c, combine)
{
    const size_t len = 3 * 65536 + 12345;
    uint8_t *buf = malloc(len);
    cr_assert(buf);
    uint64_t s = 7;
    for (size_t i = 0; i < len; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(s >> 56);
    }
    uint32_t whole = dc_crc32c_sw(0, buf, len);
    static const size_t SPLITS[] = {0, 1, 7, 4096, 65536, 3 * 65536, len - 1, len};
    for (size_t i = 0; i < DC_ARRAY_SIZE(SPLITS); i++) {
        size_t k = SPLITS[i];
        uint32_t a = dc_crc32c(0, buf, k), b = dc_crc32c(0, buf + k, len - k);
        cr_assert_eq(dc_crc32c_combine(a, b, len - k), whole, "split %zu", k);
        cr_assert_eq(dc_crc32c_combine_op(a, b, dc_crc32c_shift_op(len - k)), whole);
    }
    const size_t step = 65536;
    uint32_t op = dc_crc32c_shift_op(step), acc = 0;
    size_t off = 0;
    for (; off + step <= len; off += step)
        acc = dc_crc32c_combine_op(acc, dc_crc32c(0, buf + off, step), op);
    acc = dc_crc32c_combine(acc, dc_crc32c(0, buf + off, len - off), len - off);
    cr_assert_eq(acc, whole);
    /* a flipped bit in one piece changes the combined CRC */
    buf[2 * step + 5] ^= 0x10;
    cr_assert_neq(dc_crc32c_combine(dc_crc32c(0, buf, 2 * step),
                                    dc_crc32c(0, buf + 2 * step, len - 2 * step), len - 2 * step),
                  whole);
    free(buf);
}

Test(crc32c, detects_single_bit_flip)
{
    uint8_t buf[4096];
    memset(buf, 0x5a, sizeof(buf));
    uint32_t ref = dc_crc32c(0, buf, sizeof(buf));
    for (size_t bit = 0; bit < sizeof(buf) * 8; bit += 61) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        cr_assert_neq(dc_crc32c(0, buf, sizeof(buf)), ref);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

Test(digest, matches_xxh3_128)
{
    uint8_t buf[5000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    static const size_t LENS[] = {0, 1, 3, 16, 17, 128, 129, 240, 241, 1024, 4999};
    for (size_t li = 0; li < DC_ARRAY_SIZE(LENS); li++) {
        XXH128_hash_t h = XXH3_128bits(buf + 1, LENS[li]);
        dc_digest_t d = dc_digest128(buf + 1, LENS[li]);
        cr_assert_eq(d.lo, h.low64, "len %zu", LENS[li]);
        cr_assert_eq(d.hi, h.high64, "len %zu", LENS[li]);
    }
    /* published XXH3-128 of the empty input */
    dc_digest_t e = dc_digest128(NULL, 0);
    cr_assert_eq(e.hi, 0x99aa06d3014798d8ull);
    cr_assert_eq(e.lo, 0x6001c324468d497full);
    dc_digest_t a = dc_digest128("a", 1), b = dc_digest128("b", 1);
    cr_assert(!dc_digest_eq(a, b));
    cr_assert(dc_digest_eq(a, dc_digest128("a", 1)));
}
