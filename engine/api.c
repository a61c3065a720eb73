/* api.c - the public refit API (include/deltacast.h, "Refit engine"). */
#include "engine/commit.h"
#include "engine/layout.h"
#include "engine/node.h"

#include <stdlib.h>

DC_API dc_status_t dc_refit_node_run(const dc_refit_node_config_t *cfg)
{
    if (!cfg || cfg->size < sizeof(dc_refit_node_config_t) || !cfg->topo || !cfg->state_dir)
        return dc_error(DC_ERR_INVALID, "refit: config, its size, topology and state_dir are "
                                        "required");
    dc_node_cfg_t n;
    memset(&n, 0, sizeof(n));
    n.rank = cfg->rank;
    n.topo = cfg->topo;
    n.state_dir = cfg->state_dir;
    n.versions_dir = cfg->versions_dir;
    n.nversions = cfg->last_version;
    n.dense = cfg->dense;
    n.stats_path = cfg->stats_path;
    n.wait_ms = cfg->wait_ms;
    n.weights = cfg->weights_path;
    n.initial_version = cfg->initial_version;
    n.durable = cfg->durable;
    n.abort_ms = cfg->abort_ms;
    n.chunk_size = cfg->chunk_size;
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(cfg->topo, cfg->rank, &info) != DC_OK)
        return dc_error(DC_ERR_INVALID, "refit: rank %u is not a node of the topology",
                        cfg->rank);
    int sender = info.role == DC_TOPO_SENDER;
    if (sender && !cfg->versions_dir)
        return dc_error(DC_ERR_INVALID, "refit: a sender (rank %u) needs versions_dir",
                        cfg->rank);
    if (!sender && !cfg->weights_path && (!cfg->tensors || !cfg->segments))
        return dc_error(DC_ERR_INVALID, "refit: a receiver needs weights_path or "
                                        "tensors + segments");
    dc_layout_desc_t *d = NULL;
    dc_place_seg_t *s = NULL;
    dc_status_t st = DC_OK;
    if (!sender && !cfg->weights_path) {
        d = calloc(cfg->n_tensors ? cfg->n_tensors : 1, sizeof(*d));
        s = calloc(cfg->n_segments ? cfg->n_segments : 1, sizeof(*s));
        if (!d || !s) {
            st = dc_error(DC_ERR_NOMEM, "refit: out of memory");
            goto out;
        }
        for (size_t i = 0; i < cfg->n_tensors; i++) {
            if (!cfg->tensors[i].name || !cfg->tensors[i].dtype) {
                st = dc_error(DC_ERR_INVALID, "refit: tensor %zu has no name or dtype", i);
                goto out;
            }
            d[i].name = cfg->tensors[i].name;
            d[i].nelems = cfg->tensors[i].nelems;
            if ((st = dc_dtype_parse(cfg->tensors[i].dtype, &d[i].dtype)) != DC_OK)
                goto out;
        }
        for (size_t i = 0; i < cfg->n_segments; i++) {
            const dc_refit_segment_t *g = &cfg->segments[i];
            size_t t = 0;
            while (t < cfg->n_tensors && (!g->tensor || strcmp(g->tensor, d[t].name) != 0))
                t++;
            if (t == cfg->n_tensors) {
                st = dc_error(DC_ERR_INVALID, "refit: segment %zu names unknown tensor '%s'", i,
                              g->tensor ? g->tensor : "(null)");
                goto out;
            }
            s[i] = (dc_place_seg_t){(uint32_t)t, g->offset, g->length, g->ptr};
        }
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
                                      uint64_t *baseline, uint64_t digest[2])
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
        digest[0] = r.digest_lo;
        digest[1] = r.digest_hi;
    }
    return DC_OK;
}
