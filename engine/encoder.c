/* encoder.c - what every sender runs (n->enc), the coordinator and the
 * other senders alike: encoder threads take chunk numbers in order
 * (repairs from the work queue first) and encode chunk c of
 * (base -> next) while the loop already sends the chunks before it;
 * memory held by frames in flight is bounded by inflight_bytes (encoders
 * wait).  Encoded frames go on a ready list and wake the loop (eventfd);
 * dc_enc_drain, on the node's thread, counts them and sends them down
 * (peer.c), or, for a repair of another sender, up to the coordinator.
 *
 * The version's bytes: files (dc_enc_open_version: mapped, or read with
 * pread when larger than memory allows) or a memory sender's placements
 * (shard.c).  Repairs are queued by coord.c (NEED, re-joins, stalls) and,
 * on a sender that owns the chunk, by the dispatcher (dc_enc_queue).
 */
#include "engine/devsend.h"
#include "engine/node_internal.h"
#include "kernels/kern_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

/* The wqin entry of (dest, chunk), NULL when there is none (under mu). */
static uint8_t *dc_enc_wq_in(dc_node_t *n, uint32_t dest, uint32_t chunk)
{
    uint32_t nch = n->layout->nchunks;
    return n->enc.wqin && dest < n->nnodes && chunk < nch
               ? &n->enc.wqin[(size_t)dest * nch + chunk]
               : NULL;
}

/* Drop every queued repair (under mu). */
void dc_enc_wq_clear(dc_node_t *n)
{
    n->enc.wq_n = 0;
    if (n->enc.wqin)
        memset(n->enc.wqin, 0, (size_t)n->nnodes * (n->layout->nchunks ? n->layout->nchunks : 1));
}

void dc_enc_queue(dc_node_t *n, uint32_t chunk, uint32_t dest, int overwrite)
{
    if (n->is_root && n->cfg->source && n->plan.chunk_src[chunk] != n->me) {
        /* sent from another sender's memory: only it can re-send it (its
         * repair frame comes back up its control link and is routed here) */
        uint32_t src = n->plan.chunk_src[chunk];
        dc_peer_t *p = src < n->nnodes ? dc_coord_ctl_peer(n, src) : NULL;
        uint8_t h[DC_MSG_HDR_SIZE];
        dc_msg_simple(DC_MSG_NEED, overwrite ? DC_NEED_F_OVERWRITE : 0, n->enc.vnum, n->enc.vbase,
                      dest, chunk, 1, h);
        dc_nbuf_t *b = p ? dc_nbuf_copy(n, h, sizeof(h)) : NULL;
        if (b) {
            dc_peer_send(n, p, b);
            dc_nbuf_unref(n, b);
        } else {
            DC_LOG_WARN("coordinator: chunk %u for node %u: its sender %u is not connected",
                        chunk, dest, src);
        }
        return;
    }
    pthread_mutex_lock(&n->mu);
    uint8_t *in = dc_enc_wq_in(n, dest, chunk);
    if (in && (*in & (overwrite ? 2 : 3))) {
        /* already waiting (an overwrite serves an XOR's request too) */
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (n->enc.wq_n == n->enc.wq_cap) {
        size_t nc = n->enc.wq_cap ? n->enc.wq_cap * 2 : 256;
        dc_work_t *w = malloc(nc * sizeof(*w));
        if (!w) {
            pthread_mutex_unlock(&n->mu);
            return;
        }
        for (size_t k = 0; k < n->enc.wq_n; k++)
            w[k] = n->enc.wq[(n->enc.wq_head + k) % n->enc.wq_cap];
        free(n->enc.wq);
        n->enc.wq = w;
        n->enc.wq_cap = nc;
        n->enc.wq_head = 0;
    }
    n->enc.wq[(n->enc.wq_head + n->enc.wq_n) % n->enc.wq_cap] =
        (dc_work_t){chunk, dest, (uint8_t)overwrite};
    n->enc.wq_n++;
    if (in)
        *in |= overwrite ? 2 : 1;
    n->enc.repairs++;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

/* Read a chunk's bytes with pread into buf (cheaper than faulting the
 * mapping in page by page); NULL when that fails (use the mapping). */
static const uint8_t *dc_enc_pread(int fd, const dc_st_file_t *f, const dc_st_tensor_t *t,
                                   uint64_t off, uint64_t len, uint8_t *buf)
{
    if (fd < 0 || !buf)
        return NULL;
    uint64_t pos = dc_st_data_offset(f) + t->begin + off, done = 0;
    while (done < len) {
        ssize_t r = pread(fd, buf + done, len - done, (off_t)(pos + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return NULL;
        done += (uint64_t)r;
    }
    return buf;
}

/* A device sender's chunk staged through the host: said once per node
 * (INFO; the rest at DEBUG), counted. */
static void dc_enc_staged(dc_node_t *n, uint32_t chunk, const char *why)
{
    pthread_mutex_lock(&n->mu);
    int first = !n->mem.staged_said;
    n->mem.staged_said = 1;
    n->mem.staged++;
    pthread_mutex_unlock(&n->mu);
    if (first)
        DC_LOG_INFO("sender %u: chunk %u staged through the host (whole chunk across PCIe): "
                    "%s (further staged chunks at debug level; counted)", n->me, chunk, why);
    else
        DC_LOG_DEBUG("sender %u: chunk %u staged through the host: %s", n->me, chunk, why);
}

/* A device sender's chunk encoded on the device (engine/devsend.c):
 * DC_OK with the payload, DC_ERR_UNSUPPORTED to stage it (said), another
 * error on a failure. */
static dc_status_t dc_enc_device(dc_node_t *n, dc_codec_t *codec, dc_devsend_t *ds,
                                 const dc_work_t *w, uint8_t *payload, size_t cap, size_t *plen,
                                 uint16_t *enc, dc_digest_t *tdg)
{
    const dc_layout_chunk_t *lc = &n->layout->chunks[w->chunk];
    unsigned esz = n->layout->tensors[lc->tensor].esize;
    if (w->overwrite || n->enc.mode == DC_MODE_DENSE) {
        dc_enc_staged(n, w->chunk, "an overwrite (put-dense) needs the whole chunk");
        return DC_ERR_UNSUPPORTED;
    }
    const uint8_t *np = dc_place_chunk_dev_ptr(&n->mem.next, w->chunk);
    if (!np) {
        /* it spans placement segments: gathered on the device */
        uint8_t *g = dc_devsend_gather_buf(ds);
        dc_status_t st = g ? dc_place_read_dev(&n->mem.next, w->chunk, g) : dc_last_status();
        if (st != DC_OK) {
            char why[512];
            snprintf(why, sizeof(why), "it spans placement segments, and their gather on the "
                     "device failed: %s", dc_last_error());
            dc_enc_staged(n, w->chunk, why);
            return DC_ERR_UNSUPPORTED;
        }
        np = g;
    }
    uint64_t h0, d0, h1, d1;
    dc_devsend_pcie(ds, &h0, &d0);
    const uint8_t *bd = n->mem.dbase ? n->mem.dbase + n->mem.off[w->chunk] : NULL;
    const uint8_t *bh = n->mem.dbase ? NULL : n->mem.base + n->mem.off[w->chunk];
    dc_status_t st = dc_devsend_encode(ds, codec, bd, bh, np, lc->len / esz, esz, payload, cap,
                                       plen, enc, tdg);
    dc_devsend_pcie(ds, &h1, &d1);
    pthread_mutex_lock(&n->mu);
    n->mem.pcie_h2d += h1 - h0;
    n->mem.pcie_d2h += d1 - d0;
    if (st == DC_OK)
        n->mem.dev_chunks++;
    pthread_mutex_unlock(&n->mu);
    if (st == DC_ERR_UNSUPPORTED) {
        char why[512];
        snprintf(why, sizeof(why), "%s", dc_last_error());
        dc_enc_staged(n, w->chunk, why);
    } else if (st == DC_OK && n->mem.patch) {
        const uint32_t *pos;
        const uint8_t *xv;
        size_t count;
        dc_devsend_lists(ds, &pos, &xv, &count);
        dc_mem_patch_keep(n, w->chunk, pos, xv, count, esz);
    }
    return st;
}

static dc_nbuf_t *dc_enc_frame(dc_node_t *n, dc_codec_t *codec, dc_devsend_t *ds,
                               const dc_work_t *w, uint8_t *bbuf, uint8_t *nbuf, dc_digest_t *dg)
{
    const dc_layout_t *l = n->layout;
    const dc_layout_chunk_t *lc = &l->chunks[w->chunk];
    const dc_layout_tensor_t *lt = &l->tensors[lc->tensor];
    int overwrite = w->overwrite || n->enc.mode == DC_MODE_DENSE;
    const uint8_t *bp = NULL, *np = NULL;
    size_t cap = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE + dc_codec_payload_bound(lc->len);
    dc_nbuf_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->data = malloc(cap);
    if (!b->data) {
        free(b);
        return NULL;
    }
    size_t plen = 0;
    uint16_t enc = 0;
    uint8_t *payload = b->data + DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE;
    dc_digest_t tdg;
    dc_status_t st = DC_ERR_UNSUPPORTED;
    if (ds)
        st = dc_enc_device(n, codec, ds, w, payload, cap - DC_MSG_HDR_SIZE - DC_FRAME_HEADER_SIZE,
                           &plen, &enc, &tdg);
    if (st != DC_OK && st != DC_ERR_UNSUPPORTED) {
        DC_LOG_ERROR("encoder: chunk %u on the device: %s", w->chunk, dc_last_error());
        free(b->data);
        free(b);
        return NULL;
    }
    if (st == DC_OK) {
        /* encoded on the device */
    } else if (n->cfg->source) {
        /* memory: our baseline copy, the caller's placement of the version */
        bp = n->mem.base ? n->mem.base + n->mem.off[w->chunk] : NULL;
        if (!bp && !overwrite) {
            /* the baseline copy is in device memory: stage it too */
            if (!bbuf || dc_kern_cuda_d2h(bbuf, n->mem.dbase + n->mem.off[w->chunk],
                                          lc->len) != DC_OK) {
                DC_LOG_ERROR("encoder: chunk %u: its baseline from device memory: %s",
                             w->chunk, bbuf ? dc_last_error() : "no buffer (out of memory)");
                free(b->data);
                free(b);
                return NULL;
            }
            bp = bbuf;
        }
        np = dc_place_chunk_ptr(&n->mem.next, w->chunk);
        if (!np) {
            if (!nbuf) {
                DC_LOG_ERROR("encoder: chunk %u: no gather buffer (out of memory)",
                             w->chunk);
                free(b->data);
                free(b);
                return NULL;
            }
            if (dc_place_read(&n->mem.next, w->chunk, nbuf) != DC_OK) {
                DC_LOG_ERROR("encoder: chunk %u: %s", w->chunk, dc_last_error());
                free(b->data);
                free(b);
                return NULL;
            }
            np = nbuf;
        }
    } else {
        const dc_st_tensor_t *bt = dc_st_tensor(n->enc.base, lc->tensor);
        const dc_st_tensor_t *nt = dc_st_tensor(n->enc.next, lc->tensor);
        bp = overwrite ? NULL
                       : dc_enc_pread(n->enc.base_fd, n->enc.base, bt, lc->offset, lc->len, bbuf);
        np = dc_enc_pread(n->enc.next_fd, n->enc.next, nt, lc->offset, lc->len, nbuf);
        if (!bp)
            bp = dc_st_data(n->enc.base, bt) + lc->offset;
        if (!np)
            np = dc_st_data(n->enc.next, nt) + lc->offset;
    }
    /* the target digest comes out of the diff's own pass over next */
    if (st != DC_OK)
        st = dc_codec_encode_digest(codec, overwrite ? NULL : bp, np, lc->len / lt->esize,
                                    lt->esize, payload,
                                    cap - DC_MSG_HDR_SIZE - DC_FRAME_HEADER_SIZE, &plen, &enc,
                                    NULL, NULL, &tdg);
    if (st != DC_OK) {
        DC_LOG_ERROR("encoder: chunk %u: %s", w->chunk, dc_last_error());
        free(b->data);
        free(b);
        return NULL;
    }
    dc_frame_hdr_t fh = {.type = DC_FRAME_CHUNK, .dtype = (uint8_t)lt->dtype, .encoding = enc,
                         .tensor_id = lc->tensor, .chunk_index = lc->index,
                         .elem_offset = lc->offset / lt->esize,
                         .elem_count = lc->len / lt->esize,
                         .baseline_version = n->enc.vbase, .target_version = n->enc.vnum,
                         .payload_len = (uint32_t)plen,
                         .payload_crc = dc_crc32c(0, payload, plen),
                         .target_digest = tdg};
    dc_frame_encode(&fh, b->data + DC_MSG_HDR_SIZE);
    unsigned kind = dc_enc_kind(enc);
    dc_msg_t m = {.type = DC_MSG_FRAME,
                  .flags = (uint8_t)((kind == DC_ENC_PUT_DENSE ? DC_FRAME_F_OVERWRITE : 0) |
                                     (w->dest != DC_NODE_ALL ? DC_FRAME_F_RETRY : 0)),
                  .version = n->enc.vnum, .baseline = n->enc.vbase, .node = w->dest,
                  .chunk = w->chunk, .count = 1,
                  .body_len = (uint32_t)(DC_FRAME_HEADER_SIZE + plen)};
    dc_msg_pack(&m, b->data);
    b->len = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE + plen;
    if (b->len < cap / 2) {
        uint8_t *s = realloc(b->data, b->len);
        if (s)
            b->data = s;
    }
    b->cap = b->len;
    b->refs = 1;
    b->acct = 1;
    *dg = fh.target_digest;
    return b;
}

static void *dc_enc_thread(void *arg)
{
    dc_enc_arg_t *a = arg;
    dc_node_t *n = a->n;
    dc_codec_t *codec = NULL;
    if (dc_codec_create(n->layout->max_chunk ? n->layout->max_chunk : 64, &codec) != DC_OK) {
        DC_LOG_ERROR("encoder: %s", dc_last_error());
        return NULL;
    }
    size_t mc = n->layout->max_chunk ? n->layout->max_chunk : 1;
    uint8_t *bbuf = malloc(mc), *nbuf = malloc(mc); /* NULL: read the mapping */
    dc_devsend_t *ds = NULL;
    if (n->cfg->source && n->mem.dev_encode &&
        dc_devsend_create(mc, n->mem.dbase == NULL, &ds) != DC_OK)
        DC_LOG_WARN("sender %u: encoder %d: staging: no device scratch for the device encode "
                    "(%s)", n->me, a->idx, dc_last_error());
    if (ds) /* a host baseline is patched with each chunk's positions */
        dc_devsend_want_lists(ds, n->mem.patch != NULL);
    for (;;) {
        pthread_mutex_lock(&n->mu);
        dc_work_t w;
        for (;;) {
            if (n->enc.stop)
                break;
            if (n->inflight <= n->inflight_max && (n->enc.wq_n > 0 || n->enc.cursor < n->enc.total))
                break;
            pthread_cond_wait(&n->cv, &n->mu);
        }
        if (n->enc.stop) {
            pthread_mutex_unlock(&n->mu);
            break;
        }
        if (n->enc.wq_n > 0) {
            w = n->enc.wq[n->enc.wq_head];
            n->enc.wq_head = (n->enc.wq_head + 1) % n->enc.wq_cap;
            n->enc.wq_n--;
            uint8_t *in = dc_enc_wq_in(n, w.dest, w.chunk);
            if (in)
                *in &= w.overwrite ? 1 : 2;
        } else {
            w = (dc_work_t){n->enc.bcast[n->enc.cursor++], DC_NODE_ALL, 0};
        }
        /* reserve the worst case while encoding */
        uint64_t reserve = n->layout->chunks[w.chunk].len / 4;
        n->inflight += reserve;
        n->enc.busy++;
        if (!n->enc.first_ns)
            n->enc.first_ns = dc_now_ns();
        pthread_mutex_unlock(&n->mu);

        uint64_t t0 = dc_now_ns();
        dc_digest_t dg = {0, 0};
        dc_nbuf_t *b = dc_enc_frame(n, codec, ds, &w, bbuf, nbuf, &dg);
        uint64_t t1 = dc_now_ns();

        pthread_mutex_lock(&n->mu);
        n->inflight -= reserve;
        n->enc.busy--;
        pthread_cond_broadcast(&n->cv);
        n->enc.ns += t1 - t0;
        n->enc.last_ns = t1;
        if (b) {
            n->enc.digests[w.chunk] = dg; /* the target's digest, whatever the encoding */
            n->enc.dknown[w.chunk] = 1;
            n->inflight += b->cap;
            if (n->enc.ready_tail)
                n->enc.ready_tail->next = b;
            else
                n->enc.ready_head = b;
            n->enc.ready_tail = b;
        } else {
            n->result = DC_ERR_INTERNAL;
        }
        pthread_mutex_unlock(&n->mu);
        uint64_t one = 1;
        if (write(n->enc.evfd, &one, sizeof(one)) < 0) {
            /* the loop polls with a timeout anyway */
        }
    }
    dc_codec_free(codec);
    dc_devsend_free(ds);
    free(bbuf);
    free(nbuf);
    return NULL;
}

void dc_enc_drain(dc_node_t *n)
{
    uint64_t cnt;
    if (read(n->enc.evfd, &cnt, sizeof(cnt)) < 0) {
        /* EAGAIN: nothing signalled */
    }
    pthread_mutex_lock(&n->mu);
    dc_nbuf_t *b = n->enc.ready_head;
    n->enc.ready_head = n->enc.ready_tail = NULL;
    pthread_mutex_unlock(&n->mu);
    while (b) {
        dc_nbuf_t *next = b->next;
        b->next = NULL;
        dc_msg_t m;
        if (dc_msg_parse(b->data, b->len, &m) == DC_OK && m.version == n->enc.vnum &&
            n->enc.in_flight) {
            if (!n->coord.t_first_frame)
                n->coord.t_first_frame = dc_now_ns();
            if (m.node == DC_NODE_ALL) {
                n->enc.sent++;
                if (DC_UNLIKELY(n->coord.crash_frames && n->is_root &&
                                n->enc.sent >= n->coord.crash_frames && !n->coord.crash_ns))
                    n->coord.crash_ns = dc_now_ns();
                n->enc.payload_bytes += b->len - DC_MSG_HDR_SIZE;
                if (n->enc.sentc && m.chunk < n->layout->nchunks)
                    n->enc.sentc[m.chunk] = 1;
            } else {
                n->enc.repair_bytes += b->len - DC_MSG_HDR_SIZE;
                if (m.flags & DC_FRAME_F_OVERWRITE)
                    n->enc.overwrites_sent++;
            }
            if (!n->is_root && m.node != DC_NODE_ALL &&
                (m.node >= n->nnodes || !n->net.route[m.node] || n->net.route[m.node]->dead))
                dc_send_up(n, b); /* a repair the coordinator asked for: it routes it */
            else
                dc_send_frame_down(n, b, &m);
        }
        dc_nbuf_unref(n, b);
        b = next;
    }
}

/* A checkpoint that fits comfortably in memory is mapped with its page tables
 * filled at open, as a trainer holds its weights in memory: the encoders then
 * read the mapping with no copy and no page faults inside the refit.  A larger
 * one is read chunk by chunk with pread (n->enc.base_fd / next_fd). */
static int dc_enc_resident(const char *path)
{
    struct stat sb;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (dc_stat(path, &sb) != 0 || pages <= 0 || psz <= 0)
        return 0;
    return (uint64_t)sb.st_size <= (uint64_t)pages * (uint64_t)psz / 8;
}

/* Until no encoder thread is encoding (none reads the version's bytes). */
void dc_enc_wait_idle(dc_node_t *n)
{
    pthread_mutex_lock(&n->mu);
    while (n->enc.busy > 0)
        pthread_cond_wait(&n->cv, &n->mu);
    pthread_mutex_unlock(&n->mu);
}

dc_status_t dc_enc_open_version(dc_node_t *n, uint64_t v)
{
    if (n->cfg->source)
        return dc_mem_wait_next(n, v);
    char bp[PATH_MAX], np[PATH_MAX];
    if (dc_node_version_path(bp, sizeof(bp), n->cfg->versions_dir, v - 1) ||
        dc_node_version_path(np, sizeof(np), n->cfg->versions_dir, v))
        return dc_error(DC_ERR_INVALID, "versions dir path too long");
    /* no encoder may still read the previous version's mappings */
    dc_enc_wait_idle(n);
    dc_status_t st = DC_OK;
    if (n->enc.next && n->enc.next_version == v - 1) {
        /* the previous target is this baseline: keep its (warm) mapping */
        dc_st_close(n->enc.base);
        if (n->enc.base_fd >= 0)
            close(n->enc.base_fd);
        n->enc.base = n->enc.next;
        n->enc.base_fd = n->enc.next_fd;
        n->enc.next = NULL;
        n->enc.next_fd = -1;
    } else {
        dc_st_close(n->enc.base);
        dc_st_close(n->enc.next);
        n->enc.base = n->enc.next = NULL;
        if (n->enc.base_fd >= 0)
            close(n->enc.base_fd);
        if (n->enc.next_fd >= 0)
            close(n->enc.next_fd);
        n->enc.base_fd = n->enc.next_fd = -1;
        int pop = dc_enc_resident(bp);
        st = dc_st_open(bp, pop ? DC_ST_POPULATE : DC_ST_READ, &n->enc.base);
        if (st == DC_OK && !pop)
            n->enc.base_fd = open(bp, O_RDONLY | O_CLOEXEC);
    }
    int pop = dc_enc_resident(np);
    if (st == DC_OK)
        st = dc_st_open(np, pop ? DC_ST_POPULATE : DC_ST_READ, &n->enc.next);
    if (st == DC_OK && !pop)
        n->enc.next_fd = open(np, O_RDONLY | O_CLOEXEC);
    n->enc.next_version = st == DC_OK ? v : 0;
    if (st != DC_OK)
        return st;
    dc_layout_t *l = NULL;
    st = dc_layout_from_st(n->enc.next, n->chunk_size, &l);
    if (st != DC_OK)
        return st;
    dc_layout_t *lb = NULL;
    st = dc_layout_from_st(n->enc.base, n->chunk_size, &lb);
    if (st != DC_OK) {
        dc_layout_free(l);
        return st;
    }
    uint64_t bid = lb->id;
    dc_layout_free(lb);
    if (bid != l->id) {
        dc_layout_free(l);
        return dc_error(DC_ERR_UNSUPPORTED,
                        "%s and %s have different tensors (names, dtypes or shapes): the "
                        "engine refits receivers in place, so every version of a job keeps "
                        "one tensor set; start a new job from %s (receivers load it whole), "
                        "or carry the change with `deltacast diff` / `deltacast apply`, "
                        "which handle added, removed and reshaped tensors",
                        bp, np, np);
    }
    if (n->layout && n->layout->id != l->id) {
        dc_layout_free(l);
        return dc_error(DC_ERR_UNSUPPORTED,
                        "%s changes the job's tensor set: every version of a job keeps one "
                        "tensor set (start a new job from it)", np);
    }
    if (!n->layout)
        n->layout = l;
    else
        dc_layout_free(l);
    return DC_OK;
}

/* What every sender's encoders use: per chunk the target digest, whether
 * it is known, and whether the chunk was sent. */
dc_status_t dc_enc_alloc(dc_node_t *n)
{
    uint32_t nch = n->layout->nchunks;
    n->enc.digests = calloc(nch ? nch : 1, sizeof(*n->enc.digests));
    n->enc.dknown = calloc(nch ? nch : 1, 1);
    n->enc.sentc = calloc(nch ? nch : 1, 1);
    n->enc.wqin = calloc((size_t)n->nnodes * (nch ? nch : 1), 1);
    if (!n->enc.digests || !n->enc.dknown || !n->enc.sentc || !n->enc.wqin)
        return dc_error(DC_ERR_NOMEM, "sender: out of memory");
    return DC_OK;
}

void dc_enc_stop(dc_node_t *n)
{
    pthread_mutex_lock(&n->mu);
    n->enc.stop = 1;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    for (int i = 0; i < n->enc.nthreads; i++)
        pthread_join(n->enc.threads[i], NULL);
    n->enc.nthreads = 0;
    free(n->enc.threads);
    n->enc.threads = NULL;
    free(n->enc.args);
    n->enc.args = NULL;
}

dc_status_t dc_enc_start(dc_node_t *n)
{
    n->enc.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->enc.evfd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "sender: eventfd");
    long th = 0;
    const char *tv = dc_config_get("threads");
    if (tv)
        th = strtol(tv, NULL, 10);
    if (th <= 0)
        th = dc_cpu_count();
    int want = (int)DC_MIN(th, 64);
    n->enc.threads = calloc((size_t)want, sizeof(*n->enc.threads));
    n->enc.args = calloc((size_t)want, sizeof(*n->enc.args));
    if (!n->enc.threads || !n->enc.args)
        return dc_error(DC_ERR_NOMEM, "sender: out of memory");
    for (int i = 0; i < want; i++) {
        n->enc.args[i] = (dc_enc_arg_t){n, i};
        if (pthread_create(&n->enc.threads[i], NULL, dc_enc_thread, &n->enc.args[i]) != 0)
            break;
        n->enc.nthreads = i + 1;
    }
    return n->enc.nthreads > 0 ? DC_OK : dc_error(DC_ERR_NOMEM, "sender: cannot start encoders");
}

/* At the end of the run (the threads are stopped): frames never sent, the
 * version's files, the per-chunk state, the eventfd. */
void dc_enc_free(dc_node_t *n)
{
    dc_nbuf_t *b = n->enc.ready_head;
    while (b) {
        dc_nbuf_t *nx = b->next;
        free(b->data);
        free(b);
        b = nx;
    }
    n->enc.ready_head = n->enc.ready_tail = NULL;
    dc_st_close(n->enc.base);
    dc_st_close(n->enc.next);
    if (n->enc.base_fd >= 0)
        close(n->enc.base_fd);
    if (n->enc.next_fd >= 0)
        close(n->enc.next_fd);
    free(n->enc.digests);
    free(n->enc.dknown);
    free(n->enc.sentc);
    free(n->enc.wq);
    free(n->enc.wqin);
    free(n->enc.bcast);
    if (n->enc.evfd >= 0)
        close(n->enc.evfd);
}
