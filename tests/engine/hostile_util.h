/* hostile_util.h - an AUTHENTICATED hostile peer for test_hostile.c: it
 * knows the job secret, so the transport lets it in, and then it speaks
 * malformed engine messages (engine/proto.h) to a real `deltacast node`.
 *
 *   hc_*    one transport connection (the real TCP transport and HMAC
 *           handshake): sends are copied and kept until the peer
 *           acknowledged them, every message the node sends back is drained
 *           and counted by type.
 *   rnd*    a deterministic xorshift generator (a fixed seed per test: a
 *           failure replays exactly).
 *   mut_*   message mutations: header fields set to edge values, body
 *           lengths that lie, truncation, extension, bit flips. */
#ifndef DC_TEST_HOSTILE_UTIL_H
#define DC_TEST_HOSTILE_UTIL_H

#include "refit_util.h"

#include "engine/journal.h"
#include "engine/layout.h"
#include "engine/proto.h"
#include "kernels/codec.h"
#include "kernels/frame.h"
#include "verbs/transport.h"

#define HC_NRX 16
#define HC_NTX 128
#define HC_RXCAP (4u << 20)
#define HC_MSGMAX (256u << 10)
#define HC_NDONE 64

/* --- deterministic randomness ------------------------------------------------ */

static uint64_t hc_rng = 0x9e3779b97f4a7c15ull;

/* The stream's seed: `fixed`, or DC_HOSTILE_SEED (explore other streams by
 * hand: DC_HOSTILE_SEED=n meson test engine_hostile); DC_HOSTILE_N scales
 * the number of messages (default 1). */
static inline void hc_seed(uint64_t fixed)
{
    const char *e = getenv("DC_HOSTILE_SEED");
    hc_rng = e && *e ? strtoull(e, NULL, 0) * 0x9e3779b97f4a7c15ull + 1 : fixed;
    if (!hc_rng)
        hc_rng = 1;
    cr_log_info("hostile stream seed 0x%llx", (unsigned long long)hc_rng);
}

static inline int hc_scale(int n)
{
    const char *e = getenv("DC_HOSTILE_N");
    int k = e && *e ? atoi(e) : 1;
    return n * (k > 0 ? k : 1);
}

static inline uint64_t rnd(void)
{
    hc_rng ^= hc_rng << 13;
    hc_rng ^= hc_rng >> 7;
    hc_rng ^= hc_rng << 17;
    return hc_rng;
}

static inline uint32_t rn(uint32_t n)
{
    return n ? (uint32_t)(rnd() % n) : 0;
}

static inline int chance(unsigned pct)
{
    return rn(100) < pct;
}

/* An edge value for a u32 field (chunk, count, node, body length). */
static inline uint32_t edge32(uint32_t nch, uint32_t nnodes)
{
    const uint32_t v[] = {0,           1,           2,           nch - 1,     nch,
                          nch + 1,     nnodes,      nnodes + 1,  0x7fffffffu, 0x80000000u,
                          0xfffffffeu, 0xffffffffu, DC_MAX_CHUNKS - 1, DC_MAX_CHUNKS,
                          DC_MAX_CHUNKS + 1, DC_SUB_MAX, DC_SUB_MAX + 1, 4096, 65535, 65536};
    if (chance(15))
        return (uint32_t)rnd();
    return v[rn(DC_ARRAY_SIZE(v))];
}

/* An edge value for a u64 field (version, baseline). */
static inline uint64_t edge64(void)
{
    const uint64_t v[] = {0, 1, 2, 3, 100, 101, 999, UINT64_MAX, UINT64_MAX - 1, 1ull << 63,
                          1ull << 32, 0xffffffffull};
    if (chance(15))
        return rnd();
    return v[rn(DC_ARRAY_SIZE(v))];
}

/* --- one message being built --------------------------------------------------- */

typedef struct hmsg {
    uint8_t b[HC_MSGMAX];
    size_t len;
} hmsg_t;

static inline void hmsg_hdr(hmsg_t *m, uint8_t type, uint8_t flags, uint64_t v, uint64_t base,
                            uint32_t node, uint32_t chunk, uint32_t count, size_t body_len)
{
    dc_msg_t h = {.type = type, .flags = flags, .version = v, .baseline = base, .node = node,
                  .chunk = chunk, .count = count, .body_len = (uint32_t)body_len};
    dc_msg_pack(&h, m->b);
    m->len = DC_MSG_HDR_SIZE + body_len;
}

static inline void hmsg_rand_body(hmsg_t *m, size_t body_len)
{
    for (size_t i = 0; i < body_len; i++)
        m->b[DC_MSG_HDR_SIZE + i] = (uint8_t)rnd();
}

/* One mutation of a built message.  `nch` / `nnodes` pick edge values. */
static inline void mut_one(hmsg_t *m, uint32_t nch, uint32_t nnodes)
{
    static const int off32[] = {24, 28, 32, 36};
    switch (rn(9)) {
    case 0: /* bit flip anywhere */
        if (m->len)
            m->b[rn((uint32_t)m->len)] ^= (uint8_t)(1u << rn(8));
        break;
    case 1: /* a u32 header field (node, chunk, count, body length) */
        if (m->len >= DC_MSG_HDR_SIZE)
            dc_store_le32(m->b + off32[rn(4)], edge32(nch, nnodes));
        break;
    case 2: /* version or baseline */
        if (m->len >= DC_MSG_HDR_SIZE)
            dc_store_le64(m->b + (chance(50) ? 8 : 16), edge64());
        break;
    case 3: { /* body length lies by a little */
        if (m->len < DC_MSG_HDR_SIZE)
            break;
        uint32_t bl = (uint32_t)(m->len - DC_MSG_HDR_SIZE);
        const uint32_t lie[] = {bl + 1, bl - 1, 0, bl + 4096, bl * 2 + 1, UINT32_MAX};
        dc_store_le32(m->b + 36, lie[rn(DC_ARRAY_SIZE(lie))]);
        break;
    }
    case 4: /* truncated (the header's body length still says the old size) */
        if (m->len)
            m->len = rn((uint32_t)m->len);
        break;
    case 5: /* extended with junk; half the time the body length follows */
        if (m->len >= DC_MSG_HDR_SIZE && m->len < HC_MSGMAX - 64) {
            uint32_t k = 1 + rn(63);
            for (uint32_t i = 0; i < k; i++)
                m->b[m->len + i] = (uint8_t)rnd();
            m->len += k;
            if (chance(50))
                dc_store_le32(m->b + 36, (uint32_t)(m->len - DC_MSG_HDR_SIZE));
        }
        break;
    case 6: /* magic */
        if (m->len >= 4)
            dc_store_le32(m->b, chance(50) ? (uint32_t)rnd() : DC_MSG_MAGIC ^ 0x01000000u);
        break;
    case 7: { /* type: another known one, or an unknown one */
        static const uint8_t ty[] = {0, 1, 2, 3, 4, 5, 6, 7, 15, 16, 17, 18, 19,
                                     20, 21, 22, 23, 0x80, 0xff};
        if (m->len > 4)
            m->b[4] = ty[rn(DC_ARRAY_SIZE(ty))];
        break;
    }
    default: /* a span of the body overwritten */
        if (m->len > DC_MSG_HDR_SIZE) {
            uint32_t bl = (uint32_t)(m->len - DC_MSG_HDR_SIZE);
            uint32_t at = rn(bl), k = 1 + rn(DC_MIN(bl - at, 16u));
            for (uint32_t i = 0; i < k; i++)
                m->b[DC_MSG_HDR_SIZE + at + i] = chance(50) ? (uint8_t)rnd() : 0xff;
        }
        break;
    }
}

/* Up to three mutations on top of a built message, pct% of the time. */
static inline void mut_some(hmsg_t *m, unsigned pct, uint32_t nch, uint32_t nnodes)
{
    int nm = chance(pct) ? 1 + (int)rn(3) : 0;
    for (int i = 0; i < nm; i++)
        mut_one(m, nch, nnodes);
}

/* Raw garbage of up to 300 bytes, half the time starting with the magic. */
static inline void hmsg_garbage(hmsg_t *m)
{
    m->len = rn(300);
    for (size_t i = 0; i < m->len; i++)
        m->b[i] = (uint8_t)rnd();
    if (m->len >= 4 && chance(50))
        dc_store_le32(m->b, DC_MSG_MAGIC);
}

/* --- a hostile transport connection --------------------------------------------- */

typedef struct hc {
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c;
    uint32_t me;            /* the node id it speaks as (FRAMEs addressed to it counted) */
    int dead;
    uint8_t *rxb[HC_NRX];
    dc_verbs_req_t *rxr[HC_NRX];
    unsigned rx_head;
    uint8_t *txb[HC_NTX];
    dc_verbs_req_t *txr[HC_NTX];
    unsigned tx_head, tx_n;
    uint64_t sent, got[256], got_bad;
    uint64_t last_begin;    /* version of the last BEGIN received */
    uint32_t sub_chunk;     /* the chunk field of the last SUB received */
    uint64_t frames_to_me;  /* FRAMEs addressed to `me` received */
    uint64_t done_v[HC_NDONE]; /* versions of the last DONEs received */
    uint64_t up_v;          /* version of the last ACK or NEED received */
    uint64_t sent_last_v;   /* version of the last SENT with DC_SENT_F_LAST received */
    unsigned ndone;
} hc_t;

static inline void hc_opts(dc_verbs_opts_t *o)
{
    dc_verbs_opts_init(o);
    /* the job's secret (job_init() puts it in the environment) */
    const char *sec = getenv("DELTACAST_SECRET");
    cr_assert_not_null(sec, "no job secret: job_init() first");
    o->secret = sec;
    o->secret_len = strlen(sec);
    o->streams = 1;
    o->timeout_ms = 1000;
}

static inline void hc_handle(hc_t *h, const uint8_t *b, size_t len)
{
    dc_msg_t m;
    if (dc_msg_parse(b, len, &m) != DC_OK) {
        h->got_bad++;
        return;
    }
    h->got[m.type]++;
    if (m.type == DC_MSG_BEGIN)
        h->last_begin = m.version;
    else if (m.type == DC_MSG_SUB)
        h->sub_chunk = m.chunk;
    else if (m.type == DC_MSG_FRAME && m.node == h->me)
        h->frames_to_me++;
    else if (m.type == DC_MSG_ACK || m.type == DC_MSG_NEED)
        h->up_v = m.version;
    else if (m.type == DC_MSG_DONE)
        h->done_v[h->ndone++ % HC_NDONE] = m.version;
    else if (m.type == DC_MSG_SENT && (m.flags & DC_SENT_F_LAST))
        h->sent_last_v = m.version;
}

static inline int hc_got_done(const hc_t *h, uint64_t v)
{
    for (unsigned i = 0; i < HC_NDONE && i < h->ndone; i++)
        if (h->done_v[i] == v)
            return 1;
    return 0;
}

/* Start the receives on a fresh connection. */
static inline void hc_start(hc_t *h)
{
    for (unsigned k = 0; k < HC_NRX; k++) {
        h->rxb[k] = malloc(HC_RXCAP);
        cr_assert_not_null(h->rxb[k]);
        cr_assert_eq(dc_verbs_irecv(h->c, h->rxb[k], HC_RXCAP, NULL, &h->rxr[k]), DC_OK, "%s",
                     dc_last_error());
    }
}

/* Progress: completed receives (in posting order, reposted), completed
 * sends.  A connection the node closed is marked dead, never asserted on. */
static inline void hc_pump(hc_t *h)
{
    if (h->dead)
        return;
    if (h->c->ops->progress(h->c) != DC_OK) {
        h->dead = 1;
        return;
    }
    for (;;) {
        unsigned k = h->rx_head;
        int done = 0;
        size_t len = 0;
        if (dc_verbs_test(h->rxr[k], &done, &len) != DC_OK) {
            h->rxr[k] = NULL;
            h->dead = 1;
            return;
        }
        if (!done)
            break;
        hc_handle(h, h->rxb[k], len);
        if (dc_verbs_irecv(h->c, h->rxb[k], HC_RXCAP, NULL, &h->rxr[k]) != DC_OK) {
            h->rxr[k] = NULL;
            h->dead = 1;
            return;
        }
        h->rx_head = (k + 1) % HC_NRX;
    }
    while (h->tx_n) {
        unsigned k = h->tx_head;
        int done = 0;
        if (dc_verbs_test(h->txr[k], &done, NULL) != DC_OK) {
            h->txr[k] = NULL;
            h->dead = 1;
            return;
        }
        if (!done)
            break;
        free(h->txb[k]);
        h->txb[k] = NULL;
        h->txr[k] = NULL;
        h->tx_head = (k + 1) % HC_NTX;
        h->tx_n--;
    }
}

/* Queue one message (copied).  0 when the connection is dead. */
static inline int hc_send(hc_t *h, const void *buf, size_t len)
{
    uint64_t dl = dc_now_ns() + 10000000000ull;
    while (!h->dead && h->tx_n == HC_NTX && dc_now_ns() < dl) {
        hc_pump(h);
        if (h->tx_n == HC_NTX)
            h->c->ops->wait(h->c, 1);
    }
    if (h->dead || h->tx_n == HC_NTX)
        return 0;
    unsigned k = (h->tx_head + h->tx_n) % HC_NTX;
    h->txb[k] = malloc(len ? len : 1);
    cr_assert_not_null(h->txb[k]);
    if (len)
        memcpy(h->txb[k], buf, len);
    dc_status_t st;
    while ((st = dc_verbs_isend(h->c, h->txb[k], len, NULL, &h->txr[k])) == DC_ERR_AGAIN &&
           dc_now_ns() < dl) {
        hc_pump(h);
        h->c->ops->wait(h->c, 1);
    }
    if (st != DC_OK) {
        free(h->txb[k]);
        h->txb[k] = NULL;
        h->dead = 1;
        return 0;
    }
    h->tx_n++;
    h->sent++;
    hc_pump(h);
    return 1;
}

/* Pump for up to ms milliseconds, or until pred(h) says so. */
static inline int hc_until(hc_t *h, int ms, int (*pred)(hc_t *h, uint64_t arg), uint64_t arg)
{
    uint64_t dl = dc_now_ns() + (uint64_t)ms * 1000000ull;
    while (dc_now_ns() < dl) {
        hc_pump(h);
        if (pred && pred(h, arg))
            return 1;
        if (h->dead)
            return 0;
        h->c->ops->wait(h->c, 2);
    }
    return pred ? pred(h, arg) : 1;
}

static inline int hc_pred_flushed(hc_t *h, uint64_t arg)
{
    (void)arg;
    return h->tx_n == 0;
}

static inline int hc_pred_type(hc_t *h, uint64_t type_and_count)
{
    return h->got[type_and_count & 0xff] >= (type_and_count >> 8);
}

static inline int hc_pred_up_v(hc_t *h, uint64_t v)
{
    return h->up_v == v;
}

static inline int hc_pred_sent_last(hc_t *h, uint64_t v)
{
    return h->sent_last_v == v;
}

static inline int hc_pred_done(hc_t *h, uint64_t v)
{
    return hc_got_done(h, v);
}

static inline void hc_close(hc_t *h)
{
    if (h->c)
        dc_verbs_close(h->c); /* frees the outstanding requests */
    h->c = NULL;
    for (unsigned k = 0; k < HC_NRX; k++) {
        free(h->rxb[k]);
        h->rxb[k] = NULL;
    }
    for (unsigned k = 0; k < HC_NTX; k++) {
        free(h->txb[k]);
        h->txb[k] = NULL;
    }
    h->tx_n = 0;
}

/* Dial addr as an authenticated peer (speaking as node `me`). */
static inline void hc_connect(hc_t *h, const char *addr, uint32_t me)
{
    memset(h, 0, sizeof(*h));
    h->me = me;
    cr_assert_eq(dc_verbs_find("tcp", &h->t), DC_OK);
    dc_verbs_opts_t o;
    hc_opts(&o);
    dc_status_t st = DC_ERR_AGAIN;
    for (int tries = 0; tries < 100 && st != DC_OK; tries++) {
        if (h->c)
            dc_verbs_close(h->c);
        h->c = NULL;
        st = h->t->connect(&o, addr, &h->c);
        if (st != DC_OK) {
            usleep(50000);
            continue;
        }
        while ((st = h->t->connect_test(h->c)) == DC_ERR_AGAIN)
            h->t->wait(h->c, 10);
        if (st != DC_OK)
            usleep(50000);
    }
    cr_assert_eq(st, DC_OK, "connect to %s: %s", addr, dc_last_error());
    hc_start(h);
}

/* Accept one authenticated connection on l (a node dialling its parent). */
static inline void hc_accept(hc_t *h, const dc_verbs_ops_t *t, dc_verbs_listener_t *l,
                             uint32_t me, int timeout_ms)
{
    memset(h, 0, sizeof(*h));
    h->me = me;
    h->t = t;
    dc_status_t st = DC_ERR_AGAIN;
    uint64_t dl = dc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while ((st = t->accept(l, &h->c)) == DC_ERR_AGAIN && dc_now_ns() < dl)
        usleep(2000);
    cr_assert_eq(st, DC_OK, "no node dialled in %d ms: %s", timeout_ms, dc_last_error());
    hc_start(h);
}

/* The node process is still running (not exited, not killed). */
static inline int hc_alive(job_t *j, int rank)
{
    int status;
    return j->pid[rank] > 0 && waitpid(j->pid[rank], &status, WNOHANG) == 0;
}

#endif
