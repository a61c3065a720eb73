/* receiver.c - the receiver role (n->rx): frames are applied in place
 * through the placement map, under the journal (journal.h): an XOR only
 * onto PENDING baseline bytes, overwrites otherwise; the chunk digest is
 * verified before the ACK (batched, dc_rx_ack) or a NEED asks for an
 * overwrite.  COMMIT writes the node's own commit record and answers DONE;
 * ABORT undoes (an xor frame again, the undo record of a put-sparse or
 * ctx-sparse frame / restore the undo copy) or marks the node for a
 * dense refit; BYE checks the node holds the job's last version (a version
 * in flight that the job did not commit is undone first, as its ABORT
 * would have: the ABORT may not have reached a node cut off from the tree).
 *
 * Messages come from node.c's dispatcher (after a relay forwarded them),
 * ACK / NEED / DONE / HELLO go up through peer.c (dc_send_up) to the
 * coordinator (coord.c).  dc_rx_run opens the weights and serves.
 */
#include "engine/node_internal.h"
#include "engine/devpath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

void dc_rx_flush_acks(dc_node_t *n)
{
    if (n->rx.ack_n == 0)
        return;
    dc_send_up_simple(n, DC_MSG_ACK, 0, n->rx.cur.v, n->rx.cur.b, n->rx.ack_lo, n->rx.ack_n);
    n->rx.ack_n = 0;
}

/* A receiver applies (and acks) only the chunks of the shards it needs;
 * the bytes of the others are left alone. */
static int dc_rx_needs(const dc_node_t *n, uint32_t c)
{
    return n->plan.chunk_shard && n->layout && c < n->layout->nchunks &&
           ((n->rx.need_mask >> n->plan.chunk_shard[c]) & 1);
}

static void dc_rx_ack(dc_node_t *n, uint32_t c)
{
    if (n->is_sender)
        return;
    if (n->rx.ack_n && n->rx.ack_lo + n->rx.ack_n == c && n->rx.ack_n < 4096) {
        n->rx.ack_n++;
        return;
    }
    dc_rx_flush_acks(n);
    n->rx.ack_lo = c;
    n->rx.ack_n = 1;
}

static void dc_rx_need(dc_node_t *n, uint32_t c, uint32_t count)
{
    n->rx.repairs += count;
    dc_rx_flush_acks(n);
    dc_send_up_simple(n, DC_MSG_NEED, 0, n->rx.cur.v, n->rx.cur.b, c, count);
}

/* The embedder canceled: leave the job (the loop ends; nothing more is
 * applied, the journal holds what was). */
static void dc_rx_cancel(dc_node_t *n)
{
    if (n->finished)
        return;
    if (n->rx.cur.active)
        dc_error(DC_ERR_CANCELED, "node %u: canceled by its caller: left the job with version "
                 "%llu in flight (its journal records what was applied)", n->me,
                 (unsigned long long)n->rx.cur.v);
    else
        dc_error(DC_ERR_CANCELED, "node %u: canceled by its caller: left the job", n->me);
    DC_LOG_INFO("%s", dc_last_error());
    dc_node_stop(n, DC_ERR_CANCELED);
}

/* Tell the embedder (dc_refit_receiver_*), if any: on the node's thread. */
static void dc_rx_event(dc_node_t *n, int type, unsigned flags, uint64_t v, uint64_t b,
                        dc_digest_t d, const char *msg)
{
    const dc_node_sink_t *k = n->cfg->sink;
    if (!k || !k->event)
        return;
    dc_node_event_t ev = {.type = type, .flags = flags, .v = v, .b = b, .digest_lo = d.lo,
                          .digest_hi = d.hi, .bytes = n->rx.version_bytes,
                          .apply_ns = n->rx.apply_ns, .repairs = n->rx.repairs, .msg = msg};
    k->event(k->user, &ev);
    /* a hold or cancel asked for by the callback takes effect now (before
     * the frames that follow in this turn of the loop) */
    unsigned want = k->control ? k->control(k->user) : 0;
    if (want & DC_NODE_CTL_CANCEL) {
        dc_rx_cancel(n);
        return;
    }
    int took = (want & DC_NODE_CTL_HOLD) != 0;
    if (took && !n->rx.held) {
        n->rx.held = 1;
        n->rx.hold_report_ns = 0;
    }
    if (k->state)
        k->state(k->user, n->rx.held, n->rx.staged_bytes, took);
}

/* Forget what is staged (the version it belongs to ended, or the node). */
static void dc_rx_unstage(dc_node_t *n)
{
    for (uint32_t c = 0; n->rx.staged && n->layout && c < n->layout->nchunks; c++) {
        free(n->rx.staged[c]);
        n->rx.staged[c] = NULL;
        n->rx.staged_len[c] = 0;
    }
    n->rx.nstaged = 0;
    n->rx.staged_bytes = 0;
}

/* Keep what undoes chunk c's frame if the version aborts: an xor-sparse or
 * xor-dense frame is its own inverse (applied again, it gives the baseline
 * back), so the frame itself; a put-sparse or ctx-sparse frame is not (its
 * values are new words or steps, ctx's positions depend on the baseline's
 * values), so the xor-sparse frame of the XOR words the codec just applied.
 * Without one (out of memory) an abort marks the chunk for a dense refit. */
static void dc_rx_retain_undo(dc_node_t *n, uint32_t c, const dc_frame_hdr_t *fh,
                              const uint8_t *body, size_t body_len, size_t elems, unsigned esize)
{
    unsigned kind = dc_enc_kind(fh->encoding);
    if (kind == DC_ENC_XOR_SPARSE || kind == DC_ENC_XOR_DENSE) {
        n->rx.retained[c] = malloc(body_len);
        if (n->rx.retained[c]) {
            memcpy(n->rx.retained[c], body, body_len);
            n->rx.retained_len[c] = body_len;
        }
        return;
    }
    size_t cap = dc_codec_payload_bound(elems * esize), len;
    uint8_t *f = malloc(DC_FRAME_HEADER_SIZE + cap);
    uint16_t enc;
    if (!f)
        return;
    if (dc_codec_undo_payload(n->rx.codec, elems, esize, f + DC_FRAME_HEADER_SIZE, cap, &len,
                              &enc) != DC_OK) {
        DC_LOG_WARN("node %u: chunk %u: no undo record: %s", n->me, c, dc_last_error());
        free(f);
        return;
    }
    dc_frame_hdr_t uh = *fh;
    uh.encoding = enc;
    uh.payload_len = (uint32_t)len;
    uh.payload_crc = dc_crc32c(0, f + DC_FRAME_HEADER_SIZE, len);
    dc_frame_encode(&uh, f);
    uint8_t *shrunk = realloc(f, DC_FRAME_HEADER_SIZE + len);
    n->rx.retained[c] = shrunk ? shrunk : f;
    n->rx.retained_len[c] = DC_FRAME_HEADER_SIZE + len;
}

static void dc_rx_drop_version(dc_node_t *n)
{
    dc_devpath_forget(n);
    if (n->layout) {
        for (uint32_t c = 0; c < n->layout->nchunks; c++) {
            free(n->rx.retained[c]);
            n->rx.retained[c] = NULL;
            free(n->rx.undo[c]);
            n->rx.undo[c] = NULL;
        }
    }
    dc_rx_unstage(n);
    dc_journal_close(n->rx.j);
    n->rx.j = NULL;
    n->rx.cur.active = 0;
    n->rx.ack_n = 0;
}

static dc_status_t dc_rx_set_dense_needed(dc_node_t *n, int on)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/dense_needed", n->cfg->state_dir);
    n->rx.dense_needed = on;
    if (on) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return dc_error_errno(DC_ERR_IO, errno, "%s: create", path);
        int e = fsync(fd) != 0 ? errno : 0;
        close(fd);
        if (e)
            return dc_error_errno(DC_ERR_IO, e, "%s: fsync", path);
    } else if (unlink(path) != 0 && errno != ENOENT) {
        return dc_error_errno(DC_ERR_IO, errno, "%s: unlink", path);
    }
    return dc_engine_fsync_dir(n->cfg->state_dir);
}

static dc_status_t dc_rx_local_commit(dc_node_t *n, uint64_t v, uint64_t b, dc_digest_t ckpt)
{
    if (n->cfg->durable && n->rx.wfile) {
        dc_status_t st = dc_st_sync(n->rx.wfile);
        if (st != DC_OK)
            return st;
    }
    dc_status_t st = dc_node_record_commit(n, v, b, ckpt);
    if (st != DC_OK)
        return st;
    dc_journal_remove(n->cfg->state_dir);
    if (n->rx.dense_needed)
        dc_rx_set_dense_needed(n, 0);
    return DC_OK;
}

/* DONE: apply time, bytes received, the up parent, then the bytes received
 * from each parent link in this version. */
static void dc_rx_send_done(dc_node_t *n, uint64_t v, uint8_t flags)
{
    uint8_t m[DC_MSG_HDR_SIZE + DC_DONE_BODY + DC_DONE_MAX_LINKS * DC_DONE_LINK];
    dc_done_t d = {.node = n->me,
                   .flags = flags,
                   .version = v,
                   .committed = n->committed,
                   .apply_ns = n->rx.apply_ns,
                   .bytes = n->rx.version_bytes,
                   .up_parent = n->net.up_id};
    for (size_t i = 0; i < n->net.npeers && d.nlinks < DC_DONE_MAX_LINKS; i++) {
        dc_peer_t *p = n->net.peers[i];
        if (!p->is_parent || p->node >= n->nnodes || !p->vbytes)
            continue;
        d.link_parent[d.nlinks] = p->node;
        d.link_bytes[d.nlinks] = p->vbytes;
        d.nlinks++;
    }
    dc_done_pack(&d, m);
    dc_rx_flush_acks(n);
    dc_nbuf_t *b = dc_nbuf_copy(n, m, dc_done_size(d.nlinks));
    if (b) {
        dc_send_up(n, b);
        dc_nbuf_unref(n, b);
    }
}

/* This node cannot go on with version v (code DC_FAIL_*): log the error
 * dc_error() just set, stop with it, and tell the coordinator why (a FAIL
 * up, drained by dc_node_serve before the node closes its links) so that
 * the root fails v at once instead of waiting abort_ms for a silent node.
 * A layout mismatch carries this node's first tensors (name hash, element
 * count, dtype) for the root to name the first one that differs. */
static void dc_rx_fail(dc_node_t *n, uint32_t code, uint64_t v)
{
    dc_status_t st = dc_last_status() != DC_OK ? dc_last_status() : DC_ERR_IO;
    char why[DC_FAIL_TEXT_MAX + 1];
    snprintf(why, sizeof(why), "%s", dc_last_error());
    DC_LOG_ERROR("node %u: %s", n->me, why);
    dc_node_stop(n, st);
    const dc_layout_t *l = n->layout;
    uint32_t ne = code == DC_FAIL_LAYOUT && l ? DC_MIN(l->ntensors, DC_FAIL_MAX_TENSORS) : 0;
    dc_fail_t f = {.node = n->me, .code = code, .version = v,
                   .chunk_size = l ? l->chunk_size : n->chunk_size,
                   .ntensors = l ? l->ntensors : 0, .text_len = (uint32_t)strlen(why),
                   .text = (const uint8_t *)why, .n = ne};
    dc_nbuf_t *b = dc_nbuf_new(n, dc_fail_size(f.text_len, ne), 0, 0);
    if (!b)
        return;
    dc_fail_pack(&f, b->data);
    for (uint32_t e = 0; e < ne; e++)
        dc_fail_put(b->data, f.text_len, e, XXH3_64bits(l->tensors[e].name,
                                                        strlen(l->tensors[e].name)),
                    l->tensors[e].nelems, (uint32_t)l->tensors[e].dtype);
    b->len = dc_fail_size(f.text_len, ne);
    dc_rx_flush_acks(n);
    dc_send_up(n, b);
    dc_nbuf_unref(n, b);
    n->rx.fail_sent = 1;
}

/* The chunks this receiver needs, for dc_journal_content(). */
static int dc_rx_needs_fn(const void *arg, uint64_t c)
{
    const dc_node_t *n = arg;
    return c < UINT32_MAX && dc_rx_needs(n, (uint32_t)c);
}

/* bgp: a BEGIN that dc_begin_parse accepted (dc_node_handle).  Nothing is
 * acknowledged here by number: a chunk counts as done only once its bytes
 * were checked against the target digest of a frame of this version (the
 * coordinator may have been restarted with other bytes under the same
 * version number, or this node's record may be ahead of the job). */
void dc_rx_begin(dc_node_t *n, const dc_begin_t *bgp)
{
    const dc_begin_t bg = *bgp;
    if (bg.layout_id != n->layout->id || bg.nchunks != n->layout->nchunks) {
        dc_error(DC_ERR_INVALID,
                 "layout mismatch with the root: version %llu has layout %016llx (%u chunks), "
                 "this node's checkpoint %016llx (%u tensors, %u chunks of %llu bytes): "
                 "cannot take it",
                 (unsigned long long)bg.version, (unsigned long long)bg.layout_id, bg.nchunks,
                 (unsigned long long)n->layout->id, n->layout->ntensors, n->layout->nchunks,
                 (unsigned long long)n->layout->chunk_size);
        dc_rx_fail(n, DC_FAIL_LAYOUT, bg.version);
        return;
    }
    if (n->rx.cur.active && n->rx.cur.v == bg.version)
        return; /* replay of the BEGIN we are working on */
    if (n->rx.cur.active)
        dc_rx_drop_version(n);
    uint32_t nch = n->layout->nchunks;
    /* the baseline by number and, where the coordinator names it, by
     * content (its record's checkpoint digest) */
    int base_content = dc_digest_zero(bg.base_ckpt) ||
                       dc_digest_eq(bg.base_ckpt, n->committed_ckpt);
    int on_base = n->committed == bg.baseline && base_content && !n->rx.dense_needed;
    int verify = !on_base && n->committed >= bg.baseline && !n->rx.dense_needed;
    if (verify)
        DC_LOG_WARN("node %u: this node's record names version %llu%s, the coordinator "
                    "begins version %llu from version %llu: checking every chunk against "
                    "the coordinator's digests before taking anything",
                    n->me, (unsigned long long)n->committed,
                    base_content ? "" : " with other content", (unsigned long long)bg.version,
                    (unsigned long long)bg.baseline);
    dc_journal_info_t in = {.target = bg.version, .baseline = bg.baseline, .nchunks = nch,
                            .layout_id = n->layout->id};
    int resumed = 0;
    dc_status_t st = dc_journal_open(n->cfg->state_dir, &in,
                                     n->cfg->durable ? DC_JOURNAL_DURABLE : 0, 8, &n->rx.j,
                                     &resumed);
    if (st != DC_OK) {
        dc_rx_fail(n, DC_FAIL_IO, bg.version);
        return;
    }
    n->rx.cur.active = 1;
    n->rx.cur.v = bg.version;
    n->rx.cur.b = bg.baseline;
    n->rx.cur.mode = bg.mode;
    n->rx.cur.on_base = on_base;
    n->rx.cur.verify = verify;
    n->rx.apply_ns = 0;
    n->rx.version_bytes = 0;
    n->rx.repairs = 0;
    for (size_t i = 0; i < n->net.npeers; i++)
        n->net.peers[i]->vbytes = 0;
    {
        unsigned ef = (n->rx.dense_needed || bg.mode == DC_MODE_DENSE ? DC_NODE_EVF_DENSE : 0) |
                      (n->rx.held ? DC_NODE_EVF_HELD : 0) | (n->rx.cold ? DC_NODE_EVF_COLD : 0);
        char msg[200];
        snprintf(msg, sizeof(msg), "version %llu begins (from version %llu): %s%s",
                 (unsigned long long)bg.version, (unsigned long long)bg.baseline,
                 n->rx.cold ? "cold start: dense (this node holds no version yet: every chunk "
                              "comes as an overwrite)"
                 : n->rx.dense_needed    ? "dense (this node's bytes are unknown: marked for a "
                                           "dense refit)"
                 : bg.mode == DC_MODE_DENSE ? "dense (the root sends whole chunks)"
                 : verify                   ? "each chunk checked against its digest first"
                                            : "delta",
                 n->rx.held ? "; held: staged until release" : "");
        if (n->rx.cold)
            DC_LOG_INFO("node %u: %s", n->me, msg);
        dc_rx_event(n, DC_NODE_EV_BEGIN, ef, bg.version, bg.baseline, (dc_digest_t){0, 0},
                    msg);
    }
    if (resumed)
        DC_LOG_INFO("node %u: resuming version %llu: %llu applied (each checked against "
                    "its frame's digest), %llu applying, %llu pending",
                    n->me, (unsigned long long)bg.version,
                    (unsigned long long)dc_journal_count(n->rx.j, DC_JSTATE_APPLIED),
                    (unsigned long long)dc_journal_count(n->rx.j, DC_JSTATE_APPLYING),
                    (unsigned long long)dc_journal_count(n->rx.j, DC_JSTATE_PENDING));
    /* What this node cannot take from the broadcast: ask for overwrites
     * (a node that verifies asks per chunk, once its frame says whether its
     * bytes are the target already). */
    uint32_t run = 0, lo = 0;
    for (uint32_t c = 0; c <= nch; c++) {
        int s = c < nch ? dc_journal_state(n->rx.j, c) : DC_JSTATE_APPLIED;
        int need = c < nch && bg.mode == DC_MODE_DELTA && dc_rx_needs(n, c) &&
                   dc_journal_need(s, n->rx.cur.on_base) == DC_NEED_OVERWRITE &&
                   !(verify && s == DC_JSTATE_PENDING);
        if (need) {
            if (!run)
                lo = c;
            run++;
        } else if (run) {
            dc_rx_need(n, lo, run);
            run = 0;
        }
    }
    dc_rx_flush_acks(n);
}

/* The digest of chunk c's bytes as this node holds them now. */
static dc_status_t dc_rx_chunk_digest(dc_node_t *n, uint32_t c, dc_digest_t *d)
{
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    int dr = n->rx.dev ? dc_devpath_digest(n, c, d) : DC_DEV_STAGE;
    if (dr != DC_DEV_STAGE)
        return dr == DC_DEV_DONE ? DC_OK : dc_last_status();
    uint8_t *ptr = dc_place_chunk_ptr(&n->rx.place, c);
    if (!ptr) {
        dc_status_t st = dc_place_read(&n->rx.place, c, n->scratch);
        if (st != DC_OK)
            return st;
        ptr = n->scratch;
    }
    *d = dc_digest128(ptr, lc->len);
    return DC_OK;
}

/* Test hook DELTACAST_ENGINE_CRASH_AT=<chunk> (off by default): die by
 * SIGKILL in the middle of applying that chunk, with half of its new bytes
 * written, as a crash mid-apply would leave it. */
static void dc_rx_crash_mid_apply(dc_node_t *n, const dc_frame_hdr_t *fh,
                                  const uint8_t *payload, uint8_t *work, uint64_t len,
                                  uint32_t esize)
{
    uint8_t *tmp = malloc(len);
    if (tmp) {
        memcpy(tmp, work, len);
        if (dc_codec_decode(n->rx.codec, fh->encoding, payload, fh->payload_len, tmp, len / esize,
                            esize) == DC_OK)
            memcpy(work, tmp, len / 2);
    }
    DC_LOG_WARN("node %u: DELTACAST_ENGINE_CRASH_AT: killing myself mid-apply", n->me);
    raise(SIGKILL);
}

/* The weights' memory failed us (a CUDA error: device memory cannot be
 * read or written any more): stop this node; its journal tells a restart
 * which chunks to repair. */
static void dc_rx_mem_fail(dc_node_t *n)
{
    dc_rx_fail(n, DC_FAIL_MEMORY, n->rx.cur.v);
}

/* Keep chunk c's frame (body: header and CRC-checked payload) to apply at
 * release: the compact payload, never a dense copy of the chunk. */
static void dc_rx_stage(dc_node_t *n, uint32_t c, const uint8_t *body, size_t body_len)
{
    if (n->rx.staged[c]) {
        n->rx.staged_bytes -= n->rx.staged_len[c];
        free(n->rx.staged[c]);
        n->rx.nstaged--;
    }
    n->rx.staged[c] = malloc(body_len ? body_len : 1);
    if (!n->rx.staged[c]) {
        /* asked for again at release */
        DC_LOG_WARN("node %u: cannot stage chunk %u (%zu bytes, out of memory): it is asked "
                    "for again at release", n->me, c, body_len);
        n->rx.staged_len[c] = UINT32_MAX;
        return;
    }
    memcpy(n->rx.staged[c], body, body_len);
    n->rx.staged_len[c] = (uint32_t)body_len;
    n->rx.staged_bytes += body_len;
    n->rx.nstaged++;
}

static void dc_rx_take(dc_node_t *n, uint32_t c, const uint8_t *body, size_t body_len);

void dc_rx_frame(dc_node_t *n, const dc_msg_t *m, dc_nbuf_t *b)
{
    (void)b;
    if (!n->rx.cur.active || m->version != n->rx.cur.v || n->finished)
        return;
    if (m->node != DC_NODE_ALL && m->node != n->me)
        return;
    if (m->chunk >= n->layout->nchunks) {
        DC_LOG_WARN("node %u: bad frame: chunk %u of %u", n->me, m->chunk, n->layout->nchunks);
        return;
    }
    if (!dc_rx_needs(n, m->chunk))
        return; /* a shard this node does not take: relayed only */
    dc_rx_take(n, m->chunk, m->body, m->body_len);
}

/* Chunk c's frame (from the parent, or staged): checked, then applied in
 * place under the journal and acknowledged, or asked for again; while the
 * node is held, kept (dc_rx_stage) instead of written. */
static void dc_rx_take(dc_node_t *n, uint32_t c, const uint8_t *body, size_t body_len)
{
    const dc_layout_t *l = n->layout;
    dc_frame_hdr_t fh;
    if (dc_frame_decode(body, body_len, &fh) != DC_OK ||
        (uint64_t)body_len != DC_FRAME_HEADER_SIZE + (uint64_t)fh.payload_len) {
        DC_LOG_WARN("node %u: bad frame for chunk %u: %s", n->me, c, dc_last_error());
        return;
    }
    const dc_layout_chunk_t *lc = &l->chunks[c];
    const dc_layout_tensor_t *lt = &l->tensors[lc->tensor];
    if (fh.tensor_id != lc->tensor || fh.chunk_index != lc->index ||
        fh.elem_offset != lc->offset / lt->esize || fh.elem_count != lc->len / lt->esize ||
        fh.dtype != (uint8_t)lt->dtype || fh.target_version != n->rx.cur.v) {
        DC_LOG_WARN("node %u: frame for chunk %u does not match the layout", n->me, c);
        return;
    }
    const uint8_t *payload = body + DC_FRAME_HEADER_SIZE;
    if (dc_frame_check_payload(&fh, payload, fh.payload_len) != DC_OK) {
        DC_LOG_WARN("node %u: chunk %u: %s", n->me, c, dc_last_error());
        dc_rx_need(n, c, 1);
        return;
    }
    int state = dc_journal_state(n->rx.j, c);
    unsigned kind = dc_enc_kind(fh.encoding);
    int xor_kind = dc_enc_needs_base(kind);
    if (state == DC_JSTATE_APPLIED) {
        /* applied before (a duplicate, or a journal resumed after a
         * restart): never applied twice, and done only if what was applied
         * is what this frame's version is */
        if (dc_digest_eq(dc_journal_digest(n->rx.j, c), fh.target_digest)) {
            dc_rx_ack(n, c);
            return;
        }
        DC_LOG_WARN("node %u: chunk %u was applied for version %llu with other content "
                    "than the coordinator's now: asking for an overwrite", n->me, c,
                    (unsigned long long)n->rx.cur.v);
        if (dc_journal_begin(n->rx.j, c) != DC_OK) { /* bytes neither baseline nor target */
            DC_LOG_ERROR("node %u: %s", n->me, dc_last_error());
            dc_node_stop(n, DC_ERR_IO);
            return;
        }
        state = DC_JSTATE_APPLYING;
        /* what undid the old frame (its retained XOR frame, or its record
         * on the device) does not undo what comes now: an abort must not
         * apply it to the overwrite's bytes and call them the baseline.
         * A full copy of the baseline (n->rx.undo[c], or a put-dense
         * chunk's undo copy on the device) still holds. */
        free(n->rx.retained[c]);
        n->rx.retained[c] = NULL;
        n->rx.retained_len[c] = 0;
        if (n->rx.dev)
            dc_devpath_drop_undo(n, c);
        if (xor_kind) {
            dc_rx_need(n, c, 1);
            return;
        }
    }
    if (n->rx.cur.verify && state == DC_JSTATE_PENDING && xor_kind) {
        /* this node's bytes are unknown: done if they are the target
         * already, else only an overwrite can fix them */
        dc_digest_t have;
        if (dc_rx_chunk_digest(n, c, &have) != DC_OK) {
            dc_rx_mem_fail(n);
            return;
        }
        if (dc_digest_eq(have, fh.target_digest) &&
            dc_journal_applied(n->rx.j, c, have) == DC_OK) {
            dc_rx_ack(n, c);
            return;
        }
        dc_rx_need(n, c, 1);
        return;
    }
    if (xor_kind && (state != DC_JSTATE_PENDING || !n->rx.cur.on_base ||
                     fh.baseline_version != n->committed)) {
        /* bytes are not the frame's baseline: only an overwrite can fix */
        dc_rx_need(n, c, 1);
        return;
    }
    if (n->rx.held) {
        /* the caller's engine is generating on these weights: keep it */
        dc_rx_stage(n, c, body, body_len);
        return;
    }
    uint64_t t0 = dc_now_ns();
    dc_digest_t d;
    int dr = n->rx.dev ? dc_devpath_frame(n, c, &fh, payload, state, &d) : DC_DEV_STAGE;
    if (dr == DC_DEV_DONE)
        goto applied;
    if (dr == DC_DEV_FAIL) {
        dc_rx_mem_fail(n);
        return;
    }
    if (dr == DC_DEV_BAD) {
        if (state == DC_JSTATE_PENDING)
            dc_journal_reset(n->rx.j, c);
        DC_LOG_WARN("node %u: chunk %u: %s", n->me, c, dc_last_error());
        dc_rx_need(n, c, 1);
        return;
    }
    uint8_t *ptr = dc_place_chunk_ptr(&n->rx.place, c);
    uint8_t *work = ptr;
    if (!ptr) {
        if (dc_place_read(&n->rx.place, c, n->scratch) != DC_OK) {
            dc_rx_mem_fail(n);
            return;
        }
        work = n->scratch;
    }
    if (!xor_kind && state == DC_JSTATE_PENDING && n->rx.cur.on_base &&
        n->rx.cur.mode == DC_MODE_DELTA && !n->rx.undo[c]) {
        n->rx.undo[c] = malloc(lc->len);
        if (n->rx.undo[c])
            memcpy(n->rx.undo[c], work, lc->len);
    }
    if (dc_journal_begin(n->rx.j, c) != DC_OK) {
        dc_rx_fail(n, DC_FAIL_IO, n->rx.cur.v);
        return;
    }
    if (DC_UNLIKELY(n->rx.crash_at == (int64_t)c))
        dc_rx_crash_mid_apply(n, &fh, payload, work, lc->len, lt->esize);
    /* patch in place and hash the result in the same pass (block by block,
     * while each block is in cache) */
    dc_status_t st = dc_codec_decode_digest(n->rx.codec, fh.encoding, payload, fh.payload_len,
                                            work, work, lc->len / lt->esize, lt->esize, NULL,
                                            &d);
    if (st != DC_OK) {
        /* the codec leaves dst untouched on error */
        if (state == DC_JSTATE_PENDING)
            dc_journal_reset(n->rx.j, c);
        DC_LOG_WARN("node %u: chunk %u: %s", n->me, c, dc_last_error());
        dc_rx_need(n, c, 1);
        return;
    }
    if (!ptr && dc_place_write(&n->rx.place, c, n->scratch) != DC_OK) {
        /* the journal says APPLYING: a restart repairs it with an overwrite */
        dc_rx_mem_fail(n);
        return;
    }
applied:
    n->rx.apply_ns += dc_now_ns() - t0;
    if (!dc_digest_eq(d, fh.target_digest)) {
        DC_LOG_WARN("node %u: chunk %u: target digest mismatch after apply; asking for an "
                    "overwrite", n->me, c);
        dc_rx_need(n, c, 1);
        return;
    }
    if (n->cfg->durable && n->rx.wfile) {
        /* the bytes reach the disk before the journal may say APPLIED */
        uint8_t *cp = dc_place_chunk_ptr(&n->rx.place, c);
        if (cp) {
            uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
            uintptr_t a = (uintptr_t)cp & ~(pg - 1);
            if (msync((void *)a, (size_t)((uintptr_t)cp + lc->len - a), MS_SYNC) != 0)
                DC_LOG_WARN("node %u: msync '%s' chunk %u: %s", n->me, dc_st_path(n->rx.wfile), c,
                            strerror(errno));
        } else if (dc_st_sync(n->rx.wfile) != DC_OK) {
            DC_LOG_WARN("node %u: %s", n->me, dc_last_error());
        }
    }
    if (xor_kind && n->rx.cur.mode == DC_MODE_DELTA && !dc_devpath_has_undo(n, c))
        dc_rx_retain_undo(n, c, &fh, body, body_len, lc->len / lt->esize, lt->esize);
    if (dc_journal_applied(n->rx.j, c, d) != DC_OK) {
        dc_rx_fail(n, DC_FAIL_IO, n->rx.cur.v);
        return;
    }
    dc_rx_ack(n, c);
}

/* COMMIT of v: the version in flight (every chunk this node needs applied
 * and verified), or, addressed to this node, the coordinator asking it to
 * show that it holds its committed v (its record names v with v's
 * checkpoint digest, or its journal of v is complete with the content hash
 * the coordinator computed).  DONE says which; nothing is taken by number. */
void dc_rx_commit(dc_node_t *n, const dc_msg_t *m)
{
    if (m->node != DC_NODE_ALL && m->node != n->me)
        return;
    dc_commit_msg_t cm;
    if (dc_commit_msg_parse(m, &cm) != DC_OK) {
        DC_LOG_WARN("node %u: dropping a bad COMMIT: %s", n->me, dc_last_error());
        return;
    }
    uint8_t flags = 0;
    if (n->rx.cur.active && n->rx.cur.v == m->version && n->rx.j) {
        uint32_t missing = 0, needed = 0;
        for (uint32_t c = 0; c < n->layout->nchunks; c++) {
            if (!dc_rx_needs(n, c))
                continue;
            needed++;
            missing += dc_journal_state(n->rx.j, c) != DC_JSTATE_APPLIED;
        }
        if (missing) {
            DC_LOG_ERROR("node %u: COMMIT %llu with %u of the %u chunks it needs applied",
                         n->me, (unsigned long long)m->version, needed - missing, needed);
            dc_rx_set_dense_needed(n, 1);
            dc_rx_event(n, DC_NODE_EV_ABORTED, DC_NODE_EVF_DENSE, m->version, n->rx.cur.b,
                        (dc_digest_t){0, 0}, "committed by the root with chunks missing here: "
                        "bytes unknown, marked for a dense refit");
            dc_rx_drop_version(n);
            flags = DC_DONE_F_DENSE | DC_DONE_F_NOT_HELD;
            goto done;
        }
        dc_journal_close(n->rx.j);
        n->rx.j = NULL;
        if (dc_rx_local_commit(n, m->version, n->rx.cur.b, cm.ckpt) != DC_OK) {
            DC_LOG_ERROR("node %u: version %llu is applied, but its local commit failed: %s",
                         n->me, (unsigned long long)m->version, dc_last_error());
            n->rx.commit_failed = 1;
            flags = DC_DONE_F_FAILED;
        } else {
            n->rx.cold = 0;
            dc_rx_event(n, DC_NODE_EV_COMMITTED, 0, m->version, n->rx.cur.b, cm.ckpt,
                        "committed");
        }
        dc_rx_drop_version(n);
        goto done;
    }
    if (n->committed == m->version && !n->rx.dense_needed &&
        (dc_digest_zero(cm.ckpt) || dc_digest_eq(cm.ckpt, n->committed_ckpt))) {
        n->rx.commit_failed = 0;
        goto done; /* holds it (e.g. a replay, or a confirmation) */
    }
    /* a complete journal of v whose content is the coordinator's */
    dc_journal_info_t ji;
    uint8_t *states = NULL;
    dc_digest_t *dg = NULL;
    int held = 0;
    if (!dc_digest_zero(cm.content) && !n->rx.cur.active &&
        dc_journal_load(n->cfg->state_dir, &ji, &states, &dg) == DC_OK &&
        ji.target == m->version && ji.nchunks == n->layout->nchunks &&
        ji.layout_id == n->layout->id)
        held = dc_digest_eq(dc_journal_content(states, dg, ji.nchunks, dc_rx_needs_fn, n),
                            cm.content);
    free(states);
    free(dg);
    if (!held) {
        DC_LOG_WARN("node %u: COMMIT %llu for a version it cannot show it holds (its record: "
                    "version %llu)", n->me, (unsigned long long)m->version,
                    (unsigned long long)n->committed);
        flags = DC_DONE_F_NOT_HELD | (n->rx.dense_needed ? DC_DONE_F_DENSE : 0);
        goto done;
    }
    if (dc_rx_local_commit(n, m->version, ji.baseline, cm.ckpt) != DC_OK) {
        DC_LOG_ERROR("node %u: version %llu is applied, but its local commit failed: %s",
                     n->me, (unsigned long long)m->version, dc_last_error());
        n->rx.commit_failed = 1;
        flags = DC_DONE_F_FAILED;
    } else {
        n->rx.commit_failed = 0;
        n->rx.cold = 0;
        DC_LOG_INFO("node %u: version %llu committed from its journal (content checked)",
                    n->me, (unsigned long long)m->version);
        dc_rx_event(n, DC_NODE_EV_COMMITTED, 0, m->version, ji.baseline, cm.ckpt,
                    "committed from its journal (content checked)");
    }
done:
    dc_rx_send_done(n, m->version, flags);
}

/* Undo the version in flight (v): every chunk back to the baseline from
 * its undo record or retained frame; a chunk that cannot be undone marks
 * the node for a dense refit.  Returns 1 when it did. */
static int dc_rx_undo_version(dc_node_t *n, uint64_t v)
{
    const dc_layout_t *l = n->layout;
    int dense = 0;
    uint32_t undone = 0;
    for (uint32_t c = 0; c < l->nchunks; c++) {
        int s = dc_journal_state(n->rx.j, c);
        if (s == DC_JSTATE_PENDING)
            continue;
        const dc_layout_chunk_t *lc = &l->chunks[c];
        const dc_layout_tensor_t *lt = &l->tensors[lc->tensor];
        if (n->rx.dev && !n->rx.undo[c] &&
            ((s == DC_JSTATE_APPLIED && (n->rx.retained[c] || dc_devpath_has_undo(n, c))) ||
             dc_devpath_has_copy(n, c))) {
            /* the retained XOR frame or the device's undo record (a
             * put-dense chunk's undo copy: also a chunk left APPLYING), on
             * the device */
            int dr = dc_devpath_undo(n, c);
            if (dr == DC_DEV_DONE) {
                dc_journal_reset(n->rx.j, c);
                undone++;
                continue;
            }
            if (dr != DC_DEV_STAGE) {
                DC_LOG_WARN("node %u: chunk %u: undo on the device: %s", n->me, c,
                            dc_last_error());
                dense = 1;
                continue;
            }
        }
        uint8_t *ptr = dc_place_chunk_ptr(&n->rx.place, c);
        uint8_t *work = ptr;
        if (!ptr) {
            if (dc_place_read(&n->rx.place, c, n->scratch) != DC_OK) {
                dense = 1;
                continue;
            }
            work = n->scratch;
        }
        int ok = 0;
        if (n->rx.undo[c]) {
            memcpy(work, n->rx.undo[c], lc->len);
            ok = 1;
        } else if (s == DC_JSTATE_APPLIED && n->rx.retained[c]) {
            dc_frame_hdr_t fh;
            /* XOR is self-inverse: applying the same frame again undoes it */
            if (dc_frame_decode(n->rx.retained[c], n->rx.retained_len[c], &fh) == DC_OK &&
                dc_codec_decode(n->rx.codec, fh.encoding, n->rx.retained[c] + DC_FRAME_HEADER_SIZE,
                                fh.payload_len, work, lc->len / lt->esize,
                                lt->esize) == DC_OK)
                ok = 1;
        }
        if (ok && !ptr && dc_place_write(&n->rx.place, c, n->scratch) != DC_OK)
            ok = 0;
        if (ok) {
            dc_journal_reset(n->rx.j, c);
            undone++;
        } else {
            dense = 1;
        }
    }
    DC_LOG_INFO("node %u: version %llu aborted: %u chunks returned to baseline%s", n->me,
                (unsigned long long)v, undone,
                dense ? "; some bytes unknown: marked for dense refit" : "");
    dc_rx_unstage(n); /* staged frames were never applied: nothing to undo */
    {
        char msg[160];
        snprintf(msg, sizeof(msg), "aborted: %u chunks returned to version %llu%s", undone,
                 (unsigned long long)n->rx.cur.b,
                 dense ? "; some bytes unknown: marked for a dense refit" : "");
        dc_rx_event(n, DC_NODE_EV_ABORTED, dense ? DC_NODE_EVF_DENSE : 0, v, n->rx.cur.b,
                    (dc_digest_t){0, 0}, msg);
    }
    if (dense)
        dc_rx_set_dense_needed(n, 1);
    if (n->cfg->durable && n->rx.wfile)
        dc_st_sync(n->rx.wfile);
    dc_rx_drop_version(n);
    dc_journal_remove(n->cfg->state_dir);
    return dense;
}

void dc_rx_abort(dc_node_t *n, const dc_msg_t *m)
{
    if (!n->rx.cur.active || n->rx.cur.v != m->version) {
        dc_rx_send_done(n, m->version, n->rx.dense_needed ? DC_DONE_F_DENSE : 0);
        return;
    }
    int dense = dc_rx_undo_version(n, m->version);
    dc_rx_send_done(n, m->version, dense ? DC_DONE_F_DENSE : 0);
}

/* BYE: the job ended at version v (checkpoint digest ckpt).  A receiver
 * that does not hold exactly that says so and exits non-zero: no run ends
 * with other bytes and exit 0. */
void dc_rx_bye(dc_node_t *n, uint64_t v, dc_digest_t ckpt)
{
    /* A version in flight here that the job did not commit: its ABORT
     * never reached this node (cut off from the tree when it was sent), so
     * undo it now, as the ABORT would have: the run must not end with the
     * bytes half way to a version nobody committed. */
    if (n->rx.cur.active && n->rx.cur.v > v && n->committed == v) {
        DC_LOG_WARN("node %u: the job ended at version %llu with version %llu in flight here "
                    "(no ABORT reached this node): undoing it",
                    n->me, (unsigned long long)v, (unsigned long long)n->rx.cur.v);
        dc_rx_undo_version(n, n->rx.cur.v);
    }
    const char *why = NULL;
    if (n->rx.commit_failed)
        why = "its last local commit failed";
    else if (n->rx.dense_needed)
        why = "its bytes are unknown (marked for a dense refit)";
    else if (n->committed != v)
        why = "it holds another version";
    else if (!dc_digest_zero(ckpt) && !dc_digest_eq(ckpt, n->committed_ckpt))
        why = "its record names other content for that version";
    if (!why)
        return;
    dc_error(DC_ERR_VERIFY, "node %u: the job ended at version %llu, but this node's record "
             "names version %llu: %s", n->me, (unsigned long long)v,
             (unsigned long long)n->committed, why);
    DC_LOG_ERROR("%s", dc_last_error());
    dc_node_stop(n, DC_ERR_VERIFY); /* after the BYE went on to the children (dc_node_serve
                                       drains) */
}

/* HELLO for a new parent edge: committed version and journal. */
dc_nbuf_t *dc_rx_hello(dc_node_t *n)
{
    dc_hello_t h = {.node = n->me, .committed = n->committed, .layout_id = n->layout->id};
    dc_journal_info_t ji;
    uint8_t *states = NULL;
    if (n->rx.j) {
        const dc_journal_info_t *i = dc_journal_info(n->rx.j);
        ji = *i;
        states = malloc(ji.nchunks ? ji.nchunks : 1);
        for (uint64_t c = 0; states && c < ji.nchunks; c++)
            states[c] = (uint8_t)dc_journal_state(n->rx.j, c);
    } else if (dc_journal_load(n->cfg->state_dir, &ji, &states, NULL) != DC_OK) {
        states = NULL;
    }
    if (states) {
        h.j_target = ji.target;
        h.j_baseline = ji.baseline;
        h.nstates = (uint32_t)ji.nchunks;
        h.states = states;
        h.flags |= DC_HELLO_F_JOURNAL;
    }
    if (n->rx.dense_needed)
        h.flags |= DC_HELLO_F_DENSE_NEEDED;
    size_t len = dc_hello_size(h.nstates);
    dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
    if (b) {
        dc_hello_pack(DC_MSG_HELLO, &h, b->data);
        b->len = len;
    }
    free(states);
    return b;
}

/* Apply what was staged while held (each frame checked again, then as if
 * it had just arrived): the acks go up and the joint commit proceeds. */
static void dc_rx_release(dc_node_t *n)
{
    n->rx.held = 0;
    uint32_t applied = 0, asked = 0;
    for (uint32_t c = 0; n->layout && c < n->layout->nchunks && !n->finished; c++) {
        if (n->rx.staged_len[c] == UINT32_MAX) {
            n->rx.staged_len[c] = 0;
            if (n->rx.cur.active) {
                dc_rx_need(n, c, 1);
                asked++;
            }
            continue;
        }
        uint8_t *body = n->rx.staged[c];
        if (!body)
            continue;
        size_t len = n->rx.staged_len[c];
        n->rx.staged[c] = NULL;
        n->rx.staged_len[c] = 0;
        n->rx.staged_bytes -= len;
        n->rx.nstaged--;
        if (n->rx.cur.active)
            dc_rx_take(n, c, body, len);
        free(body);
        applied++;
    }
    dc_rx_flush_acks(n);
    DC_LOG_INFO("node %u: released: %u staged chunks applied%s", n->me, applied,
                asked ? ", some asked for again" : "");
}

/* After each turn of the loop, for an embedder (cfg->sink): cancel, hold
 * and release; while a version is held here, tell the root it is alive. */
static int dc_rx_each(dc_node_t *n)
{
    const dc_node_sink_t *k = n->cfg->sink;
    unsigned want = k->control ? k->control(k->user) : 0;
    if (want & DC_NODE_CTL_CANCEL) {
        dc_rx_cancel(n);
        return 1;
    }
    int hold = (want & DC_NODE_CTL_HOLD) != 0;
    if (hold && !n->rx.held) {
        n->rx.held = 1;
        n->rx.hold_report_ns = 0;
        DC_LOG_INFO("node %u: held: versions that arrive are staged, not applied", n->me);
    } else if (!hold && n->rx.held) {
        dc_rx_release(n);
    }
    if (n->rx.held && n->rx.cur.active && n->rx.nstaged) {
        /* well inside any silence bound (abort_ms: 4 x timeout_ms by default) */
        uint64_t now = dc_now_ns(), every = DC_MIN(500ull, n->timeout_ms / 4 + 1) * 1000000ull;
        if (now - n->rx.hold_report_ns > every) {
            dc_send_up_simple(n, DC_MSG_ACK, DC_ACK_F_HOLDING, n->rx.cur.v, n->rx.cur.b, 0, 0);
            n->rx.hold_report_ns = now;
        }
    }
    if (k->state)
        k->state(k->user, n->rx.held, n->rx.staged_bytes, 1);
    return 0;
}

dc_status_t dc_rx_run(dc_node_t *n)
{
    const dc_node_cfg_t *cfg = n->cfg;
    dc_status_t st;
    if (cfg->weights) {
        st = dc_st_open(cfg->weights, DC_ST_WRITABLE, &n->rx.wfile);
        if (st != DC_OK)
            return st;
        st = dc_layout_from_st(n->rx.wfile, n->chunk_size, &n->layout);
        if (st != DC_OK)
            return st;
        st = dc_place_from_st(&n->rx.place, n->layout, n->rx.wfile);
        if (st != DC_OK)
            return st;
    } else if (cfg->tensors && cfg->segs) {
        st = dc_layout_from_list(cfg->tensors, cfg->ntensors, n->chunk_size, &n->layout);
        if (st != DC_OK)
            return st;
        dc_place_init(&n->rx.place, n->layout);
        n->rx.place.dev = cfg->cuda_mem;
        for (size_t i = 0; i < cfg->nsegs && st == DC_OK; i++)
            st = dc_place_add(&n->rx.place, cfg->segs[i].tensor, cfg->segs[i].offset,
                              cfg->segs[i].len, cfg->segs[i].ptr);
        if (st == DC_OK)
            st = dc_place_finish(&n->rx.place);
        if (st != DC_OK) {
            dc_place_fini(&n->rx.place);
            return st;
        }
        if (cfg->cuda_mem && (st = dc_devpath_open(n)) != DC_OK)
            return st;
    } else {
        return dc_error(DC_ERR_INVALID, "node %u: a receiver needs a weights file or a "
                        "placement of its weights in memory", n->me);
    }
    n->rx.place_ok = 1;
    st = dc_node_chunk_map(n);
    if (st != DC_OK)
        return st;
    uint32_t nch = n->layout->nchunks;
    n->rx.retained = calloc(nch ? nch : 1, sizeof(*n->rx.retained));
    n->rx.retained_len = calloc(nch ? nch : 1, sizeof(*n->rx.retained_len));
    n->rx.undo = calloc(nch ? nch : 1, sizeof(*n->rx.undo));
    n->rx.staged = calloc(nch ? nch : 1, sizeof(*n->rx.staged));
    n->rx.staged_len = calloc(nch ? nch : 1, sizeof(*n->rx.staged_len));
    n->scratch = malloc(n->layout->max_chunk ? n->layout->max_chunk : 1);
    if (!n->rx.retained || !n->rx.retained_len || !n->rx.undo || !n->scratch ||
        !n->rx.staged || !n->rx.staged_len)
        return dc_error(DC_ERR_NOMEM, "node %u: out of memory", n->me);
    st = dc_codec_create(n->layout->max_chunk ? n->layout->max_chunk : 64, &n->rx.codec);
    if (st != DC_OK)
        return st;
    if ((st = dc_node_load_committed(n)) != DC_OK)
        return st;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/dense_needed", cfg->state_dir);
    n->rx.dense_needed = access(path, F_OK) == 0;
    if (cfg->cold && !n->have_record) {
        /* holds nothing yet: every chunk of the first version must come
         * whole (the marker makes HELLO and BEGIN ask for overwrites) */
        n->rx.cold = 1;
        if (!n->rx.dense_needed && (st = dc_rx_set_dense_needed(n, 1)) != DC_OK)
            return st;
        DC_LOG_INFO("node %u: cold start: this node holds no version yet; the first version "
                    "comes dense (every chunk an overwrite)", n->me);
    } else {
        DC_LOG_INFO("node %u: holding version %llu%s", n->me, (unsigned long long)n->committed,
                    n->rx.dense_needed ? " (marked for dense refit)" : "");
    }
    dc_rx_event(n, DC_NODE_EV_READY, n->rx.cold ? DC_NODE_EVF_COLD : 0, n->committed, 0,
                n->committed_ckpt, "serving");
    n->rx.serving = 1;
    dc_node_serve(n, 20, cfg->sink ? dc_rx_each : NULL);
    /* the failure this node reported, not what its connections said while
     * the root ended the job (e.g. "closed by the peer") */
    return dc_node_outcome(n);
}

/* At the end of the run: the version in flight's undo state, the journal,
 * the codec, the placement and the weights file. */
void dc_rx_free(dc_node_t *n)
{
    if (n->layout && n->rx.retained)
        dc_rx_drop_version(n);
    dc_journal_close(n->rx.j);
    free(n->rx.retained);
    free(n->rx.retained_len);
    free(n->rx.undo);
    dc_rx_unstage(n);
    free(n->rx.staged);
    free(n->rx.staged_len);
    dc_codec_free(n->rx.codec);
    dc_devpath_close(n);
    if (n->rx.place_ok)
        dc_place_fini(&n->rx.place);
    dc_st_close(n->rx.wfile);
}
