/*
 * fuzz_safetensors.c - fuzz target for the safetensors parser.
 *
 * LLVMFuzzerTestOneInput() parses the input as a whole file image
 * (dc_st_open_mem) and, when it is accepted, checks the reader's promises
 * as an oracle:
 *   - the tensors tile the data region in order, every pointer is in bounds
 *     and every byte of every tensor is readable (ASan sees overreads);
 *   - dc_st_find() returns each tensor by name;
 *   - rebuilding the header from the parsed tensors and metadata
 *     (dc_st_header_build) and parsing that again gives the same table,
 *     and the rebuilt header is a fixed point of build(parse(.)).
 * Any violation abort()s.
 *
 * Built two ways (tests/fuzz/meson.build):
 *   fuzz_safetensors         clang -fsanitize=fuzzer (coverage-guided; for
 *                            instrumented library code configure with
 *                            CC=clang -Dc_args=-fsanitize=fuzzer-no-link)
 *   fuzz_safetensors_replay  any compiler, -DDC_FUZZ_REPLAY: a main() that
 *                            runs every file of the corpus directories given
 *                            on the command line, plus N deterministic
 *                            mutations of each (--mutations=N), so CI runs
 *                            it under ASan/UBSan with gcc.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_FUZZ_NAME "fuzz_safetensors"
#include "fuzz.h"

#include "kernels/safetensors.h"

static void same_table(const dc_st_file_t *a, const dc_st_file_t *b)
{
    CHECK(dc_st_count(a) == dc_st_count(b));
    for (size_t i = 0; i < dc_st_count(a); i++) {
        const dc_st_tensor_t *x = dc_st_tensor(a, i), *y = dc_st_tensor(b, i);
        CHECK(strcmp(x->name, y->name) == 0);
        CHECK(x->dtype == y->dtype && x->ndim == y->ndim && x->nelems == y->nelems);
        CHECK(x->begin == y->begin && x->end == y->end);
        CHECK(memcmp(x->shape, y->shape, sizeof(uint64_t) * (size_t)x->ndim) == 0);
    }
    const char *ma = dc_st_metadata(a), *mb = dc_st_metadata(b);
    CHECK((ma == NULL) == (mb == NULL));
    CHECK(!ma || strcmp(ma, mb) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dc_st_file_t *f = NULL;
    if (dc_st_open_mem(data, size, "fuzz", &f) != DC_OK) {
        CHECK(f == NULL);
        CHECK(dc_last_status() != DC_OK && *dc_last_error());
        return 0;
    }
    fuzz_accepted++;
    size_t n = dc_st_count(f), hl;
    uint64_t doff = dc_st_data_offset(f), pos = 0;
    CHECK(dc_st_header_raw(f, &hl) == data && hl == doff && doff <= size);
    CHECK(dc_st_file_size(f) == size);
    volatile uint8_t sink = 0;
    dc_st_desc_t *descs = calloc(n ? n : 1, sizeof(*descs));
    CHECK(descs);
    for (size_t i = 0; i < n; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        CHECK(t->begin == pos && t->end >= t->begin);
        CHECK(t->end - t->begin == t->nelems * dc_dtype_size(t->dtype));
        CHECK(t->ndim >= 0 && t->ndim <= DC_ST_MAX_NDIM);
        const uint8_t *p = dc_st_data(f, t);
        CHECK(p == data + doff + t->begin && p + (t->end - t->begin) <= data + size);
        for (uint64_t k = 0; k < t->end - t->begin; k += 61)
            sink ^= p[k];
        pos = t->end;
        CHECK(dc_st_find(f, t->name) != NULL);
        CHECK(strcmp(dc_st_find(f, t->name)->name, t->name) == 0);
        descs[i].name = t->name;
        descs[i].dtype = t->dtype;
        descs[i].ndim = t->ndim;
        memcpy(descs[i].shape, t->shape, sizeof(t->shape));
    }
    (void)sink;
    CHECK(doff + pos == size);

    /* build(parse(x)) parses to the same table and is a fixed point */
    uint8_t *h1 = NULL, *h2 = NULL;
    size_t l1, l2;
    uint64_t ds;
    dc_status_t st = dc_st_header_build(descs, n, dc_st_metadata(f), &h1, &l1, &ds);
    if (st == DC_OK) {
        CHECK(ds == pos);
        uint8_t *img = malloc(l1 + (size_t)ds + 1);
        CHECK(img);
        memcpy(img, h1, l1);
        memcpy(img + l1, data + doff, (size_t)ds);
        dc_st_file_t *g = NULL;
        CHECK(dc_st_open_mem(img, l1 + (size_t)ds, "rebuilt", &g) == DC_OK);
        same_table(f, g);
        for (size_t i = 0; i < n; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(g, i);
            CHECK(memcmp(dc_st_data(g, t), dc_st_data(f, dc_st_tensor(f, i)),
                         (size_t)(t->end - t->begin)) == 0);
        }
        dc_st_desc_t *d2 = calloc(n ? n : 1, sizeof(*d2));
        CHECK(d2);
        for (size_t i = 0; i < n; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(g, i);
            d2[i] = (dc_st_desc_t){.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
            memcpy(d2[i].shape, t->shape, sizeof(t->shape));
        }
        CHECK(dc_st_header_build(d2, n, dc_st_metadata(g), &h2, &l2, NULL) == DC_OK);
        CHECK(l1 == l2 && memcmp(h1, h2, l1) == 0);
        free(d2);
        dc_st_close(g);
        free(img);
    } else {
        /* only an over-long header (escapes / padding) may fail to rebuild */
        CHECK(st == DC_ERR_INVALID && hl + 64 > DC_ST_MAX_HEADER);
    }
    free(h1);
    free(h2);
    free(descs);
    dc_st_close(f);
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x853c49e6748fea9bULL
#include "replay.h"

/* One deterministic mutation: flip, set, insert, delete, truncate, or
 * rewrite the length prefix / a digit. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    uint64_t r = rng();
    size_t at = len ? (size_t)(rng() % len) : 0;
    switch (r % 8) {
    case 0:
        if (len)
            b[at] ^= (uint8_t)(1u << (rng() % 8));
        break;
    case 1:
        if (len)
            b[at] = (uint8_t)rng();
        break;
    case 2: {
        static const char toks[] = "{}[],:\"0123456789 -.e\\";
        if (len)
            b[at] = (uint8_t)toks[rng() % (sizeof(toks) - 1)];
        break;
    }
    case 3:
        if (len < cap) {
            memmove(b + at + 1, b + at, len - at);
            b[at] = (uint8_t)rng();
            len++;
        }
        break;
    case 4:
        if (len) {
            memmove(b + at, b + at + 1, len - at - 1);
            len--;
        }
        break;
    case 5:
        len = at;
        break;
    case 6:
        if (len >= 8) {
            uint64_t n;
            memcpy(&n, b, 8);
            n += (uint64_t)(rng() % 17) - 8;
            memcpy(b, &n, 8);
        }
        break;
    default:
        if (len >= 8) { /* grow the data region */
            size_t add = (size_t)(rng() % 16);
            if (len + add <= cap) {
                memset(b + len, 0xab, add);
                len += add;
            }
        }
        break;
    }
    return len;
}

int main(int argc, char **argv)
{
    return dc_fuzz_main(argc, argv, 64, 4, mutate, "parsed");
}
#endif
