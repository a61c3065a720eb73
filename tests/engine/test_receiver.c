/* test_receiver.c - the receiver handle (dc_refit_receiver_*): a trainer's
 * sender handle (node 0) and a rollout engine's receiver handle (node 1)
 * in this process, over real sockets, beside `deltacast node` receivers
 * where a test needs more nodes.  Events in order, hold / staged apply
 * (the live weights stay byte-for-byte while the sender's push waits),
 * the hold bound, cancel mid-version against the journal, cold start,
 * the version after a restart. */
#include "api_util.h"

#include "deltacast.h"
#include "engine/journal.h"
#include "engine/layout.h"
#include "kernels/safetensors.h"

#include <pthread.h>

static job_t J;

static void fini(void)
{
    job_fini(&J);
    dc_config_set("hold_timeout_ms", NULL);
}

TestSuite(receiver, .fini = fini, .timeout = 120);

/* Weights in memory: each tensor in its own buffer (ns == nt). */
typedef struct weights {
    size_t nt;
    dc_refit_tensor_t *tens;
    dc_refit_segment_t *segs;
} weights_t;

static void vpath(char *p, size_t len, int v)
{
    snprintf(p, len, "%s/ver/v%d.safetensors", J.dir, v);
}

/* w takes version v's bytes (v < 0: zeros, a node that holds nothing). */
static void weights_load(weights_t *w, int v)
{
    char p[256];
    vpath(p, sizeof(p), v < 0 ? 0 : v);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK, "%s", dc_last_error());
    if (!w->segs) {
        w->nt = dc_st_count(f);
        w->tens = calloc(w->nt, sizeof(*w->tens));
        w->segs = calloc(w->nt, sizeof(*w->segs));
        for (size_t i = 0; i < w->nt; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(f, i);
            uint64_t len = t->end - t->begin;
            w->tens[i] = (dc_refit_tensor_t){strdup(t->name), dc_dtype_name(t->dtype),
                                             t->nelems};
            w->segs[i] = (dc_refit_segment_t){w->tens[i].name, 0, len, malloc(len ? len : 1)};
        }
    }
    for (size_t i = 0; i < w->nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        if (v < 0)
            memset(w->segs[i].ptr, 0, w->segs[i].length);
        else
            memcpy(w->segs[i].ptr, dc_st_data(f, t), w->segs[i].length);
    }
    dc_st_close(f);
}

/* w's bytes are exactly version v's. */
static int weights_exact(const weights_t *w, int v)
{
    char p[256];
    vpath(p, sizeof(p), v);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK, "%s", dc_last_error());
    int same = 1;
    for (size_t i = 0; i < w->nt && same; i++)
        same = memcmp(w->segs[i].ptr, dc_st_data(f, dc_st_tensor(f, i)), w->segs[i].length) == 0;
    dc_st_close(f);
    return same;
}

static void weights_free(weights_t *w)
{
    for (size_t i = 0; i < w->nt; i++) {
        free(w->segs[i].ptr);
        free((char *)w->tens[i].name);
    }
    free(w->segs);
    free(w->tens);
    memset(w, 0, sizeof(*w));
}

/* A job of 1 x per receivers: this process is node 0 (a sender handle on
 * tr) and node 1 (a receiver handle on rx); nodes 2.. are processes. */
typedef struct fixture {
    weights_t tr, rx;
    dc_topo_t *topo;
    char ssd[256], rsd[256];
    dc_refit_node_opts_t scfg, rcfg;
    dc_refit_sender_t *s;
    dc_refit_receiver_t *r;
} fixture_t;

static void fx_init(fixture_t *x, int per, int versions, int rx_version)
{
    memset(x, 0, sizeof(*x));
    job_init(&J, 1, per, "2e5", versions, "optimizer");
    weights_load(&x->tr, 0);
    weights_load(&x->rx, rx_version);
    job_api_env(&J);
    cr_assert_eq(dc_topo_synthetic_local(1, (uint32_t)per, (uint16_t)J.port, &x->topo), DC_OK);
    snprintf(x->ssd, sizeof(x->ssd), "%s/state/0", J.dir);
    snprintf(x->rsd, sizeof(x->rsd), "%s/state/1", J.dir);
    dc_refit_node_opts_t *c = &x->scfg;
    job_node_opts(c, x->topo, 0, x->ssd, x->tr.tens, x->tr.nt);
    c->segments = x->tr.segs;
    c->n_segments = x->tr.nt;
    c->wait_ms = 20000;
    x->rcfg = *c;
    c = &x->rcfg;
    c->rank = 1;
    c->state_dir = x->rsd;
    c->tensors = x->rx.tens;
    c->segments = x->rx.segs;
    c->wait_ms = 0;
    c->initial_version = rx_version < 0 ? DC_REFIT_VERSION_NONE : (uint64_t)rx_version;
}

static void fx_open(fixture_t *x)
{
    cr_assert_eq(dc_refit_sender_open(&x->scfg, &x->s), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_refit_receiver_open(&x->rcfg, &x->r), DC_OK, "%s", dc_last_error());
    for (int i = 2; i < J.nnodes; i++)
        job_start(&J, i, NULL, NULL);
}

static void fx_fini(fixture_t *x)
{
    weights_free(&x->tr);
    weights_free(&x->rx);
    dc_topo_free(x->topo);
}

/* The next event, which must be of `type` for version v. */
static dc_refit_event_t expect_event(dc_refit_receiver_t *r, uint32_t type, uint64_t v)
{
    dc_refit_event_t ev = {.size = sizeof(ev)};
    dc_status_t st = dc_refit_receiver_wait(r, 20000, &ev);
    cr_assert_eq(st, DC_OK, "no event %u for v%llu: %s", type, (unsigned long long)v,
                 dc_last_error());
    cr_assert_eq(ev.type, type, "event %u (v%llu: %s), wanted %u for v%llu", ev.type,
                 (unsigned long long)ev.version, ev.message, type, (unsigned long long)v);
    cr_assert_eq(ev.version, v, "event %u names v%llu (%s), wanted v%llu", type,
                 (unsigned long long)ev.version, ev.message, (unsigned long long)v);
    cr_assert_eq(ev.size, sizeof(ev));
    return ev;
}

/* A push on a thread of its own (it blocks until the joint commit). */
typedef struct pusher {
    dc_refit_sender_t *s;
    pthread_t th;
    volatile int done;
    dc_status_t st;
    char why[512];
} pusher_t;

static void *push_main(void *arg)
{
    pusher_t *p = arg;
    p->st = dc_refit_sender_push(p->s, NULL, 0, NULL);
    snprintf(p->why, sizeof(p->why), "%s", dc_last_error());
    __atomic_store_n(&p->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void push_start(pusher_t *p, dc_refit_sender_t *s)
{
    memset(p, 0, sizeof(*p));
    p->s = s;
    cr_assert_eq(pthread_create(&p->th, NULL, push_main, p), 0);
}

static int push_done(pusher_t *p)
{
    return __atomic_load_n(&p->done, __ATOMIC_SEQ_CST);
}

/* Three versions: BEGIN then COMMITTED for each, in order, with the
 * commit record's digest; the weights exact after each; ENDED at the BYE;
 * a receiver opened again on the state directory says it holds v3. */
Test(receiver, events_in_order_and_version_after_restart)
{
    fixture_t X;
    fx_init(&X, 1, 3, 0);
    fx_open(&X);
    uint64_t v = 99, inflight = 99;
    uint8_t d[16], rd[16];
    cr_assert_eq(dc_refit_receiver_version(X.r, &v, d, &inflight), DC_OK, "%s", dc_last_error());
    cr_assert_eq(v, 0);
    cr_assert_eq(inflight, 0);
    for (int k = 1; k <= 3; k++) {
        weights_load(&X.tr, k);
        cr_assert_eq(dc_refit_sender_push(X.s, NULL, 0, NULL), DC_OK, "v%d: %s", k,
                     dc_last_error());
        dc_refit_event_t b = expect_event(X.r, DC_REFIT_EVENT_BEGIN, (uint64_t)k);
        cr_assert_eq(b.baseline, (uint64_t)k - 1);
        cr_assert_eq(b.flags & (DC_REFIT_EVENT_F_DENSE | DC_REFIT_EVENT_F_HELD), 0, "%s",
                     b.message);
        dc_refit_event_t c = expect_event(X.r, DC_REFIT_EVENT_COMMITTED, (uint64_t)k);
        cr_assert(weights_exact(&X.rx, k), "receiver handle not byte-exact with v%d", k);
        uint64_t sv = 0;
        cr_assert_eq(dc_refit_committed(X.ssd, &sv, NULL, d), DC_OK);
        cr_assert_eq(sv, (uint64_t)k);
        cr_assert_eq(memcmp(c.digest, d, 16), 0, "v%d: event digest is not the root's", k);
        cr_assert_eq(dc_refit_receiver_version(X.r, &v, rd, &inflight), DC_OK);
        cr_assert_eq(v, (uint64_t)k);
        cr_assert_eq(inflight, 0);
        cr_assert_eq(memcmp(rd, d, 16), 0);
    }
    dc_refit_receiver_stats_t st = {.size = sizeof(st)};
    cr_assert_eq(dc_refit_receiver_stats(X.r, &st), DC_OK, "%s", dc_last_error());
    cr_assert_eq(st.versions_committed, 3);
    cr_assert_eq(st.versions_aborted, 0);
    cr_assert(st.bytes_received > 0);
    cr_assert(st.apply_s > 0);
    cr_assert_eq(st.held, 0);
    cr_assert_eq(dc_refit_sender_close(X.s), DC_OK, "%s", dc_last_error());
    dc_refit_event_t e = expect_event(X.r, DC_REFIT_EVENT_ENDED, 3);
    cr_assert_eq(e.status, DC_OK, "%s", e.message);
    dc_refit_event_t none = {.size = sizeof(none)};
    cr_assert_eq(dc_refit_receiver_wait(X.r, 100, &none), DC_ERR_NOT_FOUND);
    cr_assert_eq(dc_refit_receiver_close(X.r), DC_OK, "%s", dc_last_error());

    /* restart: the version comes from the state directory's record */
    cr_assert_eq(dc_refit_receiver_open(&X.rcfg, &X.r), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_refit_receiver_version(X.r, &v, rd, &inflight), DC_OK);
    cr_assert_eq(v, 3);
    cr_assert_eq(memcmp(rd, d, 16), 0);
    uint8_t rec[16];
    cr_assert_eq(dc_refit_committed(X.rsd, NULL, NULL, rec), DC_OK);
    cr_assert_eq(memcmp(rec, d, 16), 0, "the receiver's own record names other content");
    cr_assert_eq(dc_refit_receiver_close(X.r), DC_ERR_CANCELED); /* no job: canceled */
    fx_fini(&X);
}

/* Hold: while held, v2 is received, relayed and staged but not applied:
 * the live weights stay v1 byte-for-byte, the other receiver (a process)
 * gets v2, and the trainer's push waits, past abort_ms (the holding node
 * is alive, not silent); the staged bytes are the compact frames, not a
 * dense copy.  Release applies, checks, acks: the push returns, exact. */
Test(receiver, hold_stages_until_release)
{
    fixture_t X;
    fx_init(&X, 2, 2, 0);
    X.scfg.abort_ms = 1500;
    fx_open(&X);
    weights_load(&X.tr, 1);
    cr_assert_eq(dc_refit_sender_push(X.s, NULL, 0, NULL), DC_OK, "%s", dc_last_error());
    expect_event(X.r, DC_REFIT_EVENT_BEGIN, 1);
    expect_event(X.r, DC_REFIT_EVENT_COMMITTED, 1);
    cr_assert(weights_exact(&X.rx, 1));

    cr_assert_eq(dc_refit_receiver_hold(X.r), DC_OK);
    dc_refit_receiver_stats_t st = {.size = sizeof(st)};
    cr_assert_eq(dc_refit_receiver_stats(X.r, &st), DC_OK);
    cr_assert_eq(st.held, 1);
    weights_load(&X.tr, 2);
    pusher_t P;
    push_start(&P, X.s);
    dc_refit_event_t b = expect_event(X.r, DC_REFIT_EVENT_BEGIN, 2);
    cr_assert(b.flags & DC_REFIT_EVENT_F_HELD, "BEGIN of a held node: %s", b.message);
    cr_assert(strstr(b.message, "held"), "%s", b.message);
    /* the other receiver takes v2 in full meanwhile */
    cr_assert(job_until_sh(15000, "cmp -s %s/w2.st %s/ver/v2.safetensors", J.dir, J.dir),
              "receiver 2 did not get v2 while node 1 held it");
    uint64_t total = 0;
    for (size_t i = 0; i < X.rx.nt; i++)
        total += X.rx.segs[i].length;
    /* held for longer than the root's abort_ms (1.5 s) */
    for (int i = 0; i < 30; i++) {
        usleep(100000);
        cr_assert(!push_done(&P), "push returned while a receiver held the version: %s",
                  P.why);
        cr_assert(weights_exact(&X.rx, 1), "the live weights changed while held");
    }
    uint64_t v = 0, inflight = 0;
    cr_assert_eq(dc_refit_receiver_version(X.r, &v, NULL, &inflight), DC_OK);
    cr_assert_eq(v, 1);
    cr_assert_eq(inflight, 2);
    cr_assert_eq(dc_refit_receiver_stats(X.r, &st), DC_OK);
    cr_assert(st.staged_bytes > 0, "nothing staged");
    cr_assert(st.staged_bytes < total / 4, "staged %llu bytes of a %llu-byte model: not sparse",
              (unsigned long long)st.staged_bytes, (unsigned long long)total);

    cr_assert_eq(dc_refit_receiver_release(X.r), DC_OK);
    cr_assert(weights_exact(&X.rx, 2), "release did not apply the staged v2 exactly");
    cr_assert_eq(dc_refit_receiver_stats(X.r, &st), DC_OK);
    cr_assert_eq(st.staged_bytes, 0);
    cr_assert_eq(st.held, 0);
    pthread_join(P.th, NULL);
    cr_assert_eq(P.st, DC_OK, "push after release: %s", P.why);
    expect_event(X.r, DC_REFIT_EVENT_COMMITTED, 2);
    cr_assert(weights_exact(&X.rx, 2));
    cr_assert(job_exact(&J, 2, 2));
    cr_assert_eq(dc_refit_sender_close(X.s), DC_OK, "%s", dc_last_error());
    dc_refit_event_t e = expect_event(X.r, DC_REFIT_EVENT_ENDED, 2);
    cr_assert_eq(e.status, DC_OK, "%s", e.message);
    cr_assert_eq(dc_refit_receiver_close(X.r), DC_OK, "%s", dc_last_error());
    cr_assert_eq(job_wait(&J, 2, 20), 0);
    fx_fini(&X);
}

/* A hold past the root's hold_timeout_ms aborts the version with a reason
 * naming the holding node; nothing was applied, nothing is undone: the
 * weights are v1, byte-exact. */
Test(receiver, hold_timeout_aborts_naming_the_node)
{
    fixture_t X;
    fx_init(&X, 1, 2, 0);
    X.scfg.abort_ms = 1500;
    cr_assert_eq(dc_config_set("hold_timeout_ms", "2500"), DC_OK);
    fx_open(&X);
    weights_load(&X.tr, 1);
    cr_assert_eq(dc_refit_sender_push(X.s, NULL, 0, NULL), DC_OK, "%s", dc_last_error());
    expect_event(X.r, DC_REFIT_EVENT_BEGIN, 1);
    expect_event(X.r, DC_REFIT_EVENT_COMMITTED, 1);
    cr_assert_eq(dc_refit_receiver_hold(X.r), DC_OK);
    weights_load(&X.tr, 2);
    uint64_t t0 = dc_now_ns();
    dc_status_t st = dc_refit_sender_push(X.s, NULL, 0, NULL);
    double took = (double)(dc_now_ns() - t0) / 1e9;
    cr_assert_eq(st, DC_ERR_CANCELED, "%s", dc_last_error());
    cr_assert(strstr(dc_last_error(), "receiver 1 held it staged"), "%s", dc_last_error());
    cr_assert(strstr(dc_last_error(), "hold_timeout_ms=2500"), "%s", dc_last_error());
    cr_assert(took >= 2.5, "aborted after %.1f s, before hold_timeout_ms", took);
    expect_event(X.r, DC_REFIT_EVENT_BEGIN, 2);
    dc_refit_event_t a = expect_event(X.r, DC_REFIT_EVENT_ABORTED, 2);
    cr_assert_eq(a.baseline, 1);
    cr_assert_eq(a.flags & DC_REFIT_EVENT_F_DENSE, 0, "%s", a.message);
    cr_assert(weights_exact(&X.rx, 1), "an abort while staged changed the weights");
    uint64_t v = 0;
    cr_assert_eq(dc_refit_receiver_version(X.r, &v, NULL, NULL), DC_OK);
    cr_assert_eq(v, 1);
    dc_refit_receiver_stats_t rs = {.size = sizeof(rs)};
    cr_assert_eq(dc_refit_receiver_stats(X.r, &rs), DC_OK);
    cr_assert_eq(rs.versions_aborted, 1);
    cr_assert_eq(rs.staged_bytes, 0, "staged frames kept after the abort");
    cr_assert_eq(dc_refit_receiver_release(X.r), DC_OK);
    cr_assert(weights_exact(&X.rx, 1), "release after the abort applied something");
    dc_refit_sender_close(X.s);
    dc_refit_receiver_close(X.r);
    fx_fini(&X);
}

/* Cancel mid-version (from the BEGIN callback, on the node's thread, while
 * frames arrive): the node leaves, the root aborts the version; every
 * chunk of the weights is exactly v1 or v2, and the journal says which. */
static int cancel_on_begin(const dc_refit_event_t *ev, void *user)
{
    if (ev->type == DC_REFIT_EVENT_BEGIN && ev->version == 2)
        dc_refit_receiver_cancel(user);
    return 0;
}

Test(receiver, cancel_mid_version_leaves_the_journal_right)
{
    fixture_t X;
    fx_init(&X, 1, 2, 0);
    X.scfg.abort_ms = 1500;
    fx_open(&X);
    weights_load(&X.tr, 1);
    cr_assert_eq(dc_refit_sender_push(X.s, NULL, 0, NULL), DC_OK, "%s", dc_last_error());
    expect_event(X.r, DC_REFIT_EVENT_BEGIN, 1);
    expect_event(X.r, DC_REFIT_EVENT_COMMITTED, 1);
    cr_assert_eq(dc_refit_receiver_on_event(X.r, cancel_on_begin, X.r), DC_OK);
    weights_load(&X.tr, 2);
    dc_status_t st = dc_refit_sender_push(X.s, NULL, 0, NULL);
    cr_assert_eq(st, DC_ERR_CANCELED, "push with a receiver gone: %d %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), "receiver"), "%s", dc_last_error());
    cr_assert_eq(dc_refit_receiver_close(X.r), DC_ERR_CANCELED);
    cr_assert(strstr(dc_last_error(), "canceled by its caller"), "%s", dc_last_error());
    dc_refit_sender_close(X.s);
    /* each chunk: APPLIED -> v2's bytes and digest, else v1's bytes */
    char p1[256], p2[256];
    vpath(p1, sizeof(p1), 1);
    vpath(p2, sizeof(p2), 2);
    dc_st_file_t *f1, *f2;
    cr_assert_eq(dc_st_open(p1, DC_ST_READ, &f1), DC_OK);
    cr_assert_eq(dc_st_open(p2, DC_ST_READ, &f2), DC_OK);
    dc_layout_t *l = NULL;
    cr_assert_eq(dc_layout_from_st(f1, 64 * 1024, &l), DC_OK);
    dc_journal_info_t ji;
    uint8_t *states = NULL;
    dc_digest_t *dg = NULL;
    cr_assert_eq(dc_journal_load(X.rsd, &ji, &states, &dg), DC_OK,
                 "no journal after a cancel mid-version: %s", dc_last_error());
    cr_assert_eq(ji.target, 2);
    cr_assert_eq(ji.nchunks, l->nchunks);
    uint32_t applied = 0;
    for (uint32_t c = 0; c < l->nchunks; c++) {
        const dc_layout_chunk_t *lc = &l->chunks[c];
        const uint8_t *have = (const uint8_t *)X.rx.segs[lc->tensor].ptr + lc->offset;
        const uint8_t *b1 = dc_st_data(f1, dc_st_tensor(f1, lc->tensor)) + lc->offset;
        const uint8_t *b2 = dc_st_data(f2, dc_st_tensor(f2, lc->tensor)) + lc->offset;
        cr_assert_neq(states[c], DC_JSTATE_APPLYING, "chunk %u left half applied", c);
        if (states[c] == DC_JSTATE_APPLIED) {
            applied++;
            cr_assert_eq(memcmp(have, b2, lc->len), 0, "chunk %u: APPLIED but not v2", c);
        } else {
            cr_assert_eq(memcmp(have, b1, lc->len), 0, "chunk %u: PENDING but not v1", c);
        }
    }
    cr_log_info("cancel: %u of %u chunks were applied", applied, l->nchunks);
    free(states);
    free(dg);
    dc_layout_free(l);
    dc_st_close(f1);
    dc_st_close(f2);
    fx_fini(&X);
}

/* Cold start: a receiver that holds nothing (zeros, no record,
 * DC_REFIT_VERSION_NONE) says so, gets its first version dense (every
 * chunk an overwrite), exact, and holds it from then on. */
Test(receiver, cold_start_is_dense_and_said)
{
    fixture_t X;
    fx_init(&X, 1, 2, -1);
    fx_open(&X);
    uint64_t v = 7, inflight = 7;
    cr_assert_eq(dc_refit_receiver_version(X.r, &v, NULL, &inflight), DC_ERR_NOT_FOUND);
    cr_assert(strstr(dc_last_error(), "cold start"), "%s", dc_last_error());
    cr_assert_eq(v, 7);
    cr_assert_eq(inflight, 0);
    weights_load(&X.tr, 1);
    dc_refit_version_stats_t vs = {.size = sizeof(vs)};
    cr_assert_eq(dc_refit_sender_push(X.s, NULL, 0, &vs), DC_OK, "%s", dc_last_error());
    dc_refit_event_t b = expect_event(X.r, DC_REFIT_EVENT_BEGIN, 1);
    cr_assert(b.flags & DC_REFIT_EVENT_F_COLD, "%s", b.message);
    cr_assert(b.flags & DC_REFIT_EVENT_F_DENSE, "%s", b.message);
    cr_assert(strstr(b.message, "cold start: dense"), "%s", b.message);
    expect_event(X.r, DC_REFIT_EVENT_COMMITTED, 1);
    cr_assert(weights_exact(&X.rx, 1), "cold receiver not byte-exact with v1");
    cr_assert_eq(dc_refit_receiver_version(X.r, &v, NULL, NULL), DC_OK);
    cr_assert_eq(v, 1);
    dc_refit_receiver_stats_t st = {.size = sizeof(st)};
    cr_assert_eq(dc_refit_receiver_stats(X.r, &st), DC_OK);
    cr_assert(st.repairs > 0, "a cold node asks for every chunk whole");
    cr_assert(st.bytes_received >= vs.dense_bytes / 2, "received %llu of %llu: not dense",
              (unsigned long long)st.bytes_received, (unsigned long long)vs.dense_bytes);
    /* the next version is a delta again */
    weights_load(&X.tr, 2);
    cr_assert_eq(dc_refit_sender_push(X.s, NULL, 0, NULL), DC_OK, "%s", dc_last_error());
    b = expect_event(X.r, DC_REFIT_EVENT_BEGIN, 2);
    cr_assert_eq(b.flags & (DC_REFIT_EVENT_F_COLD | DC_REFIT_EVENT_F_DENSE), 0, "%s", b.message);
    expect_event(X.r, DC_REFIT_EVENT_COMMITTED, 2);
    cr_assert(weights_exact(&X.rx, 2));
    cr_assert_eq(dc_refit_sender_close(X.s), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_refit_receiver_close(X.r), DC_OK, "%s", dc_last_error());
    fx_fini(&X);
}

/* Options a receiver handle refuses, with the reason. */
Test(receiver, bad_options_are_refused)
{
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 1, 7300, &topo), DC_OK);
    dc_refit_node_opts_t c;
    memset(&c, 0, sizeof(c));
    c.size = sizeof(c);
    c.topo = topo;
    c.state_dir = "/tmp/dc-recv-bad";
    c.weights_path = "/nonexistent.safetensors";
    dc_refit_receiver_t *r = (dc_refit_receiver_t *)&c;
    c.rank = 0;
    cr_assert_eq(dc_refit_receiver_open(&c, &r), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "rank 0 is not a receiver"), "%s", dc_last_error());
    cr_assert_null(r);
    c.rank = 1;
    c.versions_dir = "/tmp";
    cr_assert_eq(dc_refit_receiver_open(&c, &r), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "versions_dir"), "%s", dc_last_error());
    c.versions_dir = NULL;
    c.weights_path = NULL;
    cr_assert_eq(dc_refit_receiver_open(&c, &r), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "weights_path or tensors"), "%s", dc_last_error());
    c.weights_path = "/nonexistent.safetensors";
    setenv("DELTACAST_SECRET", "receiver-test-bad-options", 1);
    c.transport = "tcp";
    cr_assert_neq(dc_refit_receiver_open(&c, &r), DC_OK); /* the node fails: open says so */
    cr_assert(dc_last_error()[0], "no reason given");
    cr_assert_null(r);
    dc_refit_event_t ev = {.size = 4};
    cr_assert_eq(dc_refit_receiver_wait(NULL, 0, &ev), DC_ERR_INVALID);
    dc_topo_free(topo);
}

/* The command's cold start: `deltacast node --initial-version none` on a
 * weights file of zeros says "cold start: dense" and ends byte-exact. */
Test(receiver, cli_cold_start_is_dense_and_said)
{
    job_init(&J, 1, 1, "2e5", 2, "optimizer");
    /* the receiver's copy: v0's header, zero bytes (it holds nothing) */
    cr_assert_eq(job_sh("python3 -c 'import struct,sys; b=bytearray(open(sys.argv[1],\"rb\").read()); "
                        "h=8+struct.unpack(\"<Q\",b[:8])[0]; b[h:]=bytes(len(b)-h); "
                        "open(sys.argv[1],\"wb\").write(b)' %s/w1.st", J.dir), 0);
    cr_assert(!job_exact(&J, 1, 0));
    job_start(&J, 0, NULL, NULL);
    usleep(100000);
    job_start(&J, 1, NULL, "--initial-version none");
    job_expect_all_exit_ok(&J, 60, 20);
    job_expect_all_exact(&J, 2);
    cr_assert_eq(job_sh("grep -q 'cold start: dense' %s/log1", J.dir), 0,
                 "the receiver's log does not say cold start: dense");
    cr_assert_eq(job_sh("grep -q 'node 1: version 2 begins.*cold' %s/log1", J.dir), 1,
                 "version 2 is no cold start");
    uint64_t v = 0;
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/1", J.dir);
    cr_assert_eq(dc_refit_committed(sd, &v, NULL, NULL), DC_OK);
    cr_assert_eq(v, 2);
}
