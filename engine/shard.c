/* shard.c - a sender from memory (cfg->source: the library's
 * dc_refit_sender_*, trainer shards; n->mem): the layout from the tensor
 * list, placements of the chunks this sender sends, its own copy of the
 * baseline's bytes of those chunks, each next version from the caller
 * (source->next) and its end (source->done; committed: copied into the
 * baseline).
 *
 * Used by encoder.c (reads n->mem), sender.c and coord.c (their drivers).
 */
#include "engine/node_internal.h"

#include <stdlib.h>

/* Memory sender, at start: the layout from the tensor list. */
dc_status_t dc_mem_init(dc_node_t *n)
{
    const dc_node_cfg_t *cfg = n->cfg;
    dc_status_t st = dc_layout_from_list(cfg->tensors, cfg->ntensors, n->chunk_size, &n->layout);
    if (st != DC_OK)
        return st;
    n->scratch = malloc(n->layout->max_chunk ? n->layout->max_chunk : 1);
    return n->scratch ? DC_OK : dc_error(DC_ERR_NOMEM, "sender: out of memory");
}

/* A placement of the chunks this memory sender sends (segs: the caller's). */
static dc_status_t dc_mem_place(dc_node_t *n, dc_place_t *p, const dc_place_seg_t *segs,
                                size_t nsegs)
{
    dc_status_t st = dc_place_init(p, n->layout);
    p->dev = n->cfg->cuda_mem;
    for (size_t i = 0; i < nsegs && st == DC_OK; i++)
        st = dc_place_add(p, segs[i].tensor, segs[i].offset, segs[i].len, segs[i].ptr);
    if (st == DC_OK)
        st = dc_place_finish_chunks(p, n->mem.own);
    return st;
}

/* Memory sender, once the chunk map is known: our own copy of the
 * baseline (cfg->segs: the committed version) for the chunks we send;
 * then the caller may change its memory (source->ready). */
dc_status_t dc_mem_baseline(dc_node_t *n)
{
    const dc_layout_t *l = n->layout;
    uint32_t nch = l->nchunks;
    n->mem.own = calloc(nch ? nch : 1, 1);
    n->mem.off = calloc(nch ? nch : 1, sizeof(*n->mem.off));
    if (!n->mem.own || !n->mem.off)
        return dc_error(DC_ERR_NOMEM, "sender: out of memory");
    uint64_t total = 0;
    for (uint32_t k = 0; k < n->enc.nbcast; k++) {
        uint32_t c = n->enc.bcast[k];
        n->mem.own[c] = 1;
        n->mem.off[c] = total;
        total += l->chunks[c].len;
    }
    n->mem.base = malloc(total ? total : 1);
    if (!n->mem.base)
        return dc_error(DC_ERR_NOMEM, "sender: no memory for its baseline copy (%llu bytes)",
                        (unsigned long long)total);
    dc_place_t p;
    dc_status_t st = dc_mem_place(n, &p, n->cfg->segs, n->cfg->nsegs);
    for (uint32_t k = 0; st == DC_OK && k < n->enc.nbcast; k++)
        st = dc_place_read(&p, n->enc.bcast[k], n->mem.base + n->mem.off[n->enc.bcast[k]]);
    dc_place_fini(&p);
    if (st != DC_OK) {
        dc_error_prefix("sender %u: the baseline's placement", n->me);
        return st;
    }
    DC_LOG_INFO("sender %u: sends %u of %u chunks from memory (%llu bytes of baseline)", n->me,
                n->enc.nbcast, nch, (unsigned long long)total);
    n->cfg->source->ready(n->cfg->source->user);
    return DC_OK;
}

/* Memory sender: is version v's placement there?  1: yes (in n->mem.next);
 * 0: not yet; -1: no more versions (n->mem.end) or an error (set). */
int dc_mem_try(dc_node_t *n, uint64_t v)
{
    const dc_node_source_t *src = n->cfg->source;
    const dc_place_seg_t *segs = NULL;
    size_t nsegs = 0;
    int r = src->next(src->user, v, &segs, &nsegs);
    if (r == 0) {
        n->mem.end = 1;
        dc_error(DC_ERR_NOT_FOUND, "sender %u: no version %llu", n->me, (unsigned long long)v);
        return -1;
    }
    if (r < 0) {
        if (dc_last_status() == DC_OK)
            dc_error(DC_ERR_INVALID, "sender %u: no version %llu", n->me, (unsigned long long)v);
        return -1;
    }
    if (r != 1)
        return 0;
    /* no encoder may still read the previous version's memory */
    dc_enc_wait_idle(n);
    if (n->mem.next_ok)
        dc_place_fini(&n->mem.next);
    n->mem.next_ok = 1;
    if (dc_mem_place(n, &n->mem.next, segs, nsegs) != DC_OK) {
        dc_error_prefix("sender %u: version %llu's placement", n->me, (unsigned long long)v);
        return -1;
    }
    return 1;
}

/* Memory sender: version v committed: it is the baseline of the next. */
static dc_status_t dc_mem_commit(dc_node_t *n)
{
    for (uint32_t k = 0; k < n->enc.nbcast; k++) {
        uint32_t c = n->enc.bcast[k];
        dc_status_t st = dc_place_read(&n->mem.next, c, n->mem.base + n->mem.off[c]);
        if (st != DC_OK)
            return st;
    }
    return DC_OK;
}

/* Memory sender: version v ended (committed: it becomes our baseline);
 * tell the source, once no encoder reads its memory any more. */
dc_status_t dc_mem_done(dc_node_t *n, uint64_t v, dc_status_t st, const dc_vstats_t *vs)
{
    dc_enc_wait_idle(n);
    if (st == DC_OK && (st = dc_mem_commit(n)) != DC_OK)
        dc_error_prefix("sender %u: version %llu committed, but its copy into the baseline",
                        n->me, (unsigned long long)v);
    dc_refit_version_stats_t o = {.size = sizeof(o), .version = v, .seconds = vs->seconds,
                                  .encode_s = vs->encode_s, .transfer_s = vs->transfer_s,
                                  .apply_s = vs->apply_s, .commit_s = vs->commit_s,
                                  .payload_bytes = vs->payload_bytes,
                                  .repair_bytes = vs->repair_bytes,
                                  .dense_bytes = vs->dense_bytes, .frames = vs->frames};
    /* the failure's words survive the callback */
    char why[1024] = "";
    if (st != DC_OK)
        snprintf(why, sizeof(why), "%s", dc_last_error());
    n->cfg->source->done(n->cfg->source->user, v, st, &o);
    if (st != DC_OK)
        dc_error(st, "%s", why);
    return st;
}

/* The coordinator's blocking wait for its own version v from the source,
 * serving the loop meanwhile.  DC_ERR_NOT_FOUND: no more versions. */
dc_status_t dc_mem_wait_next(dc_node_t *n, uint64_t v)
{
    for (;;) {
        int r = dc_mem_try(n, v);
        if (r == 1)
            return DC_OK;
        if (r < 0)
            return n->mem.end ? DC_ERR_NOT_FOUND : dc_last_status();
        if (n->finished)
            return n->result ? n->result : dc_error(DC_ERR_INTERNAL, "sender stopped");
        dc_node_step(n, 5);
    }
}

/* At the end of the run: the baseline copy and the last placement. */
void dc_mem_free(dc_node_t *n)
{
    free(n->mem.base);
    free(n->mem.off);
    free(n->mem.own);
    if (n->mem.next_ok)
        dc_place_fini(&n->mem.next);
}
