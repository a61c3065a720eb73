/* transport.c - transport registry, options, and the shared reliability
 * helpers (wire header, send window).  See transport.h. */
#include "verbs/transport.h"

#include "kernels/kern.h"
#include "verbs/auth.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Transports compiled in.  The ucx/rdma tables live in ucx.c / rdma.c;
 * weak references keep this file linkable while either is absent. */
extern const dc_verbs_ops_t dc_tcp_ops;
extern const dc_verbs_ops_t dc_ucx_ops __attribute__((weak));
extern const dc_verbs_ops_t dc_rdma_ops __attribute__((weak));

/* A weak reference never pulls an object out of a static archive (the CLI
 * and the tests link libdeltacast.a): these strong references do, when the
 * transport is compiled in (ucx.h / rdma.h). */
#if DC_HAVE_UCX
const dc_verbs_ops_t *dc_ucx_ops_get(void);
__attribute__((used)) static const dc_verbs_ops_t *(*const dc_verbs_pull_ucx)(void) =
    dc_ucx_ops_get;
#endif
#if DC_HAVE_VERBS
const dc_verbs_ops_t *dc_rdma_ops_get(void);
__attribute__((used)) static const dc_verbs_ops_t *(*const dc_verbs_pull_rdma)(void) =
    dc_rdma_ops_get;
#endif

size_t dc_verbs_list(const dc_verbs_ops_t **out, size_t cap)
{
    const dc_verbs_ops_t *all[3];
    size_t n = 0;
    if (&dc_rdma_ops)
        all[n++] = &dc_rdma_ops;
    if (&dc_ucx_ops)
        all[n++] = &dc_ucx_ops;
    all[n++] = &dc_tcp_ops;
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = all[i];
    return n;
}

dc_status_t dc_verbs_find(const char *name, const dc_verbs_ops_t **out)
{
    const dc_verbs_ops_t *all[8];
    size_t n = dc_verbs_list(all, DC_ARRAY_SIZE(all));
    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i]->name, name) != 0)
            continue;
        dc_status_t st = all[i]->init();
        if (st != DC_OK) {
            dc_error_prefix("transport %s unavailable", name);
            return st;
        }
        *out = all[i];
        return DC_OK;
    }
    return dc_error(DC_ERR_NOT_FOUND, "transport '%s' is not compiled in (have: %s%s%s)", name,
                    &dc_rdma_ops ? "rdma " : "", &dc_ucx_ops ? "ucx " : "", "tcp");
}

dc_status_t dc_verbs_select(const char *name, const dc_verbs_ops_t **out, char *why,
                            size_t why_len)
{
    char line[512];
    if (!name || !*name)
        name = dc_config_get("transport");
    if (!name || !*name)
        name = "auto";
    if (strcmp(name, "auto") != 0) {
        dc_status_t st = dc_verbs_find(name, out);
        if (st != DC_OK)
            return st; /* never a silent fallback */
        snprintf(line, sizeof(line), "%s: requested explicitly", name);
        goto chosen;
    }
    const dc_verbs_ops_t *all[8];
    size_t n = dc_verbs_list(all, DC_ARRAY_SIZE(all));
    size_t o = (size_t)snprintf(line, sizeof(line), "auto:");
    for (size_t i = 0; i < n; i++) {
        dc_status_t st = all[i]->init();
        if (st == DC_OK) {
            if (o < sizeof(line))
                snprintf(line + o, sizeof(line) - o, " chose %s (first usable in preference "
                                                     "order rdma > ucx > tcp)",
                         all[i]->name);
            *out = all[i];
            goto chosen;
        }
        if (o < sizeof(line))
            o += (size_t)snprintf(line + o, sizeof(line) - o, " %s unavailable (%s);",
                                  all[i]->name, dc_last_error());
    }
    return dc_error(DC_ERR_UNSUPPORTED, "no usable transport: %s", line);
chosen:
    DC_LOG_INFO("transport %s", line);
    if (why && why_len)
        snprintf(why, why_len, "%s", line);
    return DC_OK;
}

void dc_verbs_opts_init(dc_verbs_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    o->zerocopy = -1;
}

static dc_status_t dc_verbs_cfg_u64(const char *key, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t v;
    dc_status_t st = dc_config_get_size(key, &v);
    if (st != DC_OK)
        return st;
    if (v < lo || v > hi)
        return dc_error(DC_ERR_INVALID, "config %s=%llu out of range [%llu, %llu]", key,
                        (unsigned long long)v, (unsigned long long)lo, (unsigned long long)hi);
    *out = v;
    return DC_OK;
}

dc_status_t dc_verbs_config_streams(double edge_bps, uint32_t *out)
{
    const char *cv = dc_config_get("tcp_streams");
    if (cv && strcasecmp(cv, "auto") == 0) {
        uint32_t k = DC_VERBS_AUTO_STREAMS;
        if (edge_bps > 0 && isfinite(edge_bps)) {
            double q = ceil(edge_bps / DC_VERBS_FLOW_BPS);
            k = q < 1 ? 1 : q > DC_VERBS_AUTO_STREAMS_MAX ? DC_VERBS_AUTO_STREAMS_MAX : (uint32_t)q;
        }
        *out = k;
        return DC_OK;
    }
    uint64_t v = 0;
    dc_status_t st = dc_verbs_cfg_u64("tcp_streams", 1, 64, &v);
    if (st != DC_OK) {
        dc_error_prefix("config tcp_streams (a count or auto)");
        return st;
    }
    *out = (uint32_t)v;
    return DC_OK;
}

dc_status_t dc_verbs_opts_resolve(const dc_verbs_opts_t *in, dc_verbs_opts_t *out,
                                  uint8_t *secret_buf, size_t secret_cap)
{
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    if (in) {
        if (in->size < sizeof(size_t) || in->size > sizeof(o))
            return dc_error(DC_ERR_INVALID, "dc_verbs_opts_t: bad size %zu", in->size);
        memcpy(&o, in, in->size);
        o.size = sizeof(o);
    }
    uint64_t v = 0;
    dc_status_t st;
    if (o.streams == 0) {
        if ((st = dc_verbs_config_streams(0, &o.streams)) != DC_OK)
            return st;
    }
    if (o.streams > 64)
        return dc_error(DC_ERR_INVALID, "streams=%u: at most 64", o.streams);
    if (o.sockbuf == 0) {
        if ((st = dc_verbs_cfg_u64("tcp_sockbuf", 0, 1ull << 30, &v)) != DC_OK)
            return st;
        o.sockbuf = v;
    }
    if (o.timeout_ms == 0) {
        if ((st = dc_config_get_ms("timeout_ms", &v)) != DC_OK)
            return st;
        if (v == 0 || v > 86400000)
            return dc_error(DC_ERR_INVALID, "config timeout_ms=%llu: 1 .. 86400000 (a day)",
                            (unsigned long long)v);
        o.timeout_ms = (uint32_t)v;
    }
    if (o.hs_timeout_ms == 0) {
        if ((st = dc_config_get_ms("handshake_timeout_ms", &v)) != DC_OK)
            return st;
        if (v == 0 || v > 86400000)
            return dc_error(DC_ERR_INVALID,
                            "config handshake_timeout_ms=%llu: 1 .. 86400000 (a day)",
                            (unsigned long long)v);
        o.hs_timeout_ms = (uint32_t)v;
    }
    if (o.hs_timeout_ms > o.timeout_ms)
        o.hs_timeout_ms = o.timeout_ms;
    if (o.zerocopy < 0)
        o.zerocopy = 0;
    if (o.tls == DC_VERBS_TLS_CONFIG) {
        const char *t = dc_config_get("tls");
        o.tls = !t || strcmp(t, "auto") == 0 ? DC_VERBS_TLS_AUTO
                : strcmp(t, "on") == 0       ? DC_VERBS_TLS_ON
                : strcmp(t, "off") == 0      ? DC_VERBS_TLS_OFF
                                             : -1;
        if (o.tls < 0)
            return dc_error(DC_ERR_INVALID, "config tls=%s: want auto, on or off", t);
    } else if (o.tls < DC_VERBS_TLS_OFF || o.tls > DC_VERBS_TLS_AUTO) {
        return dc_error(DC_ERR_INVALID, "dc_verbs_opts_t.tls=%d: want DC_VERBS_TLS_*", o.tls);
    }
    if (o.max_msg_size == 0)
        o.max_msg_size = DC_VERBS_DEFAULT_MAX_MSG;
    if (o.max_msg_size > UINT32_MAX)
        return dc_error(DC_ERR_INVALID, "max_msg_size above 4 GiB");
    size_t slen = 0;
    if ((st = dc_auth_load_secret(o.secret, o.secret_len, secret_buf, secret_cap, &slen)) !=
        DC_OK)
        return st;
    o.secret = secret_buf;
    o.secret_len = slen;
    *out = o;
    return DC_OK;
}

dc_status_t dc_verbs_parse_addr(const char *addr, char *host, size_t host_len, uint16_t *port)
{
    if (!addr || !*addr)
        return dc_error(DC_ERR_INVALID, "empty address (want HOST:PORT)");
    const char *h = addr, *colon;
    size_t hl;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':')
            return dc_error(DC_ERR_INVALID, "address '%s': want [V6]:PORT", addr);
        h = addr + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return dc_error(DC_ERR_INVALID, "address '%s': want HOST:PORT", addr);
        hl = (size_t)(colon - addr);
    }
    if (hl == 0 || hl >= host_len)
        return dc_error(DC_ERR_INVALID, "address '%s': bad host part", addr);
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p > 65535)
        return dc_error(DC_ERR_INVALID, "address '%s': bad port", addr);
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (uint16_t)p;
    return DC_OK;
}

static dc_status_t dc_verbs_complete(dc_verbs_conn_t *c, dc_verbs_req_t *r, size_t *len,
                                     int timeout_ms, const char *what)
{
    double deadline = timeout_ms > 0 ? dc_now_s() + timeout_ms / 1000.0 : 0;
    for (;;) {
        int done = 0;
        dc_status_t st = dc_verbs_test(r, &done, len);
        if (st != DC_OK)
            return st;
        if (done)
            return DC_OK;
        if (deadline && dc_now_s() > deadline)
            return dc_error(DC_ERR_TIMEOUT, "%s: no completion within %d ms", what, timeout_ms);
        /* an error here is reported by the next test() unless the request
         * finished in the same progress call */
        (void)dc_verbs_wait(c, 50);
    }
}

static dc_status_t dc_verbs_post(dc_verbs_conn_t *c, bool send, void *buf, size_t len,
                                 dc_verbs_req_t **r, int timeout_ms)
{
    double deadline = timeout_ms > 0 ? dc_now_s() + timeout_ms / 1000.0 : 0;
    for (;;) {
        dc_status_t st = send ? dc_verbs_isend(c, buf, len, NULL, r)
                              : dc_verbs_irecv(c, buf, len, NULL, r);
        if (st != DC_ERR_AGAIN)
            return st;
        if (deadline && dc_now_s() > deadline)
            return dc_error(DC_ERR_TIMEOUT, "%s: could not post within %d ms",
                            send ? "send" : "recv", timeout_ms);
        if ((st = dc_verbs_wait(c, 50)) != DC_OK)
            return st;
    }
}

dc_status_t dc_verbs_send_blocking(dc_verbs_conn_t *c, const void *buf, size_t len,
                                   int timeout_ms)
{
    dc_verbs_req_t *r;
    dc_status_t st = dc_verbs_post(c, true, (void *)(uintptr_t)buf, len, &r, timeout_ms);
    if (st != DC_OK)
        return st;
    return dc_verbs_complete(c, r, NULL, timeout_ms, "send");
}

dc_status_t dc_verbs_recv_blocking(dc_verbs_conn_t *c, void *buf, size_t cap, size_t *len,
                                   int timeout_ms)
{
    dc_verbs_req_t *r;
    dc_status_t st = dc_verbs_post(c, false, buf, cap, &r, timeout_ms);
    if (st != DC_OK)
        return st;
    return dc_verbs_complete(c, r, len, timeout_ms, "recv");
}

/* --- wire header ---------------------------------------------------------- */

void dc_verbs_hdr_pack(const dc_verbs_hdr_t *h, uint8_t out[DC_VERBS_HDR_SIZE])
{
    dc_store_le32(out, DC_VERBS_HDR_MAGIC);
    out[4] = h->type;
    out[5] = h->flags;
    dc_store_le16(out + 6, h->stream);
    dc_store_le64(out + 8, h->seq);
    dc_store_le32(out + 16, h->len);
    dc_store_le32(out + 20, h->crc);
    dc_store_le32(out + 24, dc_crc32c(0, out, 24));
    dc_store_le32(out + 28, 0);
}

dc_status_t dc_verbs_hdr_unpack(const uint8_t in[DC_VERBS_HDR_SIZE], uint64_t max_len,
                                dc_verbs_hdr_t *out)
{
    if (dc_load_le32(in) != DC_VERBS_HDR_MAGIC)
        return dc_error(DC_ERR_CORRUPT, "transport header: bad magic 0x%08x", dc_load_le32(in));
    if (dc_load_le32(in + 24) != dc_crc32c(0, in, 24))
        return dc_error(DC_ERR_CORRUPT, "transport header: header checksum mismatch");
    dc_verbs_hdr_t h;
    h.type = in[4];
    h.flags = in[5];
    h.stream = dc_load_le16(in + 6);
    h.seq = dc_load_le64(in + 8);
    h.len = dc_load_le32(in + 16);
    h.crc = dc_load_le32(in + 20);
    if (h.type < DC_VERBS_MSG_DATA || h.type > DC_VERBS_MSG_BYE)
        return dc_error(DC_ERR_FORMAT, "transport header: unknown type %u", h.type);
    if ((h.flags & ~(uint8_t)(DC_VERBS_HDR_F_TRAILER | DC_VERBS_HDR_F_MSGCRC)) != 0 ||
        (h.flags & DC_VERBS_HDR_F_TRAILER && h.flags & DC_VERBS_HDR_F_MSGCRC) ||
        (h.type != DC_VERBS_MSG_DATA && h.flags != 0))
        return dc_error(DC_ERR_FORMAT, "transport header: unknown flags 0x%02x", h.flags);
    if (h.type != DC_VERBS_MSG_DATA && h.len != 0)
        return dc_error(DC_ERR_FORMAT, "transport header: control message with length %u",
                        h.len);
    if (h.len > max_len)
        return dc_error(DC_ERR_FORMAT, "transport header: message length %u exceeds the "
                                       "maximum %llu",
                        h.len, (unsigned long long)max_len);
    *out = h;
    return DC_OK;
}

/* --- send window ----------------------------------------------------------- */

void dc_verbs_window_init(dc_verbs_window_t *w)
{
    memset(w, 0, sizeof(*w));
}

dc_status_t dc_verbs_window_push(dc_verbs_window_t *w, void *item, uint64_t *seq)
{
    if (w->next - w->base >= DC_VERBS_MAX_INFLIGHT)
        return DC_ERR_AGAIN;
    w->slot[w->next % DC_VERBS_MAX_INFLIGHT] = item;
    *seq = w->next++;
    return DC_OK;
}

void *dc_verbs_window_get(const dc_verbs_window_t *w, uint64_t seq)
{
    if (seq < w->base || seq >= w->next)
        return NULL;
    return w->slot[seq % DC_VERBS_MAX_INFLIGHT];
}

void *dc_verbs_window_ack(dc_verbs_window_t *w, uint64_t seq)
{
    if (seq < w->base || seq >= w->next)
        return NULL;
    void **s = &w->slot[seq % DC_VERBS_MAX_INFLIGHT];
    void *item = *s;
    *s = NULL;
    while (w->base < w->next && !w->slot[w->base % DC_VERBS_MAX_INFLIGHT])
        w->base++;
    return item;
}
