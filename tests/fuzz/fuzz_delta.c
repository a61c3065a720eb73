/*
 * fuzz_delta.c - fuzz target for the delta file reader/apply, the frame
 * header and the chunk/entropy decoders.
 *
 * Input byte 0 selects the target:
 *   0: the rest is a delta image applied to a fixed in-memory base
 *      checkpoint (dc_delta_apply_buffers);
 *   1: the same, after re-sealing every CRC in the image (file header,
 *      target header, frame headers, payloads; v2: record groups) so that
 *      mutations reach the
 *      layout checks and the codec decoders instead of stopping at a CRC;
 *   2: bytes 1-2 encoding, byte 3 width selector, bytes 4-5 element count,
 *      the rest a chunk payload: dc_codec_decode into a guarded buffer and
 *      dc_frame_decode of the same bytes.
 * Oracle: no crash / sanitizer report; a failing call leaves a status and
 * a detail message; the guard bytes after the output stay intact; a
 * successful apply reproduces a checkpoint whose digest the delta named
 * (checked by the library itself).
 *
 * Builds:
 *   fuzz_delta_replay (any compiler, -DDC_FUZZ_REPLAY): main() builds seed
 *     inputs in-process (real deltas for the fixed base, real chunk
 *     payloads; each must apply or decode as it is), also runs any corpus
 *     files given, and N deterministic mutations of each (--mutations=N).  `--write-corpus=DIR`
 * writes the seeds as files for libFuzzer. fuzz_delta (clang, -fsanitize=fuzzer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_FUZZ_NAME "fuzz_delta"
#include "fuzz.h"

#include "kernels/codec.h"
#include "kernels/delta.h"
#include "kernels/entropy.h"

/* --- the fixed base checkpoint --------------------------------------------- */

static uint8_t *g_base;
static size_t g_base_len;

static const char BASE_JSON[] =
    "{\"a\":{\"dtype\":\"BF16\",\"shape\":[300],\"data_offsets\":[0,600]},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[7],\"data_offsets\":[600,628]},"
    "\"c\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[628,633]},"
    "\"d\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[633,641]}}";

static uint8_t *make_ckpt(uint64_t seed, double rate, size_t *len)
{
    size_t jl = sizeof(BASE_JSON) - 1, hl = (jl + 7) & ~(size_t)7, dl = 641;
    uint8_t *b = malloc(8 + hl + dl);
    CHECK(b);
    dc_store_le64(b, hl);
    memcpy(b + 8, BASE_JSON, jl);
    memset(b + 8 + jl, ' ', hl - jl);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < dl; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b[8 + hl + i] = (uint8_t)s;
    }
    uint64_t r = seed * 2654435761u + 7;
    for (size_t i = 0; i < dl; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        if ((double)(r % 10000) < rate * 10000)
            b[8 + hl + i] ^= (uint8_t)(1 + (r >> 40) % 3);
    }
    *len = 8 + hl + dl;
    return b;
}

static void init_base(void)
{
    if (!g_base)
        g_base = make_ckpt(0, 0.0, &g_base_len);
}

static int vget(const uint8_t *d, size_t len, size_t *p, uint64_t *v)
{
    *v = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (*p >= len)
            return 0;
        uint8_t c = d[(*p)++];
        *v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80))
            return 1;
    }
    return 0;
}

/* Version 2: the stored target header's CRC, the file header's, and both
 * CRCs of every record group (kernels/delta.h). */
static void reseal_v2(uint8_t *d, size_t len)
{
    uint64_t S = dc_load_le64(d + 100);
    if (S > len - DC_DELTA_HEADER_SIZE)
        return;
    if (!(dc_load_le32(d + 12) & DC_DELTA_F_TH_BASE))
        dc_store_le32(d + 96, dc_crc32c(0, d + DC_DELTA_HEADER_SIZE, (size_t)S));
    dc_store_le32(d + 124, dc_crc32c(0, d, 124));
    size_t off = DC_DELTA_HEADER_SIZE + (size_t)S;
    while (off < len) {
        size_t p = off;
        uint64_t n, v, e, l, sum = 0;
        if (!vget(d, len, &p, &n) || n == 0 || n > DC_DELTA_GROUP_MAX)
            return;
        for (uint64_t i = 0; i < n; i++) {
            /* skip, the one-byte encoding code, the length */
            if (!vget(d, len, &p, &v) || p >= len)
                return;
            e = d[p++];
            if (!vget(d, len, &p, &l))
                return;
            p += (e & 1) ? 16 : 0;
            sum += l;
            if (p > len || sum > len)
                return;
        }
        if (len - p < 4)
            return;
        dc_store_le32(d + p, dc_crc32c(0, d + off, p - off));
        p += 4;
        if (sum > len - p || len - p - sum < 4)
            return;
        dc_store_le32(d + p + sum, dc_crc32c(0, d + p, (size_t)sum));
        off = p + (size_t)sum + 4;
    }
}

/* Re-seal every CRC of a delta image in place (best effort: stops where
 * the structure no longer parses). */
static void reseal(uint8_t *d, size_t len)
{
    if (len < DC_DELTA_HEADER_SIZE)
        return;
    if (dc_load_le32(d + 8) == 2) {
        reseal_v2(d, len);
        return;
    }
    uint64_t thl = dc_load_le64(d + 72);
    if (thl > len - DC_DELTA_HEADER_SIZE)
        return;
    dc_store_le32(d + 96, dc_crc32c(0, d + DC_DELTA_HEADER_SIZE, (size_t)thl));
    dc_store_le32(d + 124, dc_crc32c(0, d, 124));
    size_t off = DC_DELTA_HEADER_SIZE + (size_t)thl;
    while (len - off >= DC_FRAME_HEADER_SIZE) {
        uint8_t *f = d + off;
        uint32_t pl = dc_load_le32(f + 36);
        if (pl > len - off - DC_FRAME_HEADER_SIZE)
            pl = (uint32_t)(len - off - DC_FRAME_HEADER_SIZE);
        dc_store_le32(f + 56, dc_crc32c(0, f + DC_FRAME_HEADER_SIZE, pl));
        dc_store_le32(f + 92, dc_crc32c(0, f, 92));
        off += DC_FRAME_HEADER_SIZE + pl;
    }
}


/* The base every mode-2 (chunk) input is decoded against, and its seeds
 * encoded from: bytes of varied magnitude, so that the ctx-sparse kind's
 * classes of the base differ (a constant base would hold one class). */
static uint8_t chunk_base_byte(size_t i)
{
    return (uint8_t)(0x11 + i * 0x3b + (i >> 7) * 0x55);
}

static void chunk_base(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = chunk_base_byte(i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_base();
    if (size < 1)
        return 0;
    unsigned mode = data[0] % 3;
    if (mode <= 1) {
        uint8_t *d = malloc(size - 1 ? size - 1 : 1);
        CHECK(d);
        memcpy(d, data + 1, size - 1);
        if (mode == 1)
            reseal(d, size - 1);
        size_t cap = 1 << 16;
        uint8_t *out = malloc(cap + 64);
        CHECK(out);
        memset(out + cap, 0xA5, 64);
        size_t ol = 0;
        dc_delta_opts_t o = {.size = sizeof(o), .threads = 1};
        dc_status_t st =
            dc_delta_apply_buffers(g_base, g_base_len, d, size - 1, &o, out, cap, &ol, NULL);
        if (st != DC_OK)
            CHECK(dc_last_status() != DC_OK && *dc_last_error());
        else {
            fuzz_accepted++;
            CHECK(ol <= cap);
        }
        for (int i = 0; i < 64; i++)
            CHECK(out[cap + i] == 0xA5);
        free(out);
        free(d);
        return 0;
    }
    /* raw chunk payload, decoded against the fixed chunk base */
    dc_frame_hdr_t h;
    if (dc_frame_decode(data + 1, size - 1, &h) != DC_OK)
        CHECK(*dc_last_error());
    if (size < 6)
        return 0;
    uint16_t enc = dc_load_le16(data + 1);
    unsigned w = 1u << (data[3] & 3);
    size_t n = 1 + dc_load_le16(data + 4) % 4096;
    static dc_codec_t *codec;
    if (!codec)
        CHECK(dc_codec_create(4096 * 8, &codec) == DC_OK);
    uint8_t *dst = malloc(n * w + 64);
    CHECK(dst);
    chunk_base(dst, n * w);
    memset(dst + n * w, 0xA5, 64);
    dc_status_t st = dc_codec_decode(codec, enc, data + 6, size - 6, dst, n, w);
    if (st != DC_OK) {
        CHECK(st == DC_ERR_FORMAT);
        for (size_t i = 0; i < n * w; i++)
            CHECK(dst[i] == chunk_base_byte(i));
    } else {
        fuzz_accepted++;
    }
    for (int i = 0; i < 64; i++)
        CHECK(dst[n * w + i] == 0xA5);
    free(dst);
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x2545F4914F6CDD1Dull
#include "replay.h"

static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    size_t at = len > 1 ? 1 + (size_t)(rng() % (len - 1)) : 0; /* keep the mode byte */
    switch (rng() % 6) {
    case 0:
    case 1:
        if (len > 1)
            b[at] ^= (uint8_t)(1u << (rng() % 8));
        break;
    case 2:
        if (len > 1)
            b[at] = (uint8_t)rng();
        break;
    case 3:
        if (len < cap && len > 1) {
            memmove(b + at + 1, b + at, len - at);
            b[at] = (uint8_t)rng();
            len++;
        }
        break;
    case 4:
        if (len > 1) {
            memmove(b + at, b + at + 1, len - at - 1);
            len--;
        }
        break;
    default:
        if (len > 1)
            len = at;
        break;
    }
    return len;
}

/* A mode-2 seed: the payload of a chunk of n words of w bytes, a fraction
 * `rate` of them changed (no_base: a PUT_DENSE chunk), behind its header
 * (mode, encoding, width selector, n - 1). */
static uint8_t *chunk_seed(dc_codec_t *c, size_t n, unsigned w, double rate, int no_base,
                           size_t *seed_len)
{
    uint8_t *a = malloc(n * w), *b = malloc(n * w);
    CHECK(a && b);
    chunk_base(a, n * w);
    memcpy(b, a, n * w);
    for (size_t i = 0; i < n; i++)
        if ((double)(rng() % 1000) < rate * 1000)
            b[i * w] ^= (uint8_t)(1 + rng() % 3);
    size_t cap = dc_codec_payload_bound(n * w), len;
    uint8_t *p = malloc(cap + 6);
    CHECK(p);
    uint16_t enc;
    CHECK(dc_codec_encode(c, no_base ? NULL : a, b, n, w, p + 6, cap, &len, &enc, NULL) ==
          DC_OK);
    p[0] = 2;
    dc_store_le16(p + 1, enc);
    p[3] = (uint8_t)(w == 1 ? 0 : w == 2 ? 1 : w == 4 ? 2 : 3);
    dc_store_le16(p + 4, (uint16_t)(n - 1));
    free(a);
    free(b);
    *seed_len = len + 6;
    return p;
}

/* Seeds: deltas of the fixed base against mutated targets (modes 0 and 1),
 * and raw chunk payloads of every kind (mode 2). */
static size_t make_seeds(uint8_t **seeds, size_t *lens, size_t max)
{
    init_base();
    size_t k = 0;
    static const double rates[] = {0.0, 0.01, 0.3, 1.0};
    static const uint64_t chunks[] = {64, 200, 4096};
    /* v2 records with and without their digests (dg: every chunk carries one) */
    for (size_t r = 0; r < 4 && k + 2 <= max; r++)
        for (size_t c = 0; c < 4 && k + 2 <= max; c++) {
            int dg = c == 3;
            uint64_t dmin = dc_delta_digest_min;
            if (dg)
                dc_delta_digest_min = 0;
            size_t nl;
            uint8_t *next = make_ckpt(r + 1, rates[r], &nl);
            dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = chunks[dg ? 1 : c], .threads = 1};
            void *d;
            size_t dl;
            CHECK(dc_delta_diff_buffers(g_base, g_base_len, next, nl, &o, &d, &dl, NULL) == DC_OK);
            dc_delta_digest_min = dmin;
            for (unsigned mode = 0; mode < 2; mode++) {
                seeds[k] = malloc(dl + 1);
                seeds[k][0] = (uint8_t)mode;
                memcpy(seeds[k] + 1, d, dl);
                lens[k++] = dl + 1;
            }
            dc_free(d);
            free(next);
        }
    dc_codec_t *c;
    CHECK(dc_codec_create(4096 * 8, &c) == DC_OK);
    for (unsigned w = 1; w <= 8 && k < max; w *= 2)
        for (size_t r = 0; r < 4 && k < max; r++) {
            seeds[k] = chunk_seed(c, 1000, w, rates[r], r == 3, &lens[k]);
            k++;
        }
    /* the order0 kinds (xor-sparse, put-sparse) */
    dc_codec_set_model(c, DC_CODEC_MODEL_ORDER0);
    for (unsigned w = 1; w <= 8 && k < max; w *= 2)
        for (size_t r = 1; r < 3 && k < max; r++) {
            seeds[k] = chunk_seed(c, 1000, w, rates[r], r == 2, &lens[k]);
            k++;
        }
    /* the SIMD layouts: gaps positions (4- and 32-way quotients) and
     * 32-way values, forced at these small counts */
    for (unsigned w = 1; w <= 2 && k < max; w++)
        for (unsigned ways = 0; ways <= 32 && k < max; ways += 32)
            for (size_t r = 1; r < 3 && k < max; r++) {
                dc_codec_pos_method = DC_ENT_GAPS;
                dc_ent_rans_ways = ways;
                seeds[k] = chunk_seed(c, 4096, w, rates[r] * 0.7, 0, &lens[k]);
                dc_codec_pos_method = 0;
                dc_ent_rans_ways = 0;
                CHECK(dc_enc_pos_method(dc_load_le16(seeds[k] + 1)) == DC_ENT_GAPS);
                k++;
            }
    dc_codec_free(c);
    return k;
}

int main(int argc, char **argv)
{
    unsigned mutations = dc_fuzz_mutations(argc, argv);
    const char *write_dir = NULL;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--write-corpus=", 15) == 0)
            write_dir = argv[i] + 15;
    uint8_t *seeds[64];
    size_t lens[64];
    size_t ns = make_seeds(seeds, lens, 64);
    for (size_t i = 0; i < ns; i++) {
        if (write_dir) {
            char p[1024];
            snprintf(p, sizeof(p), "%s/seed%02zu", write_dir, i);
            FILE *f = fopen(p, "wb");
            CHECK(f && fwrite(seeds[i], 1, lens[i], f) == lens[i]);
            fclose(f);
        }
        /* a seed is a valid delta or chunk: it applies / decodes */
        unsigned long before = fuzz_accepted;
        dc_fuzz_test_copy(seeds[i], lens[i]);
        if (fuzz_accepted != before + 1)
            fprintf(stderr, "fuzz_delta: seed %zu (%zu bytes) not accepted: %s\n", i, lens[i],
                    dc_last_error());
        CHECK(fuzz_accepted == before + 1);
        dc_fuzz_run(seeds[i], lens[i], 64, mutations, 3, mutate);
        free(seeds[i]);
    }
    size_t files;
    int rc = dc_fuzz_run_paths(argc, argv, 64, 3, mutate, &files);
    printf("fuzz_delta_replay: %zu seeds, %zu corpus files, %u mutations each, %lu applied or "
           "decoded: ok\n", ns, files, mutations, fuzz_accepted);
    return rc;
}
#endif
