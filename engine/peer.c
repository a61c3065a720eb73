/* peer.c - a node's connections (dc_peer_t, n->net) and its buffers
 * (dc_nbuf_t): refcounted buffers with an in-flight byte account shared
 * with the encoder threads, per-peer receive rings and send queues over
 * the transport (verbs/transport.h), and the routing of a message up (the
 * parent chosen by attach.c) or down (by route, or to the children that
 * subscribed to a frame's stream).
 *
 * A relay keeps its children's links full: up to inflight_bytes / frame
 * size receives stay posted on the parent, a frame of the version in
 * flight is handed to dc_node_handle (node.c) as soon as it is complete
 * even when an earlier message is not, and sends are posted at once and
 * never waited for.  Who calls: node.c's loop (dc_peer_progress), every
 * role to send (dc_send_up, dc_send_down, dc_peer_send).
 */
#include "engine/node_internal.h"

#include <stdlib.h>
#include <string.h>

/* Count a buffer in the node's in-flight bytes (until it is freed). */
static void dc_nbuf_account(dc_node_t *n, dc_nbuf_t *b)
{
    if (b->acct)
        return;
    b->acct = 1;
    pthread_mutex_lock(&n->mu);
    n->inflight += b->cap;
    pthread_mutex_unlock(&n->mu);
}

dc_nbuf_t *dc_nbuf_new(dc_node_t *n, size_t cap, int pooled, int acct)
{
    dc_nbuf_t *b = NULL;
    if (pooled && n->net.pool) {
        b = n->net.pool;
        n->net.pool = b->next;
        n->net.pool_n--;
    } else {
        b = calloc(1, sizeof(*b));
        if (!b)
            return NULL;
        b->data = malloc(cap ? cap : 1);
        if (!b->data) {
            free(b);
            return NULL;
        }
        b->cap = cap;
        b->pooled = pooled;
    }
    b->refs = 1;
    b->len = 0;
    b->next = NULL;
    b->acct = 0;
    if (acct)
        dc_nbuf_account(n, b);
    return b;
}

void dc_nbuf_unref(dc_node_t *n, dc_nbuf_t *b)
{
    if (!b || --b->refs > 0)
        return;
    if (b->acct) {
        pthread_mutex_lock(&n->mu);
        n->inflight -= b->cap;
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
        b->acct = 0;
    }
    if (b->pooled && n->net.pool_n < 16) {
        b->next = n->net.pool;
        n->net.pool = b;
        n->net.pool_n++;
        return;
    }
    free(b->data);
    free(b);
}

/* A message built on the main thread (small control messages). */
dc_nbuf_t *dc_nbuf_copy(dc_node_t *n, const void *data, size_t len)
{
    dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
    if (!b)
        return NULL;
    memcpy(b->data, data, len);
    b->len = len;
    return b;
}

dc_peer_t *dc_peer_new(dc_node_t *n, dc_verbs_conn_t *c, int is_parent)
{
    if (n->net.npeers == n->net.cap_peers) {
        size_t nc = n->net.cap_peers ? n->net.cap_peers * 2 : 8;
        dc_peer_t **p = realloc(n->net.peers, nc * sizeof(*p));
        if (!p)
            return NULL;
        n->net.peers = p;
        n->net.cap_peers = nc;
    }
    dc_peer_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->c = c;
    p->node = UINT32_MAX;
    p->is_parent = is_parent;
    p->since_ns = dc_now_ns();
    n->net.peers[n->net.npeers++] = p;
    return p;
}

int dc_peer_claim_ok(dc_node_t *n, dc_peer_t *p, uint32_t node)
{
    dc_verbs_stats_t vs;
    memset(&vs, 0, sizeof(vs));
    vs.size = sizeof(vs);
    if (!p->c || p->c->ops->stats(p->c, &vs) != DC_OK || !vs.peer_cert[0])
        return 1; /* no certificate: the job secret is the only identity */
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(n->cfg->topo, node, &info) == DC_OK && info.name &&
        strcmp(info.name, vs.peer_cert) == 0)
        return 1;
    DC_LOG_WARN("node %u: the peer at %s claims node %u (%s), but its TLS certificate names "
                "'%s': refused",
                n->me, vs.peer, node, info.name ? info.name : "?", vs.peer_cert);
    return 0;
}

void dc_peer_free(dc_node_t *n, dc_peer_t *p)
{
    for (unsigned k = 0; k < p->rx_n; k++)
        dc_nbuf_unref(n, p->rxb[(p->rx_head + k) % DC_NRX]);
    for (size_t k = 0; k < p->tx_n; k++)
        dc_nbuf_unref(n, p->tx[(p->tx_head + k) % p->tx_cap].b);
    free(p->tx);
    free(p->sub);
    if (p->c) {
        /* a hop's repairs are otherwise silent: say so when there were */
        dc_verbs_stats_t vs = {.size = sizeof(vs)};
        if (p->c->ops->stats(p->c, &vs) == DC_OK && (vs.nacks_sent || vs.resends))
            DC_LOG_WARN("node %u: link to node %d: %llu CRC32C mismatches received, %llu "
                        "messages re-sent, %llu reconnects",
                        n->me, p->node == UINT32_MAX ? -1 : (int)p->node,
                        (unsigned long long)vs.nacks_sent, (unsigned long long)vs.resends,
                        (unsigned long long)vs.reconnects);
        dc_verbs_close(p->c); /* frees outstanding requests */
    }
    for (uint32_t i = 0; i < n->nnodes; i++)
        if (n->net.route[i] == p)
            n->net.route[i] = NULL;
    if (n->net.up == p)
        n->net.up = NULL;
    free(p);
}

void dc_peers_reap(dc_node_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < n->net.npeers; i++) {
        if (n->net.peers[i]->dead)
            dc_peer_free(n, n->net.peers[i]);
        else
            n->net.peers[k++] = n->net.peers[i];
    }
    n->net.npeers = k;
}

/* The CRC32C of a FRAME message from its two headers and the frame
 * header's payload CRC32C: computed once when the chunk was encoded (its
 * payload hot in cache), and on a relay the value its own hop just checked
 * every byte against.  The sender and each relay then send a frame on
 * every link without reading its payload again (dc_verbs_isend_crc); each
 * receiving hop still checks every byte, and a wrong value costs one NACK
 * (the transport re-sends with a CRC32C of its own).  0 for other
 * messages. */
static int dc_peer_frame_crc(const dc_nbuf_t *b, uint32_t *crc)
{
    const size_t hl = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE;
    dc_msg_t m;
    dc_frame_hdr_t fh;
    if (dc_msg_parse(b->data, b->len, &m) != DC_OK || m.type != DC_MSG_FRAME ||
        dc_frame_decode(m.body, m.body_len, &fh) != DC_OK || hl + fh.payload_len != b->len)
        return 0;
    *crc = dc_crc32c_combine(dc_crc32c(0, b->data, hl), fh.payload_crc, fh.payload_len);
    return 1;
}

/* Post the queued sends the transport's window takes. */
static void dc_peer_post(dc_node_t *n, dc_peer_t *p)
{
    while (!p->dead && p->ready && p->tx_posted < p->tx_n) {
        dc_txe_t *e = &p->tx[(p->tx_head + p->tx_posted) % p->tx_cap];
        uint32_t crc;
        dc_status_t st = dc_peer_frame_crc(e->b, &crc)
                             ? dc_verbs_isend_crc(p->c, e->b->data, e->b->len, NULL, crc, &e->r)
                             : dc_verbs_isend(p->c, e->b->data, e->b->len, NULL, &e->r);
        if (st == DC_ERR_AGAIN)
            break;
        if (st != DC_OK) {
            dc_peer_fail(n, p, st, "isend failed");
            return;
        }
        if (!p->is_parent)
            dc_trace(n, "post", e->b, p->node);
        p->tx_posted++;
    }
}

/* Queue a buffer on a peer (takes a new reference) and post it at once when
 * the transport takes it: a relay forwards before it applies. */
dc_status_t dc_peer_send(dc_node_t *n, dc_peer_t *p, dc_nbuf_t *b)
{
    if (p->dead)
        return DC_OK;
    if (p->tx_n == p->tx_cap) {
        size_t nc = p->tx_cap ? p->tx_cap * 2 : 64;
        dc_txe_t *t = malloc(nc * sizeof(*t));
        if (!t)
            return dc_error(DC_ERR_NOMEM, "node: out of memory");
        for (size_t k = 0; k < p->tx_n; k++)
            t[k] = p->tx[(p->tx_head + k) % p->tx_cap];
        free(p->tx);
        p->tx = t;
        p->tx_cap = nc;
        p->tx_head = 0;
    }
    p->tx[(p->tx_head + p->tx_n) % p->tx_cap] = (dc_txe_t){b, NULL};
    p->tx_n++;
    if (!p->is_parent)
        dc_trace(n, "q", b, p->node);
    b->refs++;
    dc_peer_post(n, p);
    return DC_OK;
}

void dc_peer_fail(dc_node_t *n, dc_peer_t *p, dc_status_t st, const char *what)
{
    if (p->dead)
        return;
    p->dead = 1;
    /* after BYE every link closes: the job is over, nothing to warn about */
    if (n->bye && !p->is_parent)
        DC_LOG_INFO("node %u: child %u closed after BYE", n->me, p->node);
    else if (n->bye && p->node != UINT32_MAX)
        DC_LOG_INFO("node %u: parent %u closed after BYE (%s)", n->me, p->node,
                    dc_last_error());
    else if (p->node != UINT32_MAX && st == DC_ERR_CANCELED)
        /* the peer ended the session this side tried to resume: the node
         * attaches afresh (a failure to do so is reported there) */
        DC_LOG_INFO("node %u: connection to node %u %s: %s", n->me, p->node, what,
                    dc_last_error());
    else if (p->node != UINT32_MAX)
        DC_LOG_WARN("node %u: connection to node %u %s: %s", n->me, p->node, what,
                    dc_last_error());
}

/* Hand one received message to the node (consumes the reference). */
static void dc_peer_deliver(dc_node_t *n, dc_peer_t *p, dc_nbuf_t *b, size_t len)
{
    b->len = len;
    p->rx_bytes += len;
    if (len < n->net.rx_cap / 4) {
        dc_nbuf_t *c = dc_nbuf_copy(n, b->data, len);
        dc_nbuf_unref(n, b);
        b = c;
    } else {
        dc_nbuf_account(n, b); /* a large frame held while forwarded */
    }
    if (b) {
        if (p->is_parent)
            dc_trace(n, "rx", b, p->node);
        dc_node_handle(n, p, b);
        dc_nbuf_unref(n, b);
    }
}

/* Progress one peer: completed receives (in order, frames of the version in
 * flight from the parent as soon as complete), completed sends, post. */
void dc_peer_progress(dc_node_t *n, dc_peer_t *p)
{
    if (p->dead)
        return;
    if (!p->ready) {
        dc_status_t st = p->c->ops->connect_test(p->c);
        if (st == DC_ERR_AGAIN)
            return;
        if (st != DC_OK) {
            dc_peer_fail(n, p, st, "connect failed");
            return;
        }
        p->ready = 1;
    }
    dc_status_t st;
    /* receives, in posting order (before progress() may report the peer
     * gone: what it delivered is handled first) */
    while (p->rx_n > 0 && !p->dead) {
        unsigned h = p->rx_head;
        size_t len = 0;
        if (p->rxr[h]) {
            int done = 0;
            st = dc_verbs_test(p->rxr[h], &done, &len);
            if (st != DC_OK) {
                p->rxr[h] = NULL;
                dc_nbuf_unref(n, p->rxb[h]);
                p->rxb[h] = NULL;
                p->rx_head = (h + 1) % DC_NRX;
                p->rx_n--;
                dc_peer_fail(n, p, st, "receive failed");
                return;
            }
            if (!done)
                break;
        } else {
            len = p->rxlen[h]; /* completed early (deferred or handled) */
        }
        dc_nbuf_t *b = p->rxb[h];
        p->rxr[h] = NULL;
        p->rxb[h] = NULL;
        p->rx_head = (h + 1) % DC_NRX;
        p->rx_n--;
        if (b)
            dc_peer_deliver(n, p, b, len);
    }
    /* from the parent, frames of the version in flight that completed
     * behind an incomplete one (the transport stripes messages over
     * parallel streams): forward and apply them now instead of waiting
     * for the head, so the children's links do not idle.  Frames are
     * independent (chunk-addressed); anything else waits for its turn. */
    if (p->is_parent && !p->dead && n->rx.cur.active) {
        for (unsigned k = 1; k < p->rx_n && !p->dead; k++) {
            unsigned sl = (p->rx_head + k) % DC_NRX;
            if (!p->rxr[sl])
                continue;
            int done = 0;
            size_t len = 0;
            st = dc_verbs_test(p->rxr[sl], &done, &len);
            if (st != DC_OK) {
                p->rxr[sl] = NULL;
                dc_nbuf_unref(n, p->rxb[sl]);
                p->rxb[sl] = NULL;
                p->rxlen[sl] = 0;
                dc_peer_fail(n, p, st, "receive failed");
                return;
            }
            if (!done)
                continue;
            p->rxr[sl] = NULL;
            p->rxlen[sl] = len;
            dc_msg_t m;
            if (len >= DC_MSG_HDR_SIZE && dc_msg_parse(p->rxb[sl]->data, len, &m) == DC_OK &&
                m.type == DC_MSG_FRAME && n->rx.cur.active && m.version == n->rx.cur.v) {
                dc_nbuf_t *b = p->rxb[sl];
                p->rxb[sl] = NULL;
                dc_peer_deliver(n, p, b, len);
            }
        }
    }
    if (!p->dead && (st = p->c->ops->progress(p->c)) != DC_OK) {
        dc_peer_fail(n, p, st, "failed");
        return;
    }
    /* repost receives (a relay stops reading its parent when over budget) */
    while (!p->dead && p->rx_n < (p->is_parent ? n->net.rx_post_parent : DC_NRX_CHILD)) {
        if (p->is_parent) {
            pthread_mutex_lock(&n->mu);
            int over = n->inflight > n->inflight_max;
            pthread_mutex_unlock(&n->mu);
            if (over)
                break;
        }
        unsigned slot = (p->rx_head + p->rx_n) % DC_NRX;
        dc_nbuf_t *b = dc_nbuf_new(n, n->net.rx_cap, 1, 0);
        if (!b)
            break;
        dc_verbs_req_t *r;
        st = dc_verbs_irecv(p->c, b->data, b->cap, NULL, &r);
        if (st == DC_ERR_AGAIN) {
            dc_nbuf_unref(n, b);
            break;
        }
        if (st != DC_OK) {
            dc_nbuf_unref(n, b);
            dc_peer_fail(n, p, st, "irecv failed");
            return;
        }
        p->rxb[slot] = b;
        p->rxr[slot] = r;
        p->rx_n++;
    }
    /* completed sends, in order */
    while (p->tx_posted > 0 && !p->dead) {
        dc_txe_t *e = &p->tx[p->tx_head];
        int done = 0;
        st = dc_verbs_test(e->r, &done, NULL);
        if (st != DC_OK) {
            e->r = NULL;
            dc_nbuf_unref(n, e->b);
            p->tx_head = (p->tx_head + 1) % p->tx_cap;
            p->tx_n--;
            p->tx_posted--;
            dc_peer_fail(n, p, st, "send failed");
            return;
        }
        if (!done)
            break;
        if (!p->is_parent)
            dc_trace(n, "done", e->b, p->node);
        dc_nbuf_unref(n, e->b);
        e->b = NULL;
        e->r = NULL;
        p->tx_head = (p->tx_head + 1) % p->tx_cap;
        p->tx_n--;
        p->tx_posted--;
    }
    dc_peer_post(n, p);
}

void dc_send_up(dc_node_t *n, dc_nbuf_t *b)
{
    if (n->net.up && !n->net.up->dead)
        dc_peer_send(n, n->net.up, b); /* posted once connected */
}

void dc_send_up_simple(dc_node_t *n, uint8_t type, uint8_t flags, uint64_t v, uint64_t base,
                       uint32_t chunk, uint32_t count)
{
    uint8_t h[DC_MSG_HDR_SIZE];
    dc_msg_simple(type, flags, v, base, n->me, chunk, count, h);
    dc_nbuf_t *b = dc_nbuf_copy(n, h, sizeof(h));
    if (b) {
        dc_send_up(n, b);
        dc_nbuf_unref(n, b);
    }
}

/* Stream of a broadcast frame's chunk. */
static uint32_t dc_chunk_stream(const dc_node_t *n, uint32_t chunk)
{
    if (!n->plan.chunk_stream || !n->layout || chunk >= n->layout->nchunks ||
        n->plan.chunk_stream[chunk] == UINT32_MAX)
        return DC_STREAM_NONE;
    return n->plan.chunk_stream[chunk];
}

/* Down: to the child that leads to `dest`; or, for every receiver, to every
 * child (control messages: stream DC_STREAM_ANY) or to the children that
 * subscribed to `stream` (a broadcast frame). */
void dc_send_down(dc_node_t *n, dc_nbuf_t *b, uint32_t dest, uint32_t stream)
{
    if (dest != DC_NODE_ALL && dest < n->nnodes && n->net.route[dest] &&
        !n->net.route[dest]->dead) {
        dc_peer_send(n, n->net.route[dest], b);
        return;
    }
    for (size_t i = 0; i < n->net.npeers; i++) {
        dc_peer_t *p = n->net.peers[i];
        if (p->is_parent || p->dead || p->node == UINT32_MAX)
            continue;
        if (dest == DC_NODE_ALL && stream != DC_STREAM_ANY &&
            (stream >= p->nsub || !p->sub[stream]))
            continue;
        dc_peer_send(n, p, b);
    }
}

/* A FRAME down: a broadcast one to the children subscribed to its chunk's
 * stream, an addressed one along the route to its node. */
void dc_send_frame_down(dc_node_t *n, dc_nbuf_t *b, const dc_msg_t *m)
{
    dc_send_down(n, b, m->node,
                 m->node == DC_NODE_ALL ? dc_chunk_stream(n, m->chunk) : DC_STREAM_ANY);
}

void dc_send_down_simple(dc_node_t *n, uint8_t type, uint64_t v, uint64_t base, uint32_t dest)
{
    uint8_t h[DC_MSG_HDR_SIZE];
    dc_msg_simple(type, 0, v, base, dest, 0, 0, h);
    dc_nbuf_t *b = dc_nbuf_copy(n, h, sizeof(h));
    if (b) {
        dc_send_down(n, b, dest, DC_STREAM_ANY);
        dc_nbuf_unref(n, b);
    }
}
