/*
 * fuzz_topology.c - fuzz target for what users hand the planner: YAML
 * topology files, Slurm host lists, and the size / rate / duration /
 * synthetic-topology strings of the command line.
 *
 * Input byte 0 selects the target; the rest is the text:
 *   0: dc_topo_parse (a topology file); when it parses, every node is read
 *      back, and a topology of at most 64 nodes is planned (dc_tree_plan)
 *      and re-planned without each receiver in turn (dc_tree_replan);
 *   1: dc_slurm_expand (a SLURM_NODELIST), and dc_topo_from_slurm of it
 *      (with the text after a NUL, if any, as the region map);
 *   2: dc_parse_size, dc_parse_rate, dc_parse_duration and
 *      dc_topo_synthetic_parse of the text.
 * Oracle: no crash / sanitizer report; a failing call leaves a status and
 * a detail message; what a successful call returns is self-consistent.
 *
 * Builds as the other targets (tests/fuzz/meson.build): fuzz_topology_replay
 * (any compiler, -DDC_FUZZ_REPLAY) runs a corpus directory plus
 * deterministic mutations; fuzz_topology is the libFuzzer binary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_FUZZ_NAME "fuzz_topology"
#include "fuzz.h"

#include "deltacast.h"
#include "topology/topo.h"

static void topo_checks(dc_topo_t *t)
{
    uint32_t n = dc_topo_node_count(t), r = dc_topo_region_count(t);
    CHECK(dc_topo_shard_count(t) >= 1);
    for (uint32_t i = 0; i < r; i++)
        CHECK(dc_topo_region_name(t, i) != NULL);
    uint32_t senders = 0;
    for (uint32_t i = 0; i < n; i++) {
        dc_topo_node_info_t ni;
        memset(&ni, 0, sizeof(ni));
        ni.size = sizeof(ni);
        CHECK(dc_topo_node(t, i, &ni) == DC_OK);
        CHECK(ni.name != NULL && ni.addr != NULL && ni.region != NULL && ni.region_index < r);
        for (uint32_t k = 0; k < ni.n_nics; k++)
            CHECK(ni.nics[k] != NULL);
        for (uint32_t k = 0; k < ni.n_gpus; k++)
            CHECK(ni.gpus[k] != NULL);
        uint32_t found;
        CHECK(dc_topo_find(t, ni.name, &found) == DC_OK);
        senders += ni.role == DC_TOPO_ROLE_SENDER;
    }
    if (n == 0 || n > 64)
        return;
    dc_tree_t *tree = NULL;
    dc_status_t st = dc_tree_plan(t, NULL, &tree);
    if (st != DC_OK) {
        failed_cleanly(st);
        return;
    }
    CHECK(dc_tree_stream_count(tree) >= 1 || senders == 0);
    for (uint32_t i = 0; i < n; i++) {
        dc_topo_node_info_t ni;
        memset(&ni, 0, sizeof(ni));
        ni.size = sizeof(ni);
        CHECK(dc_topo_node(t, i, &ni) == DC_OK);
        if (ni.role == DC_TOPO_ROLE_SENDER)
            continue;
        dc_tree_t *t2 = NULL;
        uint32_t changed = 0;
        st = dc_tree_replan(tree, i, &t2, &changed);
        if (st == DC_OK)
            dc_tree_free(t2);
        else
            failed_cleanly(st);
    }
    dc_tree_free(tree);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0] % 3;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (mode == 0) {
        dc_topo_t *t = NULL;
        dc_status_t st = dc_topo_parse(text, len, "fuzz.yaml", &t);
        if (st != DC_OK) {
            failed_cleanly(st);
            CHECK(t == NULL);
            return 0;
        }
        fuzz_accepted++;
        topo_checks(t);
        dc_topo_free(t);
        return 0;
    }
    /* the string forms are NUL-terminated: an exact-size copy */
    char *s = malloc(len + 1);
    CHECK(s);
    memcpy(s, text, len);
    s[len] = 0;
    if (mode == 1) {
        char **hosts = NULL;
        size_t n = 0;
        dc_status_t st = dc_slurm_expand(s, &hosts, &n);
        if (st == DC_OK) {
            fuzz_accepted++;
            for (size_t i = 0; i < n; i++)
                CHECK(hosts[i] != NULL);
            dc_slurm_hosts_free(hosts, n);
            if (n <= 4096) {
                dc_topo_t *t = NULL;
                /* text after a NUL, if any: the region map (globs) */
                size_t nl = strlen(s);
                const char *map = nl < len ? s + nl + 1 : NULL;
                st = dc_topo_from_slurm(s, map, 1, 0, 0, &t);
                if (st == DC_OK) {
                    topo_checks(t);
                    dc_topo_free(t);
                } else {
                    failed_cleanly(st);
                }
            }
        } else {
            failed_cleanly(st);
        }
    } else {
        uint64_t v;
        double d;
        dc_status_t st;
        if ((st = dc_parse_size(s, &v)) != DC_OK)
            failed_cleanly(st);
        if ((st = dc_parse_rate(s, &d)) != DC_OK)
            failed_cleanly(st);
        else
            CHECK(d >= 0);
        if ((st = dc_parse_duration(s, &d)) != DC_OK)
            failed_cleanly(st);
        else
            CHECK(d >= 0);
        /* R:N up to R*N = 1e7 is a valid request that takes seconds to
         * build: left to the tests, not repeated per fuzz input */
        char *e1 = NULL, *e2 = NULL;
        unsigned long r = strtoul(s, &e1, 10), nn = *e1 == ':' ? strtoul(e1 + 1, &e2, 10) : 0;
        if ((double)r * (double)nn > 1e5)
            goto out;
        dc_topo_t *t = NULL;
        if ((st = dc_topo_synthetic_parse(s, &t)) == DC_OK) {
            fuzz_accepted++;
            if (dc_topo_node_count(t) <= 64)
                topo_checks(t);
            dc_topo_free(t);
        } else {
            failed_cleanly(st);
        }
    }
out:
    free(s);
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x2545f4914f6cdd1dULL
#include "replay.h"

/* One deterministic mutation (byte 0, the target, is kept): flip, set to a
 * syntax character or a digit, insert, delete, truncate, or repeat a span. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    if (len < 2)
        return len;
    size_t at = 1 + (size_t)(rng() % (len - 1));
    static const char toks[] = "{}[],:-#'\" \n\t0123456789.eEkKmMgGbitsx";
    switch (rng() % 6) {
    case 0: b[at] ^= (uint8_t)(1u << (rng() % 8)); break;
    case 1: b[at] = (uint8_t)toks[rng() % (sizeof(toks) - 1)]; break;
    case 2:
        if (len < cap) {
            memmove(b + at + 1, b + at, len - at);
            b[at] = (uint8_t)toks[rng() % (sizeof(toks) - 1)];
            len++;
        }
        break;
    case 3:
        memmove(b + at, b + at + 1, len - at - 1);
        len--;
        break;
    case 4: len = at; break;
    default: { /* repeat a span (deep nesting, long lists) */
        size_t n = 1 + (size_t)(rng() % 16);
        if (at + n <= len && len + n <= cap) {
            memmove(b + at + n, b + at, len - at);
            len += n;
        }
        break;
    }
    }
    return len;
}

int main(int argc, char **argv)
{
    return dc_fuzz_main(argc, argv, 256, 4, mutate, "accepted");
}
#endif
