/* test_api.c - the public refit API: a receiver whose weights live in the
 * caller's memory (each tensor split over two buffers by its placement
 * map), refitted in-process by dc_refit_node_run() alongside `deltacast
 * node` processes; bytes compared with the trainer's checkpoint. */
#include "api_util.h"

#include "deltacast.h"
#include "engine/layout.h"
#include "kernels/kern_cuda.h"
#include "kernels/safetensors.h"

#include <pthread.h>
#include "topology/topo.h"

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(api, .fini = fini, .timeout = 120);

/* --- the size rule and the transport field (0.2), no processes ----------- */

/* A 0.2 config a 0.1 caller would have built: size up to chunk_size. */
#define CFG_V1_SIZE offsetof(dc_refit_node_opts_t, memory)

static void rule_cfg(dc_refit_node_opts_t *cfg, dc_topo_t *topo, char *sd)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    cfg->topo = topo;
    cfg->rank = 99; /* not a node: the run stops right after the config checks */
    cfg->state_dir = sd;
    cfg->weights_path = "/nonexistent";
}

Test(api, older_smaller_config_is_accepted_and_defaulted)
{
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 2, 7300, &topo), DC_OK);
    char sd[] = "/tmp/dc-api-rule";
    dc_refit_node_opts_t cfg;
    rule_cfg(&cfg, topo, sd);
    cfg.memory = 77;           /* past a 0.1 caller's struct: never read */
    cfg.transport = "bogus";
    cfg.size = CFG_V1_SIZE;
    cr_assert_eq(dc_refit_node_run(&cfg), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "rank 99"), "%s", dc_last_error());
    /* the same fields seen by a 0.2 caller's size are checked */
    cfg.size = sizeof(cfg);
    cr_assert_eq(dc_refit_node_run(&cfg), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "memory 77"), "%s", dc_last_error());
    cfg.memory = DC_REFIT_MEM_HOST;
    cr_assert_eq(dc_refit_node_run(&cfg), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "transport 'bogus'"), "%s", dc_last_error());
    cfg.transport = "tcp";
    cr_assert_eq(dc_refit_node_run(&cfg), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "rank 99"), "%s", dc_last_error());
    /* sender_ranges: a 0.1 struct works as well */
    dc_refit_tensor_t t = {"w", "BF16", 1000};
    rule_cfg(&cfg, topo, sd);
    cfg.rank = 0;
    cfg.weights_path = NULL;
    cfg.tensors = &t;
    cfg.n_tensors = 1;
    cfg.chunk_size = 512;
    cfg.size = CFG_V1_SIZE;
    cfg.memory = 77;
    dc_refit_segment_t seg[4];
    size_t n = 0;
    cr_assert_eq(dc_refit_sender_ranges(&cfg, seg, 4, &n), DC_OK, "%s", dc_last_error());
    cr_assert_eq(n, 1);
    cr_assert_eq(seg[0].length, 2000);
    /* size not set: refused */
    cfg.size = 0;
    cr_assert_eq(dc_refit_sender_ranges(&cfg, seg, 4, &n), DC_ERR_INVALID);
    cr_assert_eq(dc_refit_node_run(&cfg), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "size"), "%s", dc_last_error());
    dc_topo_free(topo);
}

Test(api, newer_larger_config_needs_a_zero_tail)
{
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 2, 7300, &topo), DC_OK);
    char sd[] = "/tmp/dc-api-rule";
    struct {
        dc_refit_node_opts_t cfg;
        uint64_t future[2]; /* fields of a later version */
    } big;
    memset(&big, 0, sizeof(big));
    rule_cfg(&big.cfg, topo, sd);
    big.cfg.size = sizeof(big);
    cr_assert_eq(dc_refit_node_run(&big.cfg), DC_ERR_INVALID); /* accepted: on to rank */
    cr_assert(strstr(dc_last_error(), "rank 99"), "%s", dc_last_error());
    big.future[1] = 1;
    cr_assert_eq(dc_refit_node_run(&big.cfg), DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "newer"), "%s", dc_last_error());
    dc_refit_sender_t *s = (dc_refit_sender_t *)&big;
    cr_assert_eq(dc_refit_sender_open(&big.cfg, &s), DC_ERR_UNSUPPORTED);
    cr_assert_null(s);
    size_t n = 5;
    cr_assert_eq(dc_refit_sender_ranges(&big.cfg, NULL, 0, &n), DC_ERR_UNSUPPORTED);
    cr_assert_eq(n, 0);

    /* the same rule for the other growing structs */
    struct {
        dc_tree_opts_t o;
        uint64_t future;
    } to;
    memset(&to, 0, sizeof(to));
    to.o.size = sizeof(to);
    dc_tree_t *tree = NULL;
    cr_assert_eq(dc_tree_plan(topo, &to.o, &tree), DC_OK, "%s", dc_last_error());
    dc_tree_free(tree);
    to.future = 3;
    cr_assert_eq(dc_tree_plan(topo, &to.o, &tree), DC_ERR_UNSUPPORTED);
    struct {
        dc_topo_node_info_t i;
        uint64_t future;
    } ti;
    memset(&ti, 0, sizeof(ti));
    ti.i.size = sizeof(ti);
    cr_assert_eq(dc_topo_node(topo, 0, &ti.i), DC_OK, "%s", dc_last_error());
    cr_assert_eq(ti.i.size, sizeof(ti.i)); /* what the library filled */
    ti.i.size = sizeof(ti);
    ti.future = 1;
    cr_assert_eq(dc_topo_node(topo, 0, &ti.i), DC_ERR_UNSUPPORTED);
    dc_topo_node_info_t small = {.size = 8};
    cr_assert_eq(dc_topo_node(topo, 0, &small), DC_ERR_INVALID);
    dc_topo_free(topo);
}

Test(api, older_sim_params_are_defaulted)
{
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 2, 7300, &topo), DC_OK);
    dc_tree_t *tree = NULL;
    cr_assert_eq(dc_tree_plan(topo, NULL, &tree), DC_OK);
    dc_sim_opts_t p = {.size = offsetof(dc_sim_opts_t, cpu_cores), .params = 1000000,
                         .cpu_cores = -5 /* past an old caller's struct: never read */};
    dc_sim_result_t r = {.size = sizeof(r)};
    cr_assert_eq(dc_sim_run(tree, &p, &r), DC_OK, "%s", dc_last_error());
    p.size = sizeof(p);
    cr_assert_eq(dc_sim_run(tree, &p, &r), DC_ERR_INVALID);
    dc_tree_free(tree);
    dc_topo_free(topo);
}

Test(api, version_matches_the_header)
{
    char want[32];
    snprintf(want, sizeof(want), "%d.%d.%d", DC_VERSION_MAJOR, DC_VERSION_MINOR,
             DC_VERSION_PATCH);
    cr_assert_str_eq(dc_version_string(), want);
    cr_assert_str_eq(dc_version_string(), "0.2.1");
}

Test(api, memory_receiver_with_placement_map)
{
    job_init(&J, 1, 2, "2e5", 2, "optimizer");
    int me = 2; /* this process is node 2 */
    char p[256];
    snprintf(p, sizeof(p), "%s/ver/v0.safetensors", J.dir);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK);
    size_t nt = dc_st_count(f);
    dc_refit_tensor_t *tens = calloc(nt, sizeof(*tens));
    dc_refit_segment_t *segs = calloc(2 * nt, sizeof(*segs));
    uint8_t **bufs = calloc(2 * nt, sizeof(*bufs));
    size_t ns = 0;
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        tens[i] = (dc_refit_tensor_t){t->name, dc_dtype_name(t->dtype), t->nelems};
        uint64_t len = t->end - t->begin, half = len / 3;
        const uint8_t *src = dc_st_data(f, t);
        uint64_t parts[2][2] = {{0, half}, {half, len - half}};
        for (int k = 0; k < 2; k++) {
            if (parts[k][1] == 0)
                continue;
            bufs[ns] = malloc(parts[k][1]);
            memcpy(bufs[ns], src + parts[k][0], parts[k][1]);
            segs[ns] = (dc_refit_segment_t){t->name, parts[k][0], parts[k][1], bufs[ns]};
            ns++;
        }
    }
    job_start(&J, 0, NULL, NULL);
    job_start(&J, 1, NULL, NULL);
    job_api_env(&J);
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 2, (uint16_t)J.port, &topo), DC_OK);
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/%d", J.dir, me);
    dc_refit_node_opts_t cfg;
    job_node_opts(&cfg, topo, (uint32_t)me, sd, tens, nt);
    cfg.segments = segs;
    cfg.n_segments = ns;
    /* the node's transport is its config field: this process's config key
     * names no transport at all (the other nodes take tcp from the
     * environment) */
    cr_assert_eq(dc_config_set("transport", "bogus"), DC_OK);
    cfg.transport = "tcp";
    dc_status_t st = dc_refit_node_run(&cfg);
    if (st != DC_OK)
        job_dump_logs(&J);
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert_eq(job_wait(&J, 0, 30), 0);
    /* compare memory with v2 */
    snprintf(p, sizeof(p), "%s/ver/v2.safetensors", J.dir);
    dc_st_file_t *g;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &g), DC_OK);
    size_t k = 0;
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(g, i);
        const uint8_t *want = dc_st_data(g, t);
        for (; k < ns && strcmp(segs[k].tensor, t->name) == 0; k++)
            cr_assert(memcmp(segs[k].ptr, want + segs[k].offset, segs[k].length) == 0,
                      "tensor %s differs at segment %zu", t->name, k);
    }
    cr_assert_eq(k, ns);
    uint64_t v = 0, b = 0;
    uint8_t d[16];
    snprintf(sd, sizeof(sd), "%s/state/0", J.dir);
    cr_assert_eq(dc_refit_committed(sd, &v, &b, d), DC_OK);
    cr_assert_eq(v, 2);
    cr_assert_eq(b, 1);
    cr_assert(job_exact(&J, 1, 2), "receiver 1 not exact"); /* node 2 is this process */
    dc_st_close(g);
    dc_st_close(f);
    dc_topo_free(topo);
    for (size_t i = 0; i < ns; i++)
        free(bufs[i]);
    free(bufs);
    free(segs);
    free(tens);
}

/* The trainer's weights of version v, in its own buffers: each tensor in
 * two pieces (a third, the rest) as an FSDP-like layout would hold it. */
typedef struct trainer {
    dc_st_file_t *f;
    size_t nt, ns;
    dc_refit_tensor_t *tens;
    dc_refit_segment_t *segs;
} trainer_t;

/* Each segment's buffer takes its bytes of checkpoint f. */
static void segs_fill(const dc_st_file_t *f, const dc_refit_segment_t *segs, size_t ns)
{
    for (size_t k = 0; k < ns; k++) {
        size_t i = 0;
        while (strcmp(dc_st_tensor(f, i)->name, segs[k].tensor) != 0)
            i++;
        memcpy(segs[k].ptr, dc_st_data(f, dc_st_tensor(f, i)) + segs[k].offset,
               segs[k].length);
    }
}

static void trainer_load(trainer_t *tr, int v)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/ver/v%d.safetensors", J.dir, v);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK, "%s", dc_last_error());
    if (!tr->segs) {
        tr->nt = dc_st_count(f);
        tr->tens = calloc(tr->nt, sizeof(*tr->tens));
        tr->segs = calloc(2 * tr->nt, sizeof(*tr->segs));
        for (size_t i = 0; i < tr->nt; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(f, i);
            tr->tens[i] = (dc_refit_tensor_t){strdup(t->name), dc_dtype_name(t->dtype),
                                              t->nelems};
            uint64_t len = t->end - t->begin, third = len / 3;
            uint64_t parts[2][2] = {{0, third}, {third, len - third}};
            for (int k = 0; k < 2; k++)
                if (parts[k][1])
                    tr->segs[tr->ns++] = (dc_refit_segment_t){tr->tens[i].name, parts[k][0],
                                                              parts[k][1],
                                                              malloc(parts[k][1])};
        }
    }
    /* the optimizer step: the same buffers take the new values in place */
    segs_fill(f, tr->segs, tr->ns);
    dc_st_close(f);
}

static void trainer_free(trainer_t *tr)
{
    for (size_t k = 0; k < tr->ns; k++)
        free(tr->segs[k].ptr);
    for (size_t i = 0; i < tr->nt; i++)
        free((char *)tr->tens[i].name);
    free(tr->segs);
    free(tr->tens);
}

/* A job of regions x per receivers whose node 0 is this process's trainer
 * (tr holds v0); cfg is set up for a memory sender on tr's buffers, its
 * state in sd. */
typedef struct trainer_job {
    trainer_t tr;
    dc_topo_t *topo;
    char sd[256];
    dc_refit_node_opts_t cfg;
} trainer_job_t;

static void trainer_job_init(trainer_job_t *t, int regions, int per, const char *params,
                             int versions)
{
    memset(t, 0, sizeof(*t));
    job_init(&J, regions, per, params, versions, "optimizer");
    trainer_load(&t->tr, 0);
    job_api_env(&J);
    cr_assert_eq(dc_topo_synthetic_local((uint32_t)regions, (uint32_t)per, (uint16_t)J.port,
                                         &t->topo),
                 DC_OK);
    snprintf(t->sd, sizeof(t->sd), "%s/state/0", J.dir);
    dc_refit_node_opts_t *cfg = &t->cfg;
    job_node_opts(cfg, t->topo, 0, t->sd, t->tr.tens, t->tr.nt);
    cfg->segments = t->tr.segs;
    cfg->n_segments = t->tr.ns;
    cfg->wait_ms = 20000;
}

static void trainer_job_fini(trainer_job_t *t)
{
    trainer_free(&t->tr);
    dc_topo_free(t->topo);
}

/* A trainer embedding the library: the sender's versions come from its
 * memory (dc_refit_sender_push), receivers are `deltacast node` processes
 * in two regions.  Three versions, pushed in place and then from other
 * buffers; a bad push fails alone; every receiver byte-exact after each. */
Test(api, memory_sender_pushes_versions)
{
    trainer_job_t T;
    trainer_job_init(&T, 2, 1, "2e5", 3);
    trainer_t *tr = &T.tr;
    dc_refit_node_opts_t cfg = T.cfg;
    dc_refit_sender_t *s = NULL;
    /* a sender from memory takes its versions from push, not a directory */
    cfg.versions_dir = J.dir;
    cr_assert_eq(dc_refit_sender_open(&cfg, &s), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "versions_dir"), "%s", dc_last_error());
    cfg.versions_dir = NULL;
    /* the transport field, copied by open: the config key is no transport */
    char tcp[] = "tcp";
    cfg.transport = tcp;
    cr_assert_eq(dc_config_set("transport", "bogus"), DC_OK);
    cr_assert_eq(dc_refit_sender_open(&cfg, &s), DC_OK, "%s", dc_last_error());
    tcp[0] = 'X';
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, NULL);
    for (int v = 1; v <= 2; v++) {
        trainer_load(tr, v);
        dc_refit_version_stats_t vs = {.size = sizeof(vs)};
        dc_status_t st = dc_refit_sender_push(s, NULL, 0, &vs);
        if (st != DC_OK)
            job_dump_logs(&J);
        cr_assert_eq(st, DC_OK, "push v%d: %s", v, dc_last_error());
        cr_assert_eq(vs.version, (uint64_t)v);
        cr_assert(vs.payload_bytes > 0 && vs.payload_bytes < vs.dense_bytes / 4,
                  "v%d sent %llu of %llu bytes", v, (unsigned long long)vs.payload_bytes,
                  (unsigned long long)vs.dense_bytes);
        cr_assert(vs.seconds > 0);
        /* the delta is against the last committed version: nothing to
         * repair (a stale baseline would show as digest failures repaired
         * with overwrites) */
        cr_assert_eq(vs.repair_bytes, 0, "v%d needed %llu repair bytes", v,
                     (unsigned long long)vs.repair_bytes);
        job_expect_all_exact(&J, v);
        if (v == 1) {
            /* a placement that leaves a tensor's bytes uncovered: refused
             * before the job sees it */
            cr_assert_eq(dc_refit_sender_push(s, tr->segs, tr->ns - 1, NULL), DC_ERR_INVALID);
            cr_assert(strstr(dc_last_error(), "segments"), "%s", dc_last_error());
        }
    }
    /* v3 from other buffers: one contiguous copy per tensor */
    char p[256];
    snprintf(p, sizeof(p), "%s/ver/v3.safetensors", J.dir);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK);
    dc_refit_segment_t *one = calloc(tr->nt, sizeof(*one));
    for (size_t i = 0; i < tr->nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        uint64_t len = t->end - t->begin;
        one[i] = (dc_refit_segment_t){tr->tens[i].name, 0, len, malloc(len ? len : 1)};
        memcpy(one[i].ptr, dc_st_data(f, t), len);
    }
    dc_st_close(f);
    dc_refit_version_stats_t vs = {.size = sizeof(vs)};
    cr_assert_eq(dc_refit_sender_push(s, one, tr->nt, &vs), DC_OK, "%s", dc_last_error());
    cr_assert_eq(vs.version, 3);
    cr_assert_eq(vs.repair_bytes, 0);
    job_expect_all_exact(&J, 3);
    cr_assert_eq(dc_refit_sender_close(s), DC_OK, "%s", dc_last_error());
    for (int i = 1; i <= 2; i++)
        cr_assert_eq(job_wait(&J, i, 20), 0, "receiver %d did not end cleanly", i);
    uint64_t v = 0, b = 0;
    uint8_t d[16];
    cr_assert_eq(dc_refit_committed(T.sd, &v, &b, d), DC_OK);
    cr_assert_eq(v, 3);
    cr_assert_eq(b, 2);
    for (size_t i = 0; i < tr->nt; i++)
        free(one[i].ptr);
    free(one);
    trainer_job_fini(&T);
}

/* A receiver lost before a push: the version is aborted (push says
 * DC_ERR_CANCELED), the other receiver is back at the baseline, byte-exact,
 * and the sender refuses further pushes with the same reason. */
Test(api, memory_sender_abort_is_reported)
{
    trainer_job_t T;
    trainer_job_init(&T, 1, 2, "1e5", 2);
    trainer_t *tr = &T.tr;
    dc_refit_node_opts_t cfg = T.cfg;
    cfg.abort_ms = 1500;
    dc_refit_sender_t *s = NULL;
    cr_assert_eq(dc_refit_sender_open(&cfg, &s), DC_OK, "%s", dc_last_error());
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, NULL);
    trainer_load(tr, 1);
    cr_assert_eq(dc_refit_sender_push(s, NULL, 0, NULL), DC_OK, "%s", dc_last_error());
    job_expect_all_exact(&J, 1);
    job_kill(&J, 2);
    trainer_load(tr, 2);
    cr_assert_eq(dc_refit_sender_push(s, NULL, 0, NULL), DC_ERR_CANCELED, "%s",
                 dc_last_error());
    cr_assert(strstr(dc_last_error(), "aborted"), "%s", dc_last_error());
    cr_assert_eq(dc_refit_sender_push(s, NULL, 0, NULL), DC_ERR_CANCELED);
    cr_assert_eq(dc_refit_sender_close(s), DC_ERR_CANCELED);
    cr_assert_eq(job_wait(&J, 1, 20), 0, "receiver 1 did not end cleanly");
    cr_assert(job_exact(&J, 1, 1), "receiver 1 is not back at the baseline v1");
    uint64_t v = 0;
    cr_assert_eq(dc_refit_committed(T.sd, &v, NULL, NULL), DC_OK);
    cr_assert_eq(v, 1);
    trainer_job_fini(&T);
}

/* The name of the first tensor where checkpoints a and b differ (name,
 * dtype or element count; "" when one is a prefix of the other) into out. */
static void first_differing_tensor(const char *a, const char *b, char *out, size_t len)
{
    dc_st_file_t *fa, *fb;
    cr_assert_eq(dc_st_open(a, DC_ST_READ, &fa), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_open(b, DC_ST_READ, &fb), DC_OK, "%s", dc_last_error());
    dc_layout_t *la = NULL, *lb = NULL;
    cr_assert_eq(dc_layout_from_st(fa, 65536, &la), DC_OK);
    cr_assert_eq(dc_layout_from_st(fb, 65536, &lb), DC_OK);
    out[0] = 0;
    for (uint32_t i = 0; i < la->ntensors && i < lb->ntensors; i++) {
        const dc_layout_tensor_t *x = &la->tensors[i], *y = &lb->tensors[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->nelems != y->nelems) {
            snprintf(out, len, "%s", x->name);
            break;
        }
    }
    dc_layout_free(la);
    dc_layout_free(lb);
    dc_st_close(fa);
    dc_st_close(fb);
}

/* Receiver 2 holds another model (other shapes): it tells the coordinator
 * at the version's BEGIN, and push() fails at once (not after abort_ms,
 * 60 s here) naming the node and the first tensor that differs, with the
 * root's name, dtype and size; receiver 1 rolls back to v0.  Before, push
 * waited abort_ms and said "a receiver was lost". */
Test(api, memory_sender_layout_mismatch_fails_push_fast)
{
    trainer_job_t T;
    trainer_job_init(&T, 1, 2, "1e5", 1);
    cr_assert_eq(job_sh("'%s' gen --params 7e4 --change-rate 0.02 --model optimizer --threads 1 -o %s/other "
                        ">/dev/null && cp %s/other/base.safetensors %s/w2.st",
                        job_bin(), J.dir, J.dir, J.dir),
                 0);
    char v0[256], w2[256], name[256];
    snprintf(v0, sizeof(v0), "%s/ver/v0.safetensors", J.dir);
    snprintf(w2, sizeof(w2), "%s/w2.st", J.dir);
    first_differing_tensor(v0, w2, name, sizeof(name));
    cr_assert(name[0], "the two checkpoints do not differ in a common tensor");
    trainer_t *tr = &T.tr;
    dc_refit_node_opts_t cfg = T.cfg;
    cfg.abort_ms = 60000;
    dc_refit_sender_t *s = NULL;
    cr_assert_eq(dc_refit_sender_open(&cfg, &s), DC_OK, "%s", dc_last_error());
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, NULL);
    trainer_load(tr, 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dc_status_t st = dc_refit_sender_push(s, NULL, 0, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    char why[2048];
    snprintf(why, sizeof(why), "%s", dc_last_error());
    if (st != DC_ERR_INVALID)
        job_dump_logs(&J);
    cr_assert_eq(st, DC_ERR_INVALID, "push: %d %s", st, why);
    fprintf(stderr, "layout mismatch: push failed after %.2f s: %s\n", secs, why);
    cr_assert(secs < 15, "push took %.1f s to fail", secs);
    cr_assert(strstr(why, "node 2 ("), "%s", why);
    cr_assert(strstr(why, "127.0.0.1:"), "%s", why);
    cr_assert(strstr(why, "layout mismatch"), "%s", why);
    char q[300];
    snprintf(q, sizeof(q), "'%s' ", name);
    cr_assert(strstr(why, q), "does not name tensor %s: %s", q, why);
    cr_assert(strstr(why, "elements"), "%s", why);
    dc_refit_sender_close(s);
    cr_assert_eq(job_wait(&J, 2, 20), 1, "receiver 2 should fail");
    cr_assert_eq(job_sh("grep -q 'layout mismatch with the root' %s/log2", J.dir), 0);
    job_wait(&J, 1, 20);
    cr_assert(job_exact(&J, 1, 0), "receiver 1 is not back at v0");
    trainer_job_fini(&T);
}

/* A receiver that cannot start (its weights file missing): it tells the
 * root before it joins (engine/early.c), and the sender handle's push()
 * fails within 5 s, with wait_ms a minute, naming node 2, its address and
 * the file.  Before, push waited out wait_ms and named only the node. */
Test(api, memory_sender_receiver_that_cannot_start_fails_push_fast)
{
    trainer_job_t T;
    trainer_job_init(&T, 1, 2, "1e5", 1);
    cr_assert_eq(job_sh("rm %s/w2.st", J.dir), 0);
    trainer_t *tr = &T.tr;
    dc_refit_node_opts_t cfg = T.cfg;
    cfg.wait_ms = 60000;
    dc_refit_sender_t *s = NULL;
    cr_assert_eq(dc_refit_sender_open(&cfg, &s), DC_OK, "%s", dc_last_error());
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, NULL);
    trainer_load(tr, 1);
    dc_status_t st = dc_refit_sender_push(s, NULL, 0, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    char why[2048];
    snprintf(why, sizeof(why), "%s", dc_last_error());
    if (st == DC_OK || secs >= 5)
        job_dump_logs(&J);
    cr_assert_neq(st, DC_OK, "push succeeded without receiver 2");
    fprintf(stderr, "receiver that cannot start: push failed after %.2f s: %s\n", secs, why);
    cr_assert(secs < 5, "push took %.1f s to fail", secs);
    cr_assert(strstr(why, "node 2 ("), "%s", why);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", J.port + 2);
    cr_assert(strstr(why, addr), "%s", why);
    cr_assert(strstr(why, "could not start"), "%s", why);
    cr_assert(strstr(why, "w2.st"), "%s", why);
    dc_refit_sender_close(s);
    cr_assert_eq(job_wait(&J, 2, 20), 1, "receiver 2 should fail");
    job_wait(&J, 1, 20);
    cr_assert(job_exact(&J, 1, 0), "receiver 1 is not at v0");
    trainer_job_fini(&T);
}

typedef struct rx_thread {
    dc_refit_node_opts_t cfg;
    dc_status_t st;
    char why[512];
} rx_thread_t;

static void *rx_main(void *arg)
{
    rx_thread_t *r = arg;
    r->st = dc_refit_node_run(&r->cfg);
    snprintf(r->why, sizeof(r->why), "%s", dc_last_error());
    return NULL;
}

/* Weights in GPU memory: a sender (dc_refit_sender_*) and a receiver
 * (dc_refit_node_run on a thread) whose segments are CUDA device memory,
 * beside a receiver process on a file.  Without a GPU both are refused
 * with the reason, and the transfer part is skipped. */
Test(api, cuda_memory_sender_and_receiver)
{
    trainer_job_t T;
    trainer_job_init(&T, 1, 2, "1e5", 1);
    trainer_t *tr = &T.tr;
    dc_refit_node_opts_t cfg = T.cfg;
    char rd[256];
    snprintf(rd, sizeof(rd), "%s/state/2", J.dir);
    cfg.memory = DC_REFIT_MEM_CUDA;
    rx_thread_t rx;
    memset(&rx, 0, sizeof(rx));
    rx.cfg = cfg;
    rx.cfg.rank = 2;
    rx.cfg.state_dir = rd;
    dc_refit_sender_t *s = NULL;
    if (!dc_kern_cuda_available()) {
        cfg.segments = tr->segs;
        cr_assert_eq(dc_refit_sender_open(&cfg, &s), DC_ERR_UNSUPPORTED);
        cr_assert(strstr(dc_last_error(), "CUDA"), "%s", dc_last_error());
        rx.cfg.segments = tr->segs;
        cr_assert_eq(dc_refit_node_run(&rx.cfg), DC_ERR_UNSUPPORTED);
        cr_assert(strstr(dc_last_error(), "CUDA"), "%s", dc_last_error());
        trainer_job_fini(&T);
        cr_skip_test("no usable GPU (%s): device-memory refit not run",
                     DC_HAVE_CUDA ? "no CUDA driver or device" : "built without nvcc");
    }
    /* device copies of v0: the trainer's and receiver 2's */
    dc_refit_segment_t *ds = calloc(tr->ns, sizeof(*ds)), *dr = calloc(tr->ns, sizeof(*dr));
    for (size_t k = 0; k < tr->ns; k++) {
        ds[k] = dr[k] = tr->segs[k];
        cr_assert_eq(dc_kern_cuda_malloc(&ds[k].ptr, tr->segs[k].length), DC_OK);
        cr_assert_eq(dc_kern_cuda_malloc(&dr[k].ptr, tr->segs[k].length), DC_OK);
        cr_assert_eq(dc_kern_cuda_h2d(ds[k].ptr, tr->segs[k].ptr, tr->segs[k].length), DC_OK);
        cr_assert_eq(dc_kern_cuda_h2d(dr[k].ptr, tr->segs[k].ptr, tr->segs[k].length), DC_OK);
    }
    cfg.segments = ds;
    cr_assert_eq(dc_refit_sender_open(&cfg, &s), DC_OK, "%s", dc_last_error());
    job_start(&J, 1, NULL, NULL);
    rx.cfg.segments = dr;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, rx_main, &rx), 0);
    trainer_load(tr, 1);
    for (size_t k = 0; k < tr->ns; k++)
        cr_assert_eq(dc_kern_cuda_h2d(ds[k].ptr, tr->segs[k].ptr, tr->segs[k].length), DC_OK);
    dc_refit_version_stats_t vs = {.size = sizeof(vs)};
    dc_status_t st = dc_refit_sender_push(s, NULL, 0, &vs);
    if (st != DC_OK)
        job_dump_logs(&J);
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert_eq(vs.repair_bytes, 0);
    cr_assert(job_exact(&J, 1, 1), "receiver 1 (file) is not v1");
    cr_assert_eq(dc_refit_sender_close(s), DC_OK, "%s", dc_last_error());
    pthread_join(th, NULL);
    cr_assert_eq(rx.st, DC_OK, "device receiver: %s", rx.why);
    for (size_t k = 0; k < tr->ns; k++) {
        uint8_t *back = malloc(tr->segs[k].length);
        cr_assert_eq(dc_kern_cuda_d2h(back, dr[k].ptr, tr->segs[k].length), DC_OK);
        cr_assert(memcmp(back, tr->segs[k].ptr, tr->segs[k].length) == 0,
                  "device receiver segment %zu is not v1", k);
        free(back);
        dc_kern_cuda_free(ds[k].ptr);
        dc_kern_cuda_free(dr[k].ptr);
    }
    cr_assert_eq(job_wait(&J, 1, 20), 0);
    free(ds);
    free(dr);
    trainer_job_fini(&T);
}

/* `deltacast node --from-memory`: node 0 as a trainer embedding the
 * library (each vN read into the same buffers, pushed); three versions,
 * every receiver byte-exact, commit record at v3. */
Test(api, cli_node_from_memory)
{
    job_init(&J, 2, 1, "2e5", 3, "inject");
    job_start_all(&J, "--from-memory");
    int rc = job_wait(&J, 0, 90);
    if (rc != 0)
        job_dump_logs(&J);
    cr_assert_eq(rc, 0, "trainer exit %d", rc);
    for (int i = 1; i < J.nnodes; i++)
        cr_assert_eq(job_wait(&J, i, 20), 0, "receiver %d", i);
    job_expect_all_exact(&J, 3);
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/0", J.dir);
    uint64_t v = 0;
    cr_assert_eq(dc_refit_committed(sd, &v, NULL, NULL), DC_OK);
    cr_assert_eq(v, 3);
    /* the stats the library's sender wrote: one entry per version */
    char sp[256];
    snprintf(sp, sizeof(sp), "%s/stats.json", J.dir);
    FILE *f = fopen(sp, "r");
    cr_assert_not_null(f, "no stats.json");
    char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    cr_assert(strstr(buf, "\"version\": 3") || strstr(buf, "\"version\":3"), "%s", buf);
}

/* --- trainer shards sending from memory ---------------------------------- */

typedef struct shard {
    dc_refit_node_opts_t cfg;
    char sd[256];
    dc_refit_segment_t *segs; /* its ranges, with buffers */
    size_t ns;
    dc_refit_sender_t *s;
    dc_refit_version_stats_t vs;
    dc_status_t st;
    char why[512];
} shard_t;

/* Shard k's ranges filled with version v's bytes. */
static void shard_load(shard_t *sh, int v)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/ver/v%d.safetensors", J.dir, v);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK);
    segs_fill(f, sh->segs, sh->ns);
    dc_st_close(f);
}

static void *shard_push(void *arg)
{
    shard_t *sh = arg;
    sh->vs = (dc_refit_version_stats_t){.size = sizeof(sh->vs)};
    sh->st = dc_refit_sender_push(sh->s, NULL, 0, &sh->vs);
    snprintf(sh->why, sizeof(sh->why), "%s", dc_last_error());
    return NULL;
}

/* Two trainer shards (ranks 0 and 1, one shard each), each holding only
 * the bytes it sends (dc_refit_sender_ranges), and 2 regions x 2
 * receivers.  crash: receiver `crash_rank` kills itself while applying the
 * last chunk (shard 1's) of v1 and is restarted: the coordinator has only
 * shard 0's memory, so shard 1's owner makes the repair. */
static void memory_shards(int crash_rank, int lose_shard)
{
    job_init(&J, 2, 2, "2e5", 3, "optimizer");
    job_use_shards(&J, 2, NULL);
    job_api_env(&J);
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_load(J.topo, &topo), DC_OK, "%s", dc_last_error());
    trainer_t all = {0};
    trainer_load(&all, 0); /* for the tensor list */
    shard_t sh[2];
    memset(sh, 0, sizeof(sh));
    uint64_t covered = 0, total = 0;
    for (size_t i = 0; i < all.ns; i++)
        total += all.segs[i].length;
    for (int k = 0; k < 2; k++) {
        snprintf(sh[k].sd, sizeof(sh[k].sd), "%s/state/%d", J.dir, k);
        dc_refit_node_opts_t *c = &sh[k].cfg;
        job_node_opts(c, topo, (uint32_t)k, sh[k].sd, all.tens, all.nt);
        c->wait_ms = 20000;
        c->abort_ms = lose_shard ? 3000 : 15000;
        size_t n = 0;
        cr_assert_eq(dc_refit_sender_ranges(c, NULL, 0, &n), DC_ERR_NOMEM);
        cr_assert(n > 0);
        sh[k].segs = calloc(n, sizeof(*sh[k].segs));
        cr_assert_eq(dc_refit_sender_ranges(c, sh[k].segs, n, &sh[k].ns), DC_OK, "%s",
                     dc_last_error());
        cr_assert_eq(sh[k].ns, n);
        for (size_t r = 0; r < n; r++) {
            sh[k].segs[r].ptr = malloc(sh[k].segs[r].length);
            covered += sh[k].segs[r].length;
        }
        shard_load(&sh[k], 0);
        c->segments = sh[k].segs;
        c->n_segments = sh[k].ns;
    }
    if (lose_shard == 2)
        sh[1].cfg.initial_version = 7; /* wrong: the job is at v0 */
    /* the two shards' ranges split the checkpoint */
    cr_assert_eq(covered, total);
    cr_assert(sh[1].segs[0].offset > 0 || strcmp(sh[1].segs[0].tensor, all.tens[0].name) != 0,
              "shard 1 starts at the first byte");
    for (int k = 0; k < 2; k++)
        cr_assert_eq(dc_refit_sender_open(&sh[k].cfg, &sh[k].s), DC_OK, "shard %d: %s", k,
                     dc_last_error());
    char crash[64];
    {
        char p[256];
        snprintf(p, sizeof(p), "%s/ver/v0.safetensors", J.dir);
        dc_st_file_t *f;
        cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK);
        dc_layout_t *l = NULL;
        cr_assert_eq(dc_layout_from_st(f, 65536, &l), DC_OK);
        snprintf(crash, sizeof(crash), "DELTACAST_ENGINE_CRASH_AT=%u", l->nchunks - 1);
        dc_layout_free(l);
        dc_st_close(f);
    }
    for (int i = 2; i < J.nnodes; i++)
        job_start(&J, i, i == crash_rank ? crash : NULL, NULL);
    if (lose_shard) {
        /* shard 1 goes away instead of pushing v1 (1), or cannot send v1
         * from the version it holds (2): only it holds its chunks, so the
         * coordinator aborts the version */
        shard_load(&sh[0], 1);
        pthread_t th, th1;
        cr_assert_eq(pthread_create(&th, NULL, shard_push, &sh[0]), 0);
        dc_status_t c1;
        if (lose_shard == 1) {
            usleep(200000);
            c1 = dc_refit_sender_close(sh[1].s);
        } else {
            shard_load(&sh[1], 1);
            cr_assert_eq(pthread_create(&th1, NULL, shard_push, &sh[1]), 0);
            pthread_join(th1, NULL);
            cr_assert_neq(sh[1].st, DC_OK);
            cr_assert(strstr(sh[1].why, "holds version 7"), "%s", sh[1].why);
            c1 = dc_refit_sender_close(sh[1].s);
        }
        pthread_join(th, NULL);
        cr_assert_eq(sh[0].st, DC_ERR_CANCELED, "coordinator: %s", sh[0].why);
        cr_assert(strstr(sh[0].why, "sender"), "%s", sh[0].why);
        cr_assert_neq(c1, DC_OK);
        cr_assert_eq(dc_refit_sender_close(sh[0].s), DC_ERR_CANCELED);
        /* receivers undo v1 (ABORT) and then give up on the lost sender */
        for (int i = 2; i < J.nnodes; i++) {
            cr_assert_neq(job_wait(&J, i, 30), -1, "receiver %d did not end", i);
            cr_assert(job_exact(&J, i, 0), "receiver %d is not back at v0", i);
        }
        goto out;
    }
    for (int v = 1; v <= 3; v++) {
        for (int k = 0; k < 2; k++)
            shard_load(&sh[k], v);
        pthread_t th[2];
        for (int k = 0; k < 2; k++)
            cr_assert_eq(pthread_create(&th[k], NULL, shard_push, &sh[k]), 0);
        if (v == 1 && crash_rank > 0) {
            /* the receiver dies mid-apply of its last chunk; restart it */
            int rc = job_wait(&J, crash_rank, 60);
            if (rc != 128 + SIGKILL)
                job_dump_logs(&J);
            cr_assert_eq(rc, 128 + SIGKILL, "receiver %d exit %d", crash_rank, rc);
            job_start(&J, crash_rank, NULL, NULL);
        }
        for (int k = 0; k < 2; k++)
            pthread_join(th[k], NULL);
        if (sh[0].st != DC_OK || sh[1].st != DC_OK)
            job_dump_logs(&J);
        cr_assert_eq(sh[0].st, DC_OK, "v%d coordinator: %s", v, sh[0].why);
        cr_assert_eq(sh[1].st, DC_OK, "v%d shard 1: %s", v, sh[1].why);
        cr_assert_eq(sh[0].vs.version, (uint64_t)v);
        /* repairs: by the owner of the chunk (shard 1's last chunk); after a
         * crash, children of the restarted node may re-attach (and be
         * re-sent what they missed) in a later version too */
        if (crash_rank > 0 && v == 1)
            cr_assert(sh[1].vs.repair_bytes > 0, "shard 1 made no repair");
        else if (crash_rank == 0)
            cr_assert_eq(sh[0].vs.repair_bytes + sh[1].vs.repair_bytes, 0,
                         "v%d: %llu + %llu repair bytes", v,
                         (unsigned long long)sh[0].vs.repair_bytes,
                         (unsigned long long)sh[1].vs.repair_bytes);
        job_expect_all_exact(&J, v);
    }
    dc_status_t c0 = dc_refit_sender_close(sh[0].s);
    cr_assert_eq(c0, DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_refit_sender_close(sh[1].s), DC_OK, "%s", dc_last_error());
    for (int i = 2; i < J.nnodes; i++)
        cr_assert_eq(job_wait(&J, i, 20), 0, "receiver %d", i);
    uint64_t v = 0;
    cr_assert_eq(dc_refit_committed(sh[0].sd, &v, NULL, NULL), DC_OK);
    cr_assert_eq(v, 3);
out:
    for (int k = 0; k < 2; k++) {
        for (size_t r = 0; r < sh[k].ns; r++)
            free(sh[k].segs[r].ptr);
        free(sh[k].segs);
    }
    trainer_free(&all);
    dc_topo_free(topo);
}

Test(api, memory_shards_send_their_own_bytes)
{
    memory_shards(0, 0);
}

Test(api, memory_shard_repairs_come_from_their_owner)
{
    memory_shards(5, 0);
}

Test(api, memory_shard_lost_aborts_the_version)
{
    memory_shards(0, 1);
}

Test(api, memory_shard_on_the_wrong_version_is_refused)
{
    memory_shards(0, 2);
}

/* `deltacast node --from-memory` on two trainer shards, run twice (v1, then
 * v2 by new processes): each shard holds only its ranges, and the second
 * run's shards resume from their own commit records. */
Test(api, cli_shards_from_memory_resume)
{
    job_init(&J, 2, 1, "2e5", 2, "optimizer");
    job_use_shards(&J, 2, NULL);
    for (int v = 1; v <= 2; v++) {
        char args[64];
        snprintf(args, sizeof(args), "--from-memory --count %d", v);
        for (int i = 0; i < J.nnodes; i++)
            job_start(&J, i, NULL, i < 2 ? args : NULL);
        for (int i = 0; i < J.nnodes; i++) {
            int rc = job_wait(&J, i, 60);
            if (rc != 0)
                job_dump_logs(&J);
            cr_assert_eq(rc, 0, "run %d: node %d exit %d", v, i, rc);
        }
        job_expect_all_exact(&J, v);
        char sd[256];
        uint64_t c = 0;
        for (int k = 0; k < 2; k++) {
            snprintf(sd, sizeof(sd), "%s/state/%d", J.dir, k);
            cr_assert_eq(dc_refit_committed(sd, &c, NULL, NULL), DC_OK, "shard %d: no record", k);
            cr_assert_eq(c, (uint64_t)v, "shard %d holds %llu", k, (unsigned long long)c);
        }
    }
}
