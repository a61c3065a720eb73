/*
 * replay.h - the replay driver the fuzz targets share when built with
 * -DDC_FUZZ_REPLAY (any compiler; registered as `unit` tests): each input
 * once as it is, then `mutations` copies of it, each changed 1..max_k
 * times by the target's own mutate(), all through LLVMFuzzerTestOneInput
 * in exact-size heap copies (so that ASan catches any overread).
 *
 * A target defines DC_FUZZ_SEED (its deterministic stream) before
 * including this (after fuzz.h), and its mutate(b, len, cap) after (the
 * message targets' byte mutations: dc_fuzz_mutate_at()); its main() may be
 * dc_fuzz_main().
 */
#ifndef DC_TESTS_FUZZ_REPLAY_H
#define DC_TESTS_FUZZ_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static uint64_t rng_state = DC_FUZZ_SEED;
static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef size_t (*dc_fuzz_mutate_fn)(uint8_t *b, size_t len, size_t cap);

/* The byte mutations of the message targets (wire, rdma, handshake): on
 * b[0..len) of room cap, at `at` (past the bytes the target keeps),
 * operation `op`:
 *   0 flip a bit           1 the byte 0 or 0xff   2 a byte below `small`
 *   3 insert a byte (when there is room)           4 delete the byte
 *   5 truncate at `at`     6 a 2-byte boundary value  7 a 4-byte one
 * (boundary values from edge[0..nedge), little-endian, where they fit).
 * The new length.  A target draws `at` and then `op` from rng(), in that
 * order, and may keep an operation of its own for one `op`. */
static inline size_t dc_fuzz_mutate_at(uint8_t *b, size_t len, size_t cap, size_t at,
                                       unsigned op, unsigned small, const uint32_t *edge,
                                       size_t nedge)
{
    switch (op) {
    case 0: b[at] ^= (uint8_t)(1u << (rng() % 8)); break;
    case 1: b[at] = (uint8_t)(rng() % 2 ? 0 : 0xff); break;
    case 2: b[at] = (uint8_t)(rng() % small); break;
    case 3:
        if (len < cap) {
            memmove(b + at + 1, b + at, len - at);
            b[at] = (uint8_t)rng();
            len++;
        }
        break;
    case 4:
        memmove(b + at, b + at + 1, len - at - 1);
        len--;
        break;
    case 5: len = at; break;
    case 6:
        if (at + 2 <= len)
            dc_store_le16(b + at, (uint16_t)edge[rng() % nedge]);
        break;
    default:
        if (at + 4 <= len)
            dc_store_le32(b + at, edge[rng() % nedge]);
        break;
    }
    return len;
}

static void dc_fuzz_test_copy(const uint8_t *b, size_t len)
{
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact)
        abort();
    memcpy(exact, b, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
}

/* `in`, then `mutations` mutated copies (a copy may grow by `slack`). */
static void dc_fuzz_run(const uint8_t *in, size_t len, size_t slack, unsigned mutations,
                        unsigned max_k, dc_fuzz_mutate_fn mutate)
{
    dc_fuzz_test_copy(in, len);
    size_t cap = len + slack;
    uint8_t *buf = malloc(cap);
    if (!buf)
        abort();
    for (unsigned m = 0; m < mutations; m++) {
        memcpy(buf, in, len);
        size_t l = len;
        unsigned k = 1 + (unsigned)(rng() % max_k);
        for (unsigned j = 0; j < k; j++)
            l = mutate(buf, l, cap);
        dc_fuzz_test_copy(buf, l);
    }
    free(buf);
}

static int dc_fuzz_run_file(const char *path, size_t slack, unsigned mutations, unsigned max_k,
                            dc_fuzz_mutate_fn mutate)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    if (!b || fread(b, 1, (size_t)sz, fp) != (size_t)sz) {
        fclose(fp);
        free(b);
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    fclose(fp);
    dc_fuzz_run(b, (size_t)sz, slack, mutations, max_k, mutate);
    free(b);
    return 0;
}

/* The value of --mutations=N among the arguments (0 without it). */
static unsigned dc_fuzz_mutations(int argc, char **argv)
{
    unsigned mutations = 0;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--mutations=", 12) == 0)
            mutations = (unsigned)strtoul(argv[i] + 12, NULL, 10);
    return mutations;
}

/* Every argument that is not an option is a corpus file or directory:
 * run each file (directories: each file in them).  *files gets the count;
 * non-zero when a path is missing or a file cannot be read. */
static int dc_fuzz_run_paths(int argc, char **argv, size_t slack, unsigned max_k,
                             dc_fuzz_mutate_fn mutate, size_t *files)
{
    unsigned mutations = dc_fuzz_mutations(argc, argv);
    int rc = 0;
    *files = 0;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0)
            continue;
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "no such corpus: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            rc |= dc_fuzz_run_file(argv[i], slack, mutations, max_k, mutate);
            (*files)++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
            rc |= dc_fuzz_run_file(p, slack, mutations, max_k, mutate);
            (*files)++;
        }
        if (d)
            closedir(d);
    }
    return rc;
}

/* main() of a replay driver: run the corpus paths of the command line,
 * then print "<target>: N inputs, M mutations each, K <accepted>: ok"; a run
 * in which no input was accepted fails. */
static inline int dc_fuzz_main(int argc, char **argv, size_t slack, unsigned max_k,
                               dc_fuzz_mutate_fn mutate, const char *accepted)
{
    dc_log_set_level(DC_LOG_LEVEL_ERROR);
    size_t files;
    int rc = dc_fuzz_run_paths(argc, argv, slack, max_k, mutate, &files);
    if (files == 0) {
        fprintf(stderr, "usage: %s [--mutations=N] CORPUS_DIR|FILE...\n", argv[0]);
        return 1;
    }
    if (fuzz_accepted == 0) {
        /* every check on what a call returns ran on nothing */
        fprintf(stderr, DC_FUZZ_NAME ": %zu inputs, none %s\n", files, accepted);
        return 1;
    }
    printf(DC_FUZZ_NAME ": %zu inputs, %u mutations each, %lu %s: ok\n", files,
           dc_fuzz_mutations(argc, argv), fuzz_accepted, accepted);
    return rc;
}

#endif
