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

#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

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

/* Device sender: where the baseline copy lives and whether chunks are
 * encoded on the device (config device_encode, device_baseline), said
 * once.  total: the baseline's bytes. */
static dc_status_t dc_mem_dev_choice(dc_node_t *n, uint64_t total)
{
    const char *enc = dc_config_get("device_encode");
    const char *bl = dc_config_get("device_baseline");
    if (enc && *enc && strcmp(enc, "device") != 0 && strcmp(enc, "stage") != 0)
        return dc_error(DC_ERR_INVALID, "sender %u: device_encode '%s' is not device or stage",
                        n->me, enc);
    if (bl && *bl && strcmp(bl, "device") != 0 && strcmp(bl, "host") != 0 &&
        strcmp(bl, "auto") != 0)
        return dc_error(DC_ERR_INVALID,
                        "sender %u: device_baseline '%s' is not auto, device or host", n->me, bl);
    if (bl && strcmp(bl, "auto") == 0)
        bl = NULL;
    n->mem.dev_encode = !(enc && strcmp(enc, "stage") == 0);
    const char *where = "host memory";
    /* default: device memory when the device encode uses it and it fits */
    if (bl && *bl ? strcmp(bl, "device") == 0 : n->mem.dev_encode) {
        void *d = NULL;
        if (dc_kern_cuda_malloc(&d, total ? total : 1) == DC_OK) {
            n->mem.dbase = d;
            where = "device memory";
        } else if (bl && *bl) {
            return dc_error(DC_ERR_NOMEM, "sender %u: device_baseline=device, but no device "
                            "memory for the %llu-byte baseline copy: %s",
                            n->me, (unsigned long long)total, dc_last_error());
        } else {
            where = "host memory (no device memory for it)";
        }
    }
    if (n->mem.dev_encode)
        DC_LOG_INFO("sender %u: weights in device memory: device encode (diff, digest and "
                    "the model's inputs on the GPU, lists to the host for the entropy coding; "
                    "dense chunks staged); baseline copy in %s%s",
                    n->me, where,
                    n->mem.dbase ? "" : ", streamed to the device chunk by chunk");
    else
        DC_LOG_WARN("sender %u: weights in device memory: staging: device_encode=stage "
                    "(every chunk copied whole to the host); baseline copy in %s",
                    n->me, where);
    if (!n->mem.dbase && n->mem.dev_encode) {
        n->mem.patch = calloc(n->layout->nchunks ? n->layout->nchunks : 1,
                              sizeof(*n->mem.patch));
        if (!n->mem.patch)
            return dc_error(DC_ERR_NOMEM, "sender: out of memory");
    }
    return DC_OK;
}

/* The bytes of chunk c of placement p into our baseline copy (device:
 * device to device, segment by segment). */
static dc_status_t dc_mem_keep(dc_node_t *n, const dc_place_t *p, uint32_t c)
{
    if (!n->mem.dbase)
        return dc_place_read(p, c, n->mem.base + n->mem.off[c]);
    return dc_place_read_dev(p, c, n->mem.dbase + n->mem.off[c]);
}

/* A device sender's baseline copy in host memory, streamed to the device
 * chunk by chunk: page-locked (config device_baseline_lock), so the copies
 * run by DMA at the link's speed; a failure to lock is warned, the stream
 * then runs from pageable memory. */
static dc_status_t dc_mem_lock_base(dc_node_t *n, uint64_t total)
{
    int lock = 1;
    dc_status_t st = dc_config_get_bool("device_baseline_lock", &lock);
    if (st != DC_OK) {
        dc_error_prefix("sender %u", n->me);
        return st;
    }
    if (!lock) {
        DC_LOG_INFO("sender %u: baseline copy in host memory pageable (device_baseline_lock=0)",
                    n->me);
    } else if (dc_kern_cuda_host_register(n->mem.base, total) == DC_OK) {
        n->mem.base_pinned = 1;
        DC_LOG_INFO("sender %u: baseline copy in host memory page-locked (%llu bytes)", n->me,
                    (unsigned long long)total);
    } else {
        DC_LOG_WARN("sender %u: baseline copy in host memory not page-locked (%s): streamed "
                    "to the device from pageable memory, slower", n->me, dc_last_error());
    }
    return DC_OK;
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
    dc_status_t st;
    if (n->cfg->cuda_mem && (st = dc_mem_dev_choice(n, total)) != DC_OK)
        return st;
    if (!n->mem.dbase) {
        n->mem.base = malloc(total ? total : 1);
        if (!n->mem.base)
            return dc_error(DC_ERR_NOMEM,
                            "sender: no memory for its baseline copy (%llu bytes)",
                            (unsigned long long)total);
        if (n->mem.dev_encode && total > 0 && (st = dc_mem_lock_base(n, total)) != DC_OK)
            return st;
    }
    dc_place_t p;
    st = dc_mem_place(n, &p, n->cfg->segs, n->cfg->nsegs);
    for (uint32_t k = 0; st == DC_OK && k < n->enc.nbcast; k++)
        st = dc_mem_keep(n, &p, n->enc.bcast[k]);
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

/* Device sender, host baseline: drop the kept changes (a new version, or
 * after the commit). */
static void dc_mem_patch_clear(dc_node_t *n)
{
    for (uint32_t c = 0; n->mem.patch && c < n->layout->nchunks; c++) {
        free(n->mem.patch[c].data);
        n->mem.patch[c] = (dc_mem_patch_t){0, NULL};
    }
}

void dc_mem_patch_keep(dc_node_t *n, uint32_t c, const uint32_t *pos, const uint8_t *xorv,
                       size_t count, unsigned w)
{
    if (!n->mem.patch)
        return;
    uint8_t *d = malloc(count * (4 + (size_t)w) + 1);
    if (d) {
        memcpy(d, pos, count * 4);
        memcpy(d + count * 4, xorv, count * w);
    }
    pthread_mutex_lock(&n->mu);
    free(n->mem.patch[c].data);
    n->mem.patch[c] = (dc_mem_patch_t){count, d}; /* NULL: copied back at the commit */
    pthread_mutex_unlock(&n->mu);
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
    dc_mem_patch_clear(n);
    if (n->mem.next_ok)
        dc_place_fini(&n->mem.next);
    n->mem.next_ok = 1;
    if (dc_mem_place(n, &n->mem.next, segs, nsegs) != DC_OK) {
        dc_error_prefix("sender %u: version %llu's placement", n->me, (unsigned long long)v);
        return -1;
    }
    return 1;
}

/* Memory sender: version v committed: it is the baseline of the next
 * (device baseline: device to device; host baseline of a device sender:
 * the chunk's kept changes applied, the chunk copied back only where none
 * were kept). */
static dc_status_t dc_mem_commit(dc_node_t *n)
{
    for (uint32_t k = 0; k < n->enc.nbcast; k++) {
        uint32_t c = n->enc.bcast[k];
        const dc_mem_patch_t *pt = n->mem.patch ? &n->mem.patch[c] : NULL;
        dc_status_t st;
        if (pt && pt->data) {
            const dc_layout_chunk_t *lc = &n->layout->chunks[c];
            unsigned w = n->layout->tensors[lc->tensor].esize;
            st = dc_kern_xor_scatter(n->mem.base + n->mem.off[c], lc->len / w, w,
                                     (const uint32_t *)pt->data, pt->data + pt->count * 4,
                                     pt->count);
            if (st != DC_OK)
                return st;
            continue;
        }
        if ((st = dc_mem_keep(n, &n->mem.next, c)) != DC_OK)
            return st;
    }
    dc_mem_patch_clear(n);
    return DC_OK;
}

/* Memory sender: version v ended (committed: it becomes our baseline);
 * tell the source, once no encoder reads its memory any more. */
dc_status_t dc_mem_done(dc_node_t *n, uint64_t v, dc_status_t st, const dc_vstats_t *vs)
{
    dc_enc_wait_idle(n);
    if (st != DC_OK)
        dc_mem_patch_clear(n);
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
    if (n->mem.dev_encode || n->mem.dbase)
        DC_LOG_INFO("sender %u: device encode: %llu chunks encoded on the device, %llu staged "
                    "through the host; PCIe H2D %llu bytes (baseline stream), D2H %llu bytes "
                    "(lists)", n->me, (unsigned long long)n->mem.dev_chunks,
                    (unsigned long long)n->mem.staged, (unsigned long long)n->mem.pcie_h2d,
                    (unsigned long long)n->mem.pcie_d2h);
    dc_mem_patch_clear(n);
    free(n->mem.patch);
    dc_kern_cuda_free(n->mem.dbase);
    if (n->mem.base_pinned)
        dc_kern_cuda_host_unregister(n->mem.base);
    free(n->mem.base);
    free(n->mem.off);
    free(n->mem.own);
    if (n->mem.next_ok)
        dc_place_fini(&n->mem.next);
}
