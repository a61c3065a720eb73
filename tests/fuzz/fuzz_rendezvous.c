/*
 * fuzz_rendezvous.c - fuzz target for the rendezvous files (topology/
 * rendezvous.c): DIR/rank-R, written by any process that can write the
 * shared directory, read by every rank of a `--port 0` job
 * (dc_rendezvous_parse, and through a real file dc_rendezvous_wait).
 *
 * Input byte 0: bit 0 picks the job key ("-", or "4242.0" as Slurm's),
 * bit 1 reads the bytes through a file (rank-0 in a temporary directory,
 * dc_rendezvous_wait with no wait) as well; the rest is the file.
 * Oracle: no crash / sanitizer report; a refused file fails cleanly with
 * DC_ERR_FORMAT naming the file; an accepted one is exactly "deltacast-
 * rendezvous 1 KEY ADDR\n" (rebuilt from the address it gave, byte for
 * byte), its address ends in a port 1..65535 and has only host
 * characters; another job's key is stale, with no address; the file
 * path agrees with the parse.
 *
 * Builds as the other targets (tests/fuzz/meson.build): fuzz_rendezvous_replay
 * (any compiler, -DDC_FUZZ_REPLAY) runs a corpus directory plus
 * deterministic mutations; fuzz_rendezvous is the libFuzzer binary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DC_FUZZ_NAME "fuzz_rendezvous"
#include "fuzz.h"

#include "topology/topo.h"

#define MAGIC "deltacast-rendezvous 1 "

static void check_addr(const char *a)
{
    const char *colon = strrchr(a, ':');
    CHECK(colon && colon != a);
    long port = strtol(colon + 1, NULL, 10);
    CHECK(port >= 1 && port <= 65535);
    for (const char *c = a; c < colon; c++)
        CHECK((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_' || *c == '.' || *c == ':' || *c == '[' || *c == ']');
}

/* a temporary directory for the file path, made once */
static const char *fuzz_dir(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/tmp/dc_fuzz_rdv_XXXXXX");
        CHECK(mkdtemp(dir) != NULL);
    }
    return dir;
}

static void via_file(const uint8_t *b, size_t n, const char *key, int k, const char *addr)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/rank-0", fuzz_dir());
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(b, 1, n, f) == n);
    CHECK(fclose(f) == 0);
    char **addrs = NULL;
    dc_status_t st = dc_rendezvous_wait(fuzz_dir(), key, 1, 0, &addrs);
    if (k == 1) {
        CHECK(st == DC_OK && addrs && addrs[0] && strcmp(addrs[0], addr) == 0);
        dc_rendezvous_free(addrs, 1);
    } else {
        /* refused (named) or, another job's, not there within no time */
        CHECK(st == (k == 0 ? DC_ERR_TIMEOUT : DC_ERR_FORMAT));
        failed_cleanly(st);
        if (k < 0)
            CHECK(strstr(dc_last_error(), "rank-0") != NULL);
    }
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *key = data[0] & 1 ? "4242.0" : "-";
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    char *addr = NULL;
    bool stale = false;
    int k = dc_rendezvous_parse((const char *)b, n, "DIR/rank-7", key, &addr, &stale);
    CHECK(k >= -1 && k <= 1);
    if (k == 1) {
        CHECK(addr != NULL && !stale);
        check_addr(addr);
        char line[1024];
        int w = snprintf(line, sizeof(line), MAGIC "%s %s\n", key, addr);
        CHECK(w > 0 && (size_t)w == n && memcmp(line, b, n) == 0);
        fuzz_accepted++;
    } else if (k == 0) {
        CHECK(addr == NULL && stale);
        CHECK(n > strlen(MAGIC) && memcmp(b, MAGIC, strlen(MAGIC)) == 0);
    } else {
        CHECK(addr == NULL);
        CHECK(dc_last_status() == DC_ERR_FORMAT);
        failed_cleanly(DC_ERR_FORMAT);
        CHECK(strstr(dc_last_error(), "DIR/rank-7") != NULL);
    }
    if (data[0] & 2)
        via_file(b, n, key, k, addr);
    free(addr);
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x2f6b1c9e84d3a750ULL
#include "replay.h"

/* One deterministic mutation (byte 0, the key and path choice, is kept):
 * the byte mutations of the message targets, with ':', ' ', '\n', '[',
 * digits and 0 among the values written. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    if (len < 2)
        return len;
    size_t at = 1 + (size_t)(rng() % (len - 1));
    static const uint32_t edge[] = {':', ' ', '\n', '[', ']', '0', '9', 0, 0xff, '-', '.'};
    unsigned op = (unsigned)(rng() % 8);
    if (op == 6) { /* a character that matters to the grammar */
        b[at] = (uint8_t)edge[rng() % DC_ARRAY_SIZE(edge)];
        return len;
    }
    return dc_fuzz_mutate_at(b, len, cap, at, op, 70, edge, DC_ARRAY_SIZE(edge));
}

int main(int argc, char **argv)
{
    return dc_fuzz_main(argc, argv, 16, 4, mutate, "accepted");
}
#endif
