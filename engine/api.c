/* api.c - the public refit API (include/deltacast.h, "Refit engine"). */
#include "engine/api_internal.h"
#include "engine/commit.h"
#include "engine/layout.h"
#include "engine/node.h"
#include "kernels/codec.h"
#include "verbs/gpumem.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* The public tensor list as the layout's descriptors (names borrowed). */
dc_status_t dc_api_tensors(const dc_refit_tensor_t *t, size_t n, dc_layout_desc_t **out)
{
    dc_layout_desc_t *d = calloc(n ? n : 1, sizeof(*d));
    if (!d)
        return dc_error(DC_ERR_NOMEM, "refit: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !t[i].dtype) {
            free(d);
            return dc_error(DC_ERR_INVALID, "refit: tensor %zu has no name or dtype", i);
        }
        d[i].name = t[i].name;
        d[i].nelems = t[i].nelems;
        dc_status_t st = dc_dtype_parse(t[i].dtype, &d[i].dtype);
        if (st != DC_OK) {
            free(d);
            return st;
        }
    }
    *out = d;
    return DC_OK;
}

/* Public segments as placement segments (tensor names resolved). */
dc_status_t dc_api_segments(const dc_layout_desc_t *d, size_t nt,
                                   const dc_refit_segment_t *g, size_t n, dc_place_seg_t **out)
{
    dc_place_seg_t *s = calloc(n ? n : 1, sizeof(*s));
    if (!s)
        return dc_error(DC_ERR_NOMEM, "refit: out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t t = 0;
        while (t < nt && (!g[i].tensor || strcmp(g[i].tensor, d[t].name) != 0))
            t++;
        if (t == nt) {
            free(s);
            return dc_error(DC_ERR_INVALID, "refit: segment %zu names unknown tensor '%s'", i,
                            g[i].tensor ? g[i].tensor : "(null)");
        }
        if (!g[i].ptr && g[i].length) {
            free(s);
            return dc_error(DC_ERR_INVALID, "refit: segment %zu of tensor '%s' has no memory",
                            i, g[i].tensor);
        }
        s[i] = (dc_place_seg_t){(uint32_t)t, g[i].offset, g[i].length, g[i].ptr};
    }
    *out = s;
    return DC_OK;
}

/* Size of the first version of dc_refit_node_opts_t (0.1: up to
 * chunk_size); memory and transport came in 0.2. */
#define DC_API_CONFIG_V1 offsetof(dc_refit_node_opts_t, memory)
/* dc_refit_version_stats_t has not grown since 0.1 */
#define DC_API_STATS_V1 sizeof(dc_refit_version_stats_t)

/* The transports a node's config may name (NULL or "": config transport). */
static int dc_api_transport_ok(const char *t)
{
    static const char *const known[] = {"auto", "rdma", "ucx", "tcp"};
    if (!t || !*t)
        return 1;
    for (size_t i = 0; i < DC_ARRAY_SIZE(known); i++)
        if (strcmp(t, known[i]) == 0)
            return 1;
    return 0;
}

/* The caller's config as this library's (dc_struct_in: an older caller's
 * missing fields zero, a newer caller's unknown fields refused unless
 * zero), then checked. */
dc_status_t dc_api_check_cfg(const dc_refit_node_opts_t *in,
                                    dc_refit_node_opts_t *cfg, const char *who)
{
    char what[64];
    snprintf(what, sizeof(what), "%s: config", who);
    if (!in)
        return dc_error(DC_ERR_INVALID, "%s: config, its size, topology and state_dir are "
                                        "required", who);
    dc_status_t st = dc_struct_in(cfg, sizeof(*cfg), in, DC_API_CONFIG_V1, what);
    if (st != DC_OK)
        return st;
    if (!cfg->topo || !cfg->state_dir)
        return dc_error(DC_ERR_INVALID, "%s: config, its size, topology and state_dir are "
                                        "required", who);
    if (cfg->memory != DC_REFIT_MEM_HOST && cfg->memory != DC_REFIT_MEM_CUDA)
        return dc_error(DC_ERR_INVALID, "%s: memory %u is neither DC_REFIT_MEM_HOST nor "
                                        "DC_REFIT_MEM_CUDA", who, cfg->memory);
    if (!dc_api_transport_ok(cfg->transport))
        return dc_error(DC_ERR_INVALID, "%s: transport '%s' is not one of auto, rdma, ucx, "
                                        "tcp", who, cfg->transport);
    return DC_OK;
}

void dc_api_node_cfg(const dc_refit_node_opts_t *cfg, dc_node_cfg_t *n)
{
    memset(n, 0, sizeof(*n));
    n->rank = cfg->rank;
    n->topo = cfg->topo;
    n->state_dir = cfg->state_dir;
    n->versions_dir = cfg->versions_dir;
    n->nversions = cfg->last_version;
    n->dense = cfg->dense;
    n->stats_path = cfg->stats_path;
    n->wait_ms = cfg->wait_ms;
    n->weights = cfg->weights_path;
    n->initial_version = cfg->initial_version;
    n->durable = cfg->durable;
    n->abort_ms = cfg->abort_ms;
    n->chunk_size = cfg->chunk_size;
    n->cuda_mem = cfg->memory == DC_REFIT_MEM_CUDA;
    n->transport = cfg->transport && *cfg->transport ? cfg->transport : NULL;
    if (cfg->initial_version == DC_REFIT_VERSION_NONE) {
        n->initial_version = 0;
        n->cold = 1;
    }
}

DC_API dc_status_t dc_refit_node_run(const dc_refit_node_opts_t *ucfg)
{
    dc_refit_node_opts_t c, *cfg = &c;
    dc_status_t cst = dc_api_check_cfg(ucfg, cfg, "refit");
    if (cst != DC_OK)
        return cst;
    dc_node_cfg_t n;
    dc_api_node_cfg(cfg, &n);
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(cfg->topo, cfg->rank, &info) != DC_OK)
        return dc_error(DC_ERR_INVALID, "refit: rank %u is not a node of the topology",
                        cfg->rank);
    int sender = info.role == DC_TOPO_ROLE_SENDER;
    if (sender && !cfg->versions_dir)
        return dc_error(DC_ERR_INVALID, "refit: a sender (rank %u) needs versions_dir "
                        "(a sender whose weights are in memory: dc_refit_sender_open)",
                        cfg->rank);
    if (!sender && !cfg->weights_path && (!cfg->tensors || !cfg->segments))
        return dc_error(DC_ERR_INVALID, "refit: a receiver needs weights_path or "
                                        "tensors + segments");
    dc_layout_desc_t *d = NULL;
    dc_place_seg_t *s = NULL;
    dc_status_t st = DC_OK;
    if (!sender && !cfg->weights_path) {
        st = dc_api_tensors(cfg->tensors, cfg->n_tensors, &d);
        if (st == DC_OK)
            st = dc_api_segments(d, cfg->n_tensors, cfg->segments, cfg->n_segments, &s);
        if (st != DC_OK)
            goto out;
        n.tensors = d;
        n.ntensors = cfg->n_tensors;
        n.segs = s;
        n.nsegs = cfg->n_segments;
    }
    st = dc_node_run(&n);
out:
    free(d);
    free(s);
    return st;
}

DC_API dc_status_t dc_refit_committed(const char *state_dir, uint64_t *version,
                                      uint64_t *baseline, uint8_t digest[16])
{
    if (!state_dir)
        return dc_error(DC_ERR_INVALID, "refit: state_dir is NULL");
    dc_commit_rec_t r;
    dc_status_t st = dc_commit_read(state_dir, &r);
    if (st != DC_OK)
        return st;
    if (version)
        *version = r.version;
    if (baseline)
        *baseline = r.baseline;
    if (digest) {
        dc_store_le64(digest, r.digest_lo);
        dc_store_le64(digest + 8, r.digest_hi);
    }
    return DC_OK;
}

/* --- sender from memory: the node on a thread, versions handed over ------- */

struct dc_refit_sender {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dc_node_cfg_t ncfg;
    dc_node_source_t src;
    dc_layout_desc_t *tensors;
    char **names;               /* our copies of the tensor names */
    char *state_dir, *stats_path, *transport;
    size_t ntensors;
    dc_layout_t *layout;        /* to check a push's placement before it is handed over */
    uint8_t *want;              /* chunk -> this sender sends it (what a placement covers) */
    dc_place_seg_t *base_segs;  /* open's segments (push with NULL reuses them) */
    size_t nbase;
    /* the version handed over: set by push, taken by the node, ended by done */
    const dc_place_seg_t *segs;
    size_t nsegs;
    int ready;                  /* the node copied the baseline */
    int pending, taken, closing, ended;
    dc_status_t vst;
    dc_refit_version_stats_t vstats;
    /* the node's thread returned */
    int finished;
    dc_status_t result;
    char why[1024];
};

static int dc_api_sender_next(void *user, uint64_t v, const dc_place_seg_t **segs, size_t *nsegs)
{
    (void)v;
    dc_refit_sender_t *s = user;
    int r = 2;
    pthread_mutex_lock(&s->mu);
    if (s->pending && !s->taken) {
        *segs = s->segs;
        *nsegs = s->nsegs;
        s->taken = 1;
        r = 1;
    } else if (s->closing && !s->pending) {
        r = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

static void dc_api_sender_done(void *user, uint64_t v, dc_status_t st,
                           const dc_refit_version_stats_t *vs)
{
    (void)v;
    dc_refit_sender_t *s = user;
    pthread_mutex_lock(&s->mu);
    s->vst = st;
    s->vstats = *vs;
    if (st != DC_OK)
        snprintf(s->why, sizeof(s->why), "%s", dc_last_error());
    s->ended = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void dc_api_sender_ready(void *user)
{
    dc_refit_sender_t *s = user;
    pthread_mutex_lock(&s->mu);
    s->ready = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int dc_api_sender_closed(void *user)
{
    dc_refit_sender_t *s = user;
    pthread_mutex_lock(&s->mu);
    int c = s->closing;
    pthread_mutex_unlock(&s->mu);
    return c;
}

static void *dc_api_sender_thread(void *arg)
{
    dc_refit_sender_t *s = arg;
    dc_status_t st = dc_node_run(&s->ncfg);
    pthread_mutex_lock(&s->mu);
    s->finished = 1;
    s->result = st;
    if (st != DC_OK && !s->why[0])
        snprintf(s->why, sizeof(s->why), "%s", dc_last_error());
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void dc_api_sender_free(dc_refit_sender_t *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    for (size_t i = 0; s->names && i < s->ntensors; i++)
        free(s->names[i]);
    free(s->names);
    free(s->state_dir);
    free(s->stats_path);
    free(s->transport);
    dc_layout_free(s->layout);
    free(s->want);
    free(s->tensors);
    free(s->base_segs);
    free(s);
}

/* The job's layout (its chunk size) and the chunks sender cfg->rank
 * sends in the job's plan. */
static dc_status_t dc_api_sender_chunks(const dc_refit_node_opts_t *cfg,
                                        const dc_layout_desc_t *d, size_t nt, dc_layout_t **lo,
                                        uint8_t **wo)
{
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(cfg->topo, cfg->rank, &info) != DC_OK || info.role != DC_TOPO_ROLE_SENDER)
        return dc_error(DC_ERR_INVALID, "refit sender: rank %u is not a sender of the topology",
                        cfg->rank);
    uint64_t cs = 0;
    dc_status_t st = dc_node_chunk_size(cfg->chunk_size, &cs);
    dc_layout_t *l = NULL;
    if (st == DC_OK)
        st = dc_layout_from_list(d, nt, cs, &l);
    if (st != DC_OK)
        return st;
    uint8_t *want = calloc(l->nchunks ? l->nchunks : 1, 1);
    st = want ? dc_node_sender_chunks(cfg->topo, cfg->rank, l, want)
              : dc_error(DC_ERR_NOMEM, "refit sender: out of memory");
    if (st != DC_OK) {
        free(want);
        dc_layout_free(l);
        return st;
    }
    *lo = l;
    *wo = want;
    return DC_OK;
}

/* A placement must cover every chunk this sender sends, without overlaps:
 * checked before the node sees it, so a bad push fails alone, not the job. */
static dc_status_t dc_api_check_place(dc_refit_sender_t *s, const dc_place_seg_t *g, size_t n)
{
    dc_place_t p;
    dc_status_t st = dc_place_init(&p, s->layout);
    for (size_t i = 0; i < n && st == DC_OK; i++) {
        if (!s->ncfg.cuda_mem && g[i].len && dc_verbs_is_cuda_ptr(g[i].ptr))
            st = dc_error(DC_ERR_INVALID, "segment %zu is CUDA device memory, but the sender "
                          "was opened on host memory", i);
        else
            st = dc_place_add(&p, g[i].tensor, g[i].offset, g[i].len, g[i].ptr);
    }
    if (st == DC_OK)
        st = dc_place_finish_chunks(&p, s->want);
    dc_place_fini(&p);
    if (st != DC_OK)
        dc_error_prefix("refit sender: segments");
    return st;
}

DC_API dc_status_t dc_refit_sender_open(const dc_refit_node_opts_t *ucfg,
                                        dc_refit_sender_t **out)
{
    if (!out)
        return dc_error(DC_ERR_INVALID, "refit sender: out is NULL");
    *out = NULL;
    dc_refit_node_opts_t c, *cfg = &c;
    dc_status_t cst = dc_api_check_cfg(ucfg, cfg, "refit sender");
    if (cst != DC_OK)
        return cst;
    if (cfg->versions_dir || cfg->weights_path || cfg->last_version)
        return dc_error(DC_ERR_INVALID, "refit sender: versions come from push; versions_dir, "
                                        "weights_path and last_version must be unset");
    if (!cfg->tensors || !cfg->n_tensors || !cfg->segments)
        return dc_error(DC_ERR_INVALID, "refit sender: tensors and segments (the weights of "
                                        "the committed version) are required");
    dc_refit_sender_t *s = calloc(1, sizeof(*s));
    if (!s)
        return dc_error(DC_ERR_NOMEM, "refit sender: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    dc_status_t st = dc_api_tensors(cfg->tensors, cfg->n_tensors, &s->tensors);
    if (st == DC_OK)
        st = dc_api_segments(s->tensors, cfg->n_tensors, cfg->segments, cfg->n_segments,
                             &s->base_segs);
    if (st != DC_OK) {
        dc_api_sender_free(s);
        return st;
    }
    s->ntensors = cfg->n_tensors;
    s->nbase = cfg->n_segments;
    s->names = calloc(s->ntensors, sizeof(*s->names));
    for (size_t i = 0; s->names && i < s->ntensors; i++) {
        s->names[i] = strdup(s->tensors[i].name);
        if (!s->names[i])
            break;
        s->tensors[i].name = s->names[i];
    }
    if (!s->names || (s->ntensors && !s->names[s->ntensors - 1])) {
        dc_api_sender_free(s);
        return dc_error(DC_ERR_NOMEM, "refit sender: out of memory");
    }
    dc_api_node_cfg(cfg, &s->ncfg);
    st = dc_api_sender_chunks(cfg, s->tensors, s->ntensors, &s->layout, &s->want);
    if (st == DC_OK)
        st = dc_api_check_place(s, s->base_segs, s->nbase);
    if (st != DC_OK) {
        dc_api_sender_free(s);
        return st;
    }
    s->state_dir = strdup(cfg->state_dir);
    s->stats_path = cfg->stats_path ? strdup(cfg->stats_path) : NULL;
    s->transport = s->ncfg.transport ? strdup(s->ncfg.transport) : NULL;
    if (!s->state_dir || (cfg->stats_path && !s->stats_path) ||
        (s->ncfg.transport && !s->transport)) {
        dc_api_sender_free(s);
        return dc_error(DC_ERR_NOMEM, "refit sender: out of memory");
    }
    s->ncfg.state_dir = s->state_dir;
    s->ncfg.stats_path = s->stats_path;
    s->ncfg.transport = s->transport;
    s->ncfg.tensors = s->tensors;
    s->ncfg.ntensors = s->ntensors;
    s->ncfg.segs = s->base_segs;
    s->ncfg.nsegs = s->nbase;
    s->src = (dc_node_source_t){dc_api_sender_next, dc_api_sender_done, dc_api_sender_ready,
                                dc_api_sender_closed, s};
    s->ncfg.source = &s->src;
    if (pthread_create(&s->th, NULL, dc_api_sender_thread, s) != 0) {
        dc_api_sender_free(s);
        return dc_error(DC_ERR_NOMEM, "refit sender: cannot start its thread");
    }
    /* the trainer may change its weights once open returns: wait until the
     * node has its own copy of the baseline (or failed to start) */
    pthread_mutex_lock(&s->mu);
    while (!s->ready && !s->finished)
        pthread_cond_wait(&s->cv, &s->mu);
    int failed = !s->ready;
    pthread_mutex_unlock(&s->mu);
    if (failed) {
        pthread_join(s->th, NULL);
        dc_status_t r = s->result != DC_OK ? s->result : DC_ERR_INTERNAL;
        char why[1024];
        snprintf(why, sizeof(why), "%s", s->why[0] ? s->why : "refit sender stopped");
        dc_api_sender_free(s);
        return dc_error(r, "%s", why);
    }
    *out = s;
    return DC_OK;
}

DC_API dc_status_t dc_refit_sender_push(dc_refit_sender_t *s, const dc_refit_segment_t *segments,
                                        size_t n_segments, dc_refit_version_stats_t *stats)
{
    if (!s)
        return dc_error(DC_ERR_INVALID, "refit sender: NULL sender");
    if (stats) {
        dc_status_t cst = dc_struct_check(stats, DC_API_STATS_V1, sizeof(*stats),
                                          "refit sender: stats");
        if (cst != DC_OK)
            return cst;
    }
    dc_place_seg_t *own = NULL;
    if (segments) {
        dc_status_t st = dc_api_segments(s->tensors, s->ntensors, segments, n_segments, &own);
        if (st == DC_OK)
            st = dc_api_check_place(s, own, n_segments);
        if (st != DC_OK) {
            free(own);
            return st;
        }
    }
    pthread_mutex_lock(&s->mu);
    if (s->finished || s->closing) {
        dc_status_t r = s->finished && s->result != DC_OK ? s->result : DC_ERR_INVALID;
        char why[1024];
        snprintf(why, sizeof(why), "%s", s->why[0] ? s->why : "the sender was closed");
        pthread_mutex_unlock(&s->mu);
        free(own);
        return dc_error(r, "refit sender: %s", why);
    }
    if (s->pending) {
        pthread_mutex_unlock(&s->mu);
        free(own);
        return dc_error(DC_ERR_INVALID, "refit sender: a push is already in progress");
    }
    s->segs = own ? own : s->base_segs;
    s->nsegs = own ? n_segments : s->nbase;
    s->pending = 1;
    s->taken = s->ended = 0;
    while (!s->ended && !s->finished)
        pthread_cond_wait(&s->cv, &s->mu);
    dc_status_t st;
    char why[1024];
    if (s->ended) {
        st = s->vst;
        if (stats)
            dc_struct_out(stats, &s->vstats, sizeof(s->vstats));
    } else {
        st = s->result != DC_OK ? s->result : DC_ERR_INTERNAL;
    }
    snprintf(why, sizeof(why), "%s", s->why[0] ? s->why : "the sender stopped");
    s->pending = 0;
    s->segs = NULL;
    pthread_mutex_unlock(&s->mu);
    free(own);
    if (st != DC_OK)
        return dc_error(st, "%s", why);
    return DC_OK;
}

DC_API dc_status_t dc_refit_sender_close(dc_refit_sender_t *s)
{
    if (!s)
        return DC_OK;
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    dc_status_t st = s->result;
    char why[1024];
    snprintf(why, sizeof(why), "%s", s->why);
    dc_api_sender_free(s);
    if (st != DC_OK)
        return dc_error(st, "%s", why[0] ? why : "refit sender failed");
    return DC_OK;
}

DC_API dc_status_t dc_refit_sender_ranges(const dc_refit_node_opts_t *ucfg,
                                          dc_refit_segment_t *out, size_t cap, size_t *n)
{
    if (!n)
        return dc_error(DC_ERR_INVALID, "refit sender ranges: n is NULL");
    *n = 0;
    dc_refit_node_opts_t local;
    dc_status_t st = ucfg ? dc_struct_in(&local, sizeof(local), ucfg, DC_API_CONFIG_V1,
                                         "refit sender ranges: config")
                          : DC_ERR_INVALID;
    const dc_refit_node_opts_t *cfg = &local;
    if (st != DC_OK && !ucfg)
        return dc_error(DC_ERR_INVALID, "refit sender ranges: config, its size and topology "
                                        "are required");
    if (st != DC_OK)
        return st;
    if (!cfg->topo)
        return dc_error(DC_ERR_INVALID, "refit sender ranges: config, its size and topology "
                                        "are required");
    if (!cfg->tensors || !cfg->n_tensors)
        return dc_error(DC_ERR_INVALID, "refit sender ranges: tensors are required");
    dc_layout_desc_t *d = NULL;
    dc_layout_t *l = NULL;
    uint8_t *want = NULL;
    st = dc_api_tensors(cfg->tensors, cfg->n_tensors, &d);
    if (st == DC_OK)
        st = dc_api_sender_chunks(cfg, d, cfg->n_tensors, &l, &want);
    size_t k = 0;
    uint32_t pt = UINT32_MAX; /* the last range's tensor and end */
    uint64_t pend = 0;
    for (uint32_t c = 0; st == DC_OK && c < l->nchunks; c++) {
        if (!want[c])
            continue;
        const dc_layout_chunk_t *lc = &l->chunks[c];
        if (k && lc->tensor == pt && lc->offset == pend) {
            if (k <= cap)
                out[k - 1].length += lc->len; /* adjacent: one range */
            pend += lc->len;
            continue;
        }
        if (k < cap)
            out[k] = (dc_refit_segment_t){cfg->tensors[lc->tensor].name, lc->offset, lc->len,
                                          NULL};
        k++;
        pt = lc->tensor;
        pend = lc->offset + lc->len;
    }
    free(want);
    dc_layout_free(l);
    free(d);
    *n = k;
    if (st == DC_OK && k > cap)
        return dc_error(DC_ERR_NOMEM, "refit sender ranges: %zu ranges, room for %zu", k, cap);
    return st;
}
