/* recv_api.c - the receiver handle of the public refit API
 * (include/deltacast.h, dc_refit_receiver_*): the node (receiver.c) runs on
 * a thread of its own; its events (dc_node_sink_t) are queued for
 * dc_refit_receiver_wait or handed to the caller's callback; hold, release
 * and cancel are requests the node takes after each turn of its loop
 * (receiver.c dc_rx_each), and the calls wait until it did. */
#include "engine/api_internal.h"
#include "engine/commit.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* dc_refit_event_t and dc_refit_receiver_stats_t have not grown since
 * their first version (0.2.1) */
#define DC_RECV_EVENT_V1 sizeof(dc_refit_event_t)
#define DC_RECV_STATS_V1 sizeof(dc_refit_receiver_stats_t)

struct dc_refit_receiver {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dc_node_cfg_t ncfg;
    dc_node_sink_t sink;
    dc_layout_desc_t *tensors;
    char **names;               /* our copies of the tensor names */
    size_t ntensors;
    dc_place_seg_t *segs;
    char *state_dir, *weights, *transport;
    /* what the caller wants, and what the node last did of it */
    int want_hold, want_cancel;
    uint64_t req_seq, seen_seq, done_seq;
    int held;
    uint64_t staged_bytes;
    /* events: a ring (none lost), or the callback */
    dc_refit_event_t *q;
    size_t qhead, qn, qcap;
    dc_refit_event_fn fn;
    void *fn_user;
    int ended_out;              /* ENDED was handed out: nothing more comes */
    /* which version the weights are */
    int have_version;
    uint64_t version, in_flight;
    uint8_t digest[16];
    dc_refit_receiver_stats_t st;
    uint64_t apply_ns;
    /* the node's thread */
    int ready, finished;
    dc_status_t result;
    char why[512];
};

/* Under r->mu: append ev to the queue (grown as needed: none is lost). */
static void dc_recv_push(dc_refit_receiver_t *r, const dc_refit_event_t *ev)
{
    if (r->qn == r->qcap) {
        size_t cap = r->qcap ? 2 * r->qcap : 16;
        dc_refit_event_t *q = malloc(cap * sizeof(*q));
        if (!q) {
            DC_LOG_ERROR("refit receiver: out of memory queueing an event (version %llu)",
                         (unsigned long long)ev->version);
            return;
        }
        for (size_t i = 0; i < r->qn; i++)
            q[i] = r->q[(r->qhead + i) % r->qcap];
        free(r->q);
        r->q = q;
        r->qhead = 0;
        r->qcap = cap;
    }
    r->q[(r->qhead + r->qn) % r->qcap] = *ev;
    r->qn++;
}

/* Hand ev to the callback (outside the lock), else queue it. */
static void dc_recv_deliver(dc_refit_receiver_t *r, const dc_refit_event_t *ev)
{
    pthread_mutex_lock(&r->mu);
    dc_refit_event_fn fn = r->fn;
    void *user = r->fn_user;
    if (!fn)
        dc_recv_push(r, ev);
    else if (ev->type == DC_REFIT_EVENT_ENDED)
        r->ended_out = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (fn)
        fn(ev, user);
}

static void dc_recv_event(void *user, const dc_node_event_t *ne)
{
    dc_refit_receiver_t *r = user;
    dc_refit_event_t ev;
    memset(&ev, 0, sizeof(ev));
    ev.size = sizeof(ev);
    ev.version = ne->v;
    ev.baseline = ne->b;
    ev.flags = (ne->flags & DC_NODE_EVF_DENSE ? DC_REFIT_EVENT_F_DENSE : 0) |
               (ne->flags & DC_NODE_EVF_HELD ? DC_REFIT_EVENT_F_HELD : 0) |
               (ne->flags & DC_NODE_EVF_COLD ? DC_REFIT_EVENT_F_COLD : 0);
    snprintf(ev.message, sizeof(ev.message), "%s", ne->msg ? ne->msg : "");
    pthread_mutex_lock(&r->mu);
    switch (ne->type) {
    case DC_NODE_EV_READY:
        r->have_version = !(ne->flags & DC_NODE_EVF_COLD);
        r->version = ne->v;
        dc_store_le64(r->digest, ne->digest_lo);
        dc_store_le64(r->digest + 8, ne->digest_hi);
        r->ready = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        return;
    case DC_NODE_EV_BEGIN:
        ev.type = DC_REFIT_EVENT_BEGIN;
        r->in_flight = ne->v;
        break;
    case DC_NODE_EV_COMMITTED:
        ev.type = DC_REFIT_EVENT_COMMITTED;
        dc_store_le64(ev.digest, ne->digest_lo);
        dc_store_le64(ev.digest + 8, ne->digest_hi);
        memcpy(r->digest, ev.digest, 16);
        r->version = ne->v;
        r->have_version = 1;
        r->in_flight = 0;
        r->st.versions_committed++;
        break;
    case DC_NODE_EV_ABORTED:
        ev.type = DC_REFIT_EVENT_ABORTED;
        r->in_flight = 0;
        if (ne->flags & DC_NODE_EVF_DENSE)
            r->have_version = 0; /* bytes unknown until a dense refit */
        r->st.versions_aborted++;
        break;
    default:
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (ne->type != DC_NODE_EV_BEGIN) {
        r->st.bytes_received += ne->bytes;
        r->apply_ns += ne->apply_ns;
        r->st.repairs += ne->repairs;
    }
    pthread_mutex_unlock(&r->mu);
    dc_recv_deliver(r, &ev);
}

static unsigned dc_recv_control(void *user)
{
    dc_refit_receiver_t *r = user;
    pthread_mutex_lock(&r->mu);
    unsigned c = (r->want_hold ? DC_NODE_CTL_HOLD : 0) | (r->want_cancel ? DC_NODE_CTL_CANCEL : 0);
    r->seen_seq = r->req_seq;
    pthread_mutex_unlock(&r->mu);
    return c;
}

static void dc_recv_state(void *user, int held, uint64_t staged_bytes, int took)
{
    dc_refit_receiver_t *r = user;
    pthread_mutex_lock(&r->mu);
    r->held = held;
    r->staged_bytes = staged_bytes;
    if (took && r->done_seq != r->seen_seq) {
        r->done_seq = r->seen_seq;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

static void *dc_recv_thread(void *arg)
{
    dc_refit_receiver_t *r = arg;
    dc_status_t st = dc_node_run(&r->ncfg);
    dc_refit_event_t ev;
    memset(&ev, 0, sizeof(ev));
    ev.size = sizeof(ev);
    ev.type = DC_REFIT_EVENT_ENDED;
    ev.status = st;
    pthread_mutex_lock(&r->mu);
    r->finished = 1;
    r->result = st;
    r->in_flight = 0;
    r->st.last_status = st;
    if (st != DC_OK)
        snprintf(r->why, sizeof(r->why), "%s", dc_last_error());
    ev.version = r->version;
    memcpy(ev.digest, r->digest, 16);
    if (st != DC_OK)
        snprintf(ev.message, sizeof(ev.message), "%.*s", (int)sizeof(ev.message) - 1, r->why);
    else
        snprintf(ev.message, sizeof(ev.message), "the job ended at version %llu",
                 (unsigned long long)r->version);
    int started = r->ready;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (started)
        dc_recv_deliver(r, &ev);
    return NULL;
}

static void dc_recv_free(dc_refit_receiver_t *r)
{
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    for (size_t i = 0; r->names && i < r->ntensors; i++)
        free(r->names[i]);
    free(r->names);
    free(r->tensors);
    free(r->segs);
    free(r->state_dir);
    free(r->weights);
    free(r->transport);
    free(r->q);
    free(r);
}

/* Our own copies of what the node needs beyond the call (the tensor
 * names, the placement, the paths). */
static dc_status_t dc_recv_copy(dc_refit_receiver_t *r, const dc_refit_node_opts_t *cfg)
{
    dc_status_t st = DC_OK;
    if (!cfg->weights_path) {
        st = dc_api_tensors(cfg->tensors, cfg->n_tensors, &r->tensors);
        if (st == DC_OK)
            st = dc_api_segments(r->tensors, cfg->n_tensors, cfg->segments, cfg->n_segments,
                                 &r->segs);
        if (st != DC_OK)
            return st;
        r->ntensors = cfg->n_tensors;
        r->names = calloc(r->ntensors ? r->ntensors : 1, sizeof(*r->names));
        if (!r->names)
            return dc_error(DC_ERR_NOMEM, "refit receiver: out of memory");
        for (size_t i = 0; i < r->ntensors; i++) {
            r->names[i] = strdup(r->tensors[i].name);
            if (!r->names[i])
                return dc_error(DC_ERR_NOMEM, "refit receiver: out of memory");
            r->tensors[i].name = r->names[i];
        }
        r->ncfg.tensors = r->tensors;
        r->ncfg.ntensors = r->ntensors;
        r->ncfg.segs = r->segs;
        r->ncfg.nsegs = cfg->n_segments;
    } else {
        r->weights = strdup(cfg->weights_path);
        if (!r->weights)
            return dc_error(DC_ERR_NOMEM, "refit receiver: out of memory");
        r->ncfg.weights = r->weights;
    }
    r->state_dir = strdup(cfg->state_dir);
    r->transport = r->ncfg.transport ? strdup(r->ncfg.transport) : NULL;
    if (!r->state_dir || (r->ncfg.transport && !r->transport))
        return dc_error(DC_ERR_NOMEM, "refit receiver: out of memory");
    r->ncfg.state_dir = r->state_dir;
    r->ncfg.transport = r->transport;
    return DC_OK;
}

DC_API dc_status_t dc_refit_receiver_open(const dc_refit_node_opts_t *ucfg,
                                          dc_refit_receiver_t **out)
{
    if (!out)
        return dc_error(DC_ERR_INVALID, "refit receiver: out is NULL");
    *out = NULL;
    dc_refit_node_opts_t c, *cfg = &c;
    dc_status_t st = dc_api_check_cfg(ucfg, cfg, "refit receiver");
    if (st != DC_OK)
        return st;
    if (cfg->versions_dir || cfg->last_version || cfg->dense || cfg->stats_path)
        return dc_error(DC_ERR_INVALID, "refit receiver: versions_dir, last_version, dense and "
                                        "stats_path are a sender's; they must be unset");
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(cfg->topo, cfg->rank, &info) != DC_OK ||
        info.role != DC_TOPO_ROLE_RECEIVER)
        return dc_error(DC_ERR_INVALID, "refit receiver: rank %u is not a receiver of the "
                        "topology", cfg->rank);
    if (!cfg->weights_path && (!cfg->tensors || !cfg->n_tensors || !cfg->segments))
        return dc_error(DC_ERR_INVALID, "refit receiver: weights_path or tensors + segments "
                                        "(where the weights live) are required");
    dc_refit_receiver_t *r = calloc(1, sizeof(*r));
    if (!r)
        return dc_error(DC_ERR_NOMEM, "refit receiver: out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    dc_api_node_cfg(cfg, &r->ncfg);
    st = dc_recv_copy(r, cfg);
    if (st != DC_OK) {
        dc_recv_free(r);
        return st;
    }
    r->sink = (dc_node_sink_t){dc_recv_event, dc_recv_control, dc_recv_state, r};
    r->ncfg.sink = &r->sink;
    if (pthread_create(&r->th, NULL, dc_recv_thread, r) != 0) {
        dc_recv_free(r);
        return dc_error(DC_ERR_NOMEM, "refit receiver: cannot start its thread");
    }
    pthread_mutex_lock(&r->mu);
    while (!r->ready && !r->finished)
        pthread_cond_wait(&r->cv, &r->mu);
    int failed = !r->ready;
    pthread_mutex_unlock(&r->mu);
    if (failed) {
        pthread_join(r->th, NULL);
        dc_status_t rs = r->result != DC_OK ? r->result : DC_ERR_INTERNAL;
        char why[512];
        snprintf(why, sizeof(why), "%s", r->why[0] ? r->why : "refit receiver stopped");
        dc_recv_free(r);
        return dc_error(rs, "%s", why);
    }
    *out = r;
    return DC_OK;
}

DC_API dc_status_t dc_refit_receiver_on_event(dc_refit_receiver_t *r, dc_refit_event_fn fn,
                                              void *user)
{
    if (!r)
        return dc_error(DC_ERR_INVALID, "refit receiver: NULL receiver");
    pthread_mutex_lock(&r->mu);
    r->fn = fn;
    r->fn_user = user;
    pthread_mutex_unlock(&r->mu);
    return DC_OK;
}

/* Wait on r->cv until the deadline (0: none); 1 when it passed. */
static int dc_recv_cv_wait(dc_refit_receiver_t *r, const struct timespec *dl)
{
    if (!dl) {
        pthread_cond_wait(&r->cv, &r->mu);
        return 0;
    }
    return pthread_cond_timedwait(&r->cv, &r->mu, dl) == ETIMEDOUT;
}

static struct timespec dc_recv_deadline(int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

DC_API dc_status_t dc_refit_receiver_wait(dc_refit_receiver_t *r, int timeout_ms,
                                          dc_refit_event_t *ev)
{
    if (!r || !ev)
        return dc_error(DC_ERR_INVALID, "refit receiver wait: receiver and event are required");
    dc_status_t cst = dc_struct_check(ev, DC_RECV_EVENT_V1, sizeof(*ev),
                                      "refit receiver wait: event");
    if (cst != DC_OK)
        return cst;
    struct timespec dl = timeout_ms >= 0 ? dc_recv_deadline(timeout_ms) : (struct timespec){0};
    pthread_mutex_lock(&r->mu);
    while (r->qn == 0 && !r->ended_out) {
        if (dc_recv_cv_wait(r, timeout_ms >= 0 ? &dl : NULL) && r->qn == 0) {
            pthread_mutex_unlock(&r->mu);
            return dc_error(DC_ERR_TIMEOUT, "refit receiver: no event in %d ms", timeout_ms);
        }
    }
    if (r->qn == 0) {
        pthread_mutex_unlock(&r->mu);
        return dc_error(DC_ERR_NOT_FOUND, "refit receiver: the job ended (its ENDED event "
                                          "was handed out): no more events");
    }
    dc_refit_event_t e = r->q[r->qhead];
    r->qhead = (r->qhead + 1) % r->qcap;
    r->qn--;
    if (e.type == DC_REFIT_EVENT_ENDED)
        r->ended_out = 1;
    pthread_mutex_unlock(&r->mu);
    dc_struct_out(ev, &e, sizeof(e));
    return DC_OK;
}

DC_API dc_status_t dc_refit_receiver_version(dc_refit_receiver_t *r, uint64_t *version,
                                             uint8_t digest[16], uint64_t *in_flight)
{
    if (!r)
        return dc_error(DC_ERR_INVALID, "refit receiver: NULL receiver");
    pthread_mutex_lock(&r->mu);
    int have = r->have_version;
    uint64_t v = r->version, f = r->in_flight;
    uint8_t d[16];
    memcpy(d, r->digest, 16);
    pthread_mutex_unlock(&r->mu);
    if (in_flight)
        *in_flight = f;
    if (!have)
        return dc_error(DC_ERR_NOT_FOUND, "refit receiver: holds no version yet (a cold start "
                                          "before its first commit, or marked for a dense "
                                          "refit)");
    if (version)
        *version = v;
    if (digest)
        memcpy(digest, d, 16);
    return DC_OK;
}

/* Ask the node for hold (1) / release (0) / cancel (-1) and wait until it
 * took the request (not on the node's own thread: a callback's request
 * takes effect when it returns). */
static dc_status_t dc_recv_request(dc_refit_receiver_t *r, int what)
{
    if (!r)
        return dc_error(DC_ERR_INVALID, "refit receiver: NULL receiver");
    pthread_mutex_lock(&r->mu);
    if (what < 0)
        r->want_cancel = 1;
    else
        r->want_hold = what;
    uint64_t my = ++r->req_seq;
    if (!pthread_equal(pthread_self(), r->th))
        while (!r->finished && r->done_seq < my)
            pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    return DC_OK;
}

DC_API dc_status_t dc_refit_receiver_hold(dc_refit_receiver_t *r)
{
    return dc_recv_request(r, 1);
}

DC_API dc_status_t dc_refit_receiver_release(dc_refit_receiver_t *r)
{
    return dc_recv_request(r, 0);
}

DC_API dc_status_t dc_refit_receiver_cancel(dc_refit_receiver_t *r)
{
    dc_status_t st = dc_recv_request(r, -1);
    if (st != DC_OK || pthread_equal(pthread_self(), r->th))
        return st;
    pthread_mutex_lock(&r->mu);
    while (!r->finished)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    return DC_OK;
}

DC_API dc_status_t dc_refit_receiver_stats(dc_refit_receiver_t *r,
                                           dc_refit_receiver_stats_t *stats)
{
    if (!r || !stats)
        return dc_error(DC_ERR_INVALID, "refit receiver stats: receiver and stats are required");
    dc_status_t cst = dc_struct_check(stats, DC_RECV_STATS_V1, sizeof(*stats),
                                      "refit receiver stats");
    if (cst != DC_OK)
        return cst;
    pthread_mutex_lock(&r->mu);
    dc_refit_receiver_stats_t s = r->st;
    s.size = sizeof(s);
    s.apply_s = (double)r->apply_ns / 1e9;
    s.staged_bytes = r->staged_bytes;
    s.held = r->held;
    pthread_mutex_unlock(&r->mu);
    dc_struct_out(stats, &s, sizeof(s));
    return DC_OK;
}

DC_API dc_status_t dc_refit_receiver_close(dc_refit_receiver_t *r)
{
    if (!r)
        return DC_OK;
    pthread_mutex_lock(&r->mu);
    r->want_cancel = 1; /* after the job ended: nothing to cancel */
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    dc_status_t st = r->result;
    char why[512];
    snprintf(why, sizeof(why), "%s", r->why);
    dc_recv_free(r);
    if (st != DC_OK)
        return dc_error(st, "%s", why[0] ? why : "refit receiver failed");
    return DC_OK;
}
