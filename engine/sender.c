/* sender.c - a sender that is not the coordinator (README.md "Several
 * senders"): it takes BEGIN / COMMIT / ABORT / BYE from the coordinator
 * over its control link, broadcasts the chunks it owns of each version
 * with the encoder threads (encoder.c), reports SENT (its chunks' target
 * digests) once they are all queued, and passes its subtree's upward
 * traffic on.  A memory sender (shard.c) starts a version once both the
 * BEGIN and its caller's push are there, and tells its caller at the end.
 *
 * Called from node.c's dispatcher (dc_sender_begin, dc_sender_end) and
 * loop (dc_sender_report_sent); dc_sender_run is its driver.
 */
#include "engine/node_internal.h"

#include <string.h>

/* A sender other than the coordinator, once every chunk it owns of the
 * version in flight is encoded and queued: SENT up the control link, with
 * the chunks' target digests (for the checkpoint digest). */
void dc_sender_report_sent(dc_node_t *n)
{
    if (n->is_root || !n->is_sender || !n->enc.in_flight || n->enc.sent_reported ||
        n->enc.sent < n->enc.total)
        return;
    n->enc.sent_reported = 1;
    size_t per = (n->net.rx_cap - DC_MSG_HDR_SIZE) / DC_SENT_ENTRY;
    uint32_t k = 0;
    do {
        uint32_t cnt = (uint32_t)DC_MIN((size_t)(n->enc.nbcast - k), per);
        size_t len = dc_sent_size(cnt);
        dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
        if (!b)
            return;
        dc_sent_t h = {.node = n->me,
                       .version = n->enc.vnum,
                       .payload_bytes = n->enc.payload_bytes,
                       .last = k + cnt >= n->enc.nbcast,
                       .n = cnt};
        dc_sent_pack(&h, b->data);
        pthread_mutex_lock(&n->mu);
        for (uint32_t e = 0; e < cnt; e++) {
            uint32_t c = n->enc.bcast[k + e];
            dc_sent_put(b->data, e, c, n->enc.digests[c]);
        }
        pthread_mutex_unlock(&n->mu);
        b->len = len;
        dc_send_up(n, b);
        dc_nbuf_unref(n, b);
        k += cnt;
    } while (k < n->enc.nbcast);
}

/* Start broadcasting version bg (its bytes are open: files or memory). */
static void dc_sender_start(dc_node_t *n, const dc_begin_t *bg, dc_status_t st)
{
    int first = !n->enc.threads;
    if (st == DC_OK && (bg->layout_id != n->layout->id || bg->nchunks != n->layout->nchunks))
        st = dc_error(DC_ERR_INVALID, "sender %u: version %llu has layout %016llx, the "
                      "coordinator's %016llx: different checkpoints", n->me,
                      (unsigned long long)bg->version, (unsigned long long)n->layout->id,
                      (unsigned long long)bg->layout_id);
    if (st == DC_OK && first) {
        st = dc_enc_alloc(n);
        if (st == DC_OK)
            st = dc_node_chunk_map(n);
        if (st == DC_OK)
            st = dc_enc_start(n);
    }
    if (st != DC_OK) {
        DC_LOG_ERROR("sender %u: %s", n->me, dc_last_error());
        dc_node_stop(n, st);
        return;
    }
    n->enc.vnum = bg->version;
    n->enc.vbase = bg->baseline;
    n->enc.mode = bg->mode == DC_MODE_DENSE ? DC_MODE_DENSE : DC_MODE_DELTA;
    n->enc.sent = 0;
    n->enc.sent_reported = 0;
    n->enc.payload_bytes = n->enc.repair_bytes = 0;
    n->enc.in_flight = 1;
    pthread_mutex_lock(&n->mu);
    memset(n->enc.dknown, 0, n->layout->nchunks ? n->layout->nchunks : 1);
    dc_enc_wq_clear(n);
    n->enc.cursor = 0;
    n->enc.total = n->enc.nbcast;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    DC_LOG_INFO("sender %u: version %llu: broadcasting %u of %u chunks", n->me,
                (unsigned long long)bg->version, n->enc.nbcast, n->layout->nchunks);
    dc_sender_report_sent(n); /* owns nothing anyone needs: SENT right away */
}

/* BEGIN v from the coordinator: open the version's files and broadcast the
 * chunks this sender owns (the same encoder threads as the coordinator's);
 * a memory sender starts once its caller hands the version over
 * (dc_sender_poll_memory). */
/* bgp: a BEGIN that dc_begin_parse accepted, from v - 1 (dc_node_handle). */
void dc_sender_begin(dc_node_t *n, const dc_begin_t *bgp)
{
    const dc_begin_t bg = *bgp;
    if (n->mem.pend && n->mem.bg.version == bg.version)
        return;
    if (n->enc.in_flight && n->enc.vnum == bg.version) {
        /* the version we broadcast, begun again: a new coordinator process
         * on a new control link (the old one died mid-version).  Our
         * chunks went out; SENT again, or it never learns so (no stall
         * repair, no re-send to receivers that re-joined: the version hung
         * until abort_ms) */
        n->enc.sent_reported = 0;
        dc_sender_report_sent(n);
        return;
    }
    dc_status_t st = DC_OK;
    if (n->cfg->source && bg.baseline != n->committed)
        st = dc_error(DC_ERR_INVALID, "sender %u holds version %llu (its state directory's "
                      "commit record, else initial_version), but the coordinator begins "
                      "version %llu from %llu: open it on the committed version's weights",
                      n->me, (unsigned long long)n->committed, (unsigned long long)bg.version,
                      (unsigned long long)bg.baseline);
    if (st == DC_OK && n->enc.in_flight) {
        /* another version in flight whose COMMIT / ABORT never came (a new
         * coordinator process, or a hostile one): end it first, so that no
         * encoder takes one of its chunks while its files are swapped under
         * it (one read a closed mapping: ASan, null dc_st_file_t in
         * dc_enc_frame).  Begun from it, it was committed. */
        dc_sender_end(n, n->enc.vnum, bg.baseline == n->enc.vnum ? DC_MSG_COMMIT : DC_MSG_ABORT);
    }
    if (st != DC_OK && n->cfg->source) {
        DC_LOG_ERROR("%s", dc_last_error());
        dc_node_stop(n, st);
        return;
    }
    if (st == DC_OK && n->cfg->source) {
        n->mem.pend = 1;
        n->mem.bg = bg;
        DC_LOG_INFO("sender %u: version %llu begun: waiting for its weights (push)", n->me,
                    (unsigned long long)bg.version);
        return;
    }
    if (st == DC_OK)
        st = dc_enc_open_version(n, bg.version);
    dc_sender_start(n, &bg, st);
}

/* A memory sender with a BEGIN pending: start once the caller handed the
 * version over. */
static void dc_sender_poll_memory(dc_node_t *n)
{
    if (!n->mem.pend || n->finished)
        return;
    int r = dc_mem_try(n, n->mem.bg.version);
    if (r == 0)
        return;
    n->mem.pend = 0;
    if (r < 0) {
        if (n->mem.end) /* closed before this version came: the job cannot go on */
            dc_error(DC_ERR_CANCELED, "sender %u: closed while version %llu was begun", n->me,
                     (unsigned long long)n->mem.bg.version);
        DC_LOG_ERROR("sender %u: %s", n->me, dc_last_error());
        dc_node_stop(n, dc_last_status() != DC_OK ? dc_last_status() : DC_ERR_INVALID);
        return;
    }
    dc_sender_start(n, &n->mem.bg, DC_OK);
}

/* COMMIT / ABORT / BYE (type): the version is over for this sender; a
 * memory sender tells its caller (committed: it becomes the baseline). */
void dc_sender_end(dc_node_t *n, uint64_t v, uint8_t type)
{
    if (n->mem.pend && (!v || n->mem.bg.version == v))
        n->mem.pend = 0; /* ended before our caller handed the version over */
    if (!n->enc.in_flight || (v && n->enc.vnum != v))
        return;
    n->enc.in_flight = 0;
    pthread_mutex_lock(&n->mu);
    n->enc.total = 0;
    n->enc.cursor = 0;
    dc_enc_wq_clear(n);
    pthread_mutex_unlock(&n->mu);
    if (n->cfg->source) {
        dc_status_t st = DC_OK;
        if (type == DC_MSG_ABORT)
            st = dc_error(DC_ERR_CANCELED, "version %llu aborted by the coordinator",
                          (unsigned long long)n->enc.vnum);
        else if (type != DC_MSG_COMMIT)
            st = dc_error(DC_ERR_CANCELED, "the job ended during version %llu",
                          (unsigned long long)n->enc.vnum);
        dc_vstats_t vs;
        memset(&vs, 0, sizeof(vs));
        vs.version = n->enc.vnum;
        vs.payload_bytes = n->enc.payload_bytes;
        vs.repair_bytes = n->enc.repair_bytes;
        vs.dense_bytes = n->layout->total_bytes;
        vs.frames = n->enc.sent;
        vs.encode_s = (double)n->enc.ns / 1e9;
        if (type == DC_MSG_COMMIT) {
            /* our own record of what our baseline is (a restart resumes it) */
            st = dc_node_record_commit(n, n->enc.vnum, n->enc.vbase, (dc_digest_t){0, 0});
        }
        if (dc_mem_done(n, n->enc.vnum, st, &vs) != DC_OK && type == DC_MSG_COMMIT)
            dc_node_stop(n, dc_last_status());
    }
}

/* A memory sender between loop steps: a version starts when both the
 * coordinator's BEGIN and the caller's push are there; closed with nothing
 * in flight, BYE is due from the coordinator (closed alongside): wait for
 * it a while, then stop. */
static int dc_sender_memory_step(dc_node_t *n)
{
    dc_sender_poll_memory(n);
    if (n->enc.in_flight || n->mem.pend || !n->cfg->source->closed(n->cfg->source->user))
        return 0;
    uint64_t now = dc_now_ns();
    if (!n->mem.closed_ns)
        n->mem.closed_ns = now;
    if (now - n->mem.closed_ns <= 2ull * n->timeout_ms * 1000000ull)
        return 0;
    DC_LOG_WARN("sender %u: closed, and no BYE from the coordinator within %u ms", n->me,
                2 * n->timeout_ms);
    return 1;
}

/* Runs until BYE: connects to the coordinator (its control link), serves
 * the children of its streams, and broadcasts its chunks of every version
 * the coordinator BEGINs. */
dc_status_t dc_sender_run(dc_node_t *n)
{
    DC_LOG_INFO("sender %u: serving its shards; the coordinator is node 0", n->me);
    if (!n->cfg->source) {
        dc_node_serve(n, 20, NULL);
        dc_enc_stop(n);
        return dc_node_outcome(n);
    }
    /* from memory: the version we hold, the layout, the chunks we send and
     * our baseline now (the caller may change its memory once open returns) */
    dc_status_t st = dc_node_load_committed(n);
    if (st == DC_OK)
        st = dc_mem_init(n);
    if (st == DC_OK)
        st = dc_enc_alloc(n);
    if (st == DC_OK)
        st = dc_node_chunk_map(n);
    if (st == DC_OK)
        st = dc_mem_baseline(n);
    if (st == DC_OK)
        st = dc_enc_start(n);
    if (st != DC_OK) {
        dc_enc_stop(n);
        return st;
    }
    dc_node_serve(n, 5, dc_sender_memory_step);
    dc_enc_stop(n);
    return dc_node_outcome(n);
}
