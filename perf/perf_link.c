/*
 * perf_link.c - `deltacast perf link`: goodput, message rate and latency of
 * one link through a transport, like iperf3 / ib_write_bw.
 *
 * Protocol over one authenticated transport connection (messages):
 *
 *   client -> server  SETUP (32 bytes: "DCPL", version, size, flags)
 *   client -> server  --warmup data messages, `depth` in flight, all of them
 *                     acknowledged before the timed phase starts (as
 *                     ucx_perftest's -w: not counted in the goodput)
 *   client -> server  data messages of `size` bytes (>= 1) for --duration
 *                     or --bytes, keeping `depth` in flight
 *   client -> server  an empty message: end of the bandwidth phase
 *   server -> client  RESULT (48 bytes: bytes, messages, mismatches, ns,
 *                     the server's CPU ns over the same span)
 *   client <-> server ping-pong of 8-byte messages (--lat-iters), the server
 *                     echoing each; an empty message ends it
 *
 * With --verify every data message is seeded random bytes the server
 * regenerates and compares: a mismatch makes the client fail (exit 1).
 * Goodput counts payload bytes acknowledged by the receiver (the transport
 * completes a send only after the peer verified its CRC32C), in 1e9 bit/s.
 *
 * The client passes each message's CRC32C to the transport (isend_crc), as
 * the engine does for a frame whose CRC32C it computed when encoding it: it
 * is computed once per buffer content (once for the re-sent buffer; after
 * each fill with --verify).  The receiving transport still checks every
 * byte.  --transport-crc has the transport compute it per message instead.
 *
 * -R (the server sends) and --bidir (both at once) use SETUP version 2:
 * see dc_pl_serve2.  -i SEC reports each interval (dc_pl_iv_t); -a sweeps
 * the message size, one connection per size (dc_pl_sweep).
 *
 * --tls runs the client twice against the same server, in clear and then
 * with TLS 1.3 (tcp; the server's config tls=auto takes both), and reports
 * both side by side: goodput ratio, CPU seconds per GB (1e9 bytes) of the
 * client (getrusage over its bandwidth phase) and of the server (reported in
 * RESULT).  Every report says the link's "encryption": the cipher suite, or
 * "none".
 */
#include "kernels/kern.h"
#include "perf/perf.h"
#include "testkit/cmdline.h"
#include "testkit/harness.h"
#include "verbs/fault.h"
#include "verbs/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define DC_PL_MAGIC 0x4c504344u /* "DCPL" */
#define DC_PL_SETUP 32
#define DC_PL_RESULT 48
#define DC_PL_FLAG_VERIFY 1u
#define DC_PL_MAX_DEPTH 64
#define DC_PL_LAT_SIZE 8

static void dc_perf_link_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast perf link --server [--bind ADDR:PORT] [--transport T] [--once]\n"
            "       deltacast perf link --client ADDR:PORT [--transport tcp|ucx|rdma|auto]\n"
            "                           [--streams K] [--size BYTES] [--duration S]\n"
            "                           [--bytes N] [--warmup N] [--lat-iters N] [--verify]\n"
            "                           [-i SEC] [-R | --bidir] [-a] [--tls] [--json]\n"
            "                           [--insecure]\n"
            "\n"
            "Measure a link through a deltacast transport: goodput (Gb/s, 1e9 bit/s, payload\n"
            "bytes acknowledged by the receiver), message rate, and round-trip latency\n"
            "percentiles of an 8-byte ping-pong.  Reports which transport and device were\n"
            "used and why.  Both sides need the job secret (DELTACAST_SECRET_FILE or\n"
            "DELTACAST_SECRET), or both --insecure on loopback.  The server keeps serving\n"
            "clients one after another.\n"
            "\n"
            "Options:\n"
            "  --server                 serve (default bind 0.0.0.0:7471)\n"
            "  --bind ADDR:PORT         server address (port 0: any; see --addr-file)\n"
            "  --once                   server: exit after one client\n"
            "  --addr-file FILE         server: write the bound ADDR:PORT to FILE\n"
            "  --client ADDR:PORT       run against the server at ADDR:PORT\n"
            "  --transport T            tcp, ucx, rdma or auto (default: config transport, auto;\n"
            "                           both sides must use the same).  A transport that\n"
            "                           cannot run is an error, never a silent fallback\n"
            "  --streams K              parallel streams (tcp; default config tcp_streams)\n"
            "  --size BYTES             message size (default 4MiB)\n"
            "  --duration S             bandwidth phase length in seconds (default 5)\n"
            "  --bytes N                send exactly N bytes instead of --duration\n"
            "  --depth D                messages in flight (default: about 32 MiB worth)\n"
            "  --warmup N               first send N messages, untimed and not counted, and\n"
            "                           wait for all of them (as ucx_perftest -w; default 0)\n"
            "  --lat-iters N            ping-pong round trips (default 2000; 0: skip)\n"
            "  --zerocopy               tcp: send large messages with MSG_ZEROCOPY (off by\n"
            "                           default: on loopback the kernel copies anyway)\n"
            "  --verify                 seeded data, checked byte for byte by the server\n"
            "                           (else one buffer is re-sent, as iperf3 does)\n"
            "  --transport-crc          the transport computes each message's CRC32C (isend);\n"
            "                           default: the client computes it once per buffer\n"
            "                           content and passes it (isend_crc), as the engine does\n"
            "                           for encoded frames.  The receiver checks every byte\n"
            "                           either way\n"
            "  -i, --interval SEC       a report every SEC seconds during the bandwidth phase\n"
            "                           (as iperf3 -i): bytes, Gb/s and msg/s of each interval,\n"
            "                           the last one up to the end of the phase; in --json an\n"
            "                           \"intervals\" array whose bytes sum to the total\n"
            "                           (default 1; 0: off; a sweep: off unless given)\n"
            "  -R, --reverse            the server sends, the client receives and counts (as\n"
            "                           iperf3 -R); with --verify the client checks each byte\n"
            "  --bidir                  both directions at once on the one connection, each\n"
            "                           reported on its own (TX: client to server, RX: server\n"
            "                           to client; JSON client_to_server, server_to_client)\n"
            "  -a, --sweep              one run per message size 2^k from 64 B up to --size\n"
            "                           (as ib_write_bw -a): a line per size with Gb/s, msg/s\n"
            "                           and p50 latency; in --json a \"sweep\" array of the runs.\n"
            "                           Each size runs --duration (default 1 s here); with -R\n"
            "                           the server sends\n"
            "  --tls                    tcp: measure the link twice, in clear and with TLS 1.3\n"
            "                           (config tls_cipher; PSK from the job secret or the\n"
            "                           tls_* certificates), side by side: goodput ratio and\n"
            "                           CPU seconds per GB of client and server.  Without it\n"
            "                           the link is encrypted as config tls says (tls=on:\n"
            "                           encrypted; auto: clear, perf link is no region edge)\n"
            "  --timeout-ms MS          connect/reconnect timeout (default config)\n"
            "  --insecure               no job secret (a public one): refused unless the\n"
            "                           server's --bind and the client's ADDR are loopback\n"
            "                           addresses (127.0.0.0/8, ::1); both ends need it; said\n"
            "                           in the report (JSON \"insecure\": true)\n"
            "  --json                   one JSON object (keys: transport, device, why,\n"
            "                           path_note (why a faster path of this node, e.g.\n"
            "                           RDMA under UCX, went unused; null: none), streams,\n"
            "                           size, bytes, seconds, gbps, msg_rate,\n"
            "                           latency_us {p50, p99}, resends, reconnects,\n"
            "                           encryption (cipher suite or \"none\"), ktls,\n"
            "                           cpu_s_per_gb, server_cpu_s_per_gb, direction\n"
            "                           (forward, reverse, bidir), intervals, received_bytes,\n"
            "                           sent_bytes, server_sent_bytes (-R, --bidir)); with\n"
            "                           --tls: {clear, tls, goodput_ratio, encryption}; with\n"
            "                           --sweep: {transport, device, direction, sweep: [...]}\n"
            "  -h, --help               show this help\n");
}

/* --- seeded data for --verify -------------------------------------------------- */

static void dc_pl_fill(uint8_t *p, size_t n, uint64_t msg_index)
{
    uint64_t s = msg_index * 0x9e3779b97f4a7c15ull + 0x1234567ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        memcpy(p + i, &z, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)(msg_index + i);
}

/* --- helpers ------------------------------------------------------------------------- */

typedef struct dc_pl_opts {
    const char *transport;
    uint32_t streams;
    uint64_t size;
    double duration;
    uint64_t bytes;
    uint32_t depth;
    uint32_t lat_iters;
    uint64_t warmup;
    bool verify;
    bool zerocopy;
    bool transport_crc;
    bool json;
    bool tls_compare;
    bool insecure; /* --insecure: the public secret below, loopback only */
    uint32_t timeout_ms;
    double interval; /* -i: seconds per interval report; 0: none */
    bool reverse;    /* -R: the server sends */
    bool bidir;      /* --bidir: both directions at once */
} dc_pl_opts_t;

/* --- --insecure: a well-known secret instead of the job's, both ends on
 * loopback addresses (anyone on this machine could connect) ------------ */

#define DC_PL_INSECURE_SECRET "deltacast-perf-link-insecure-loopback-only"

static void dc_pl_auth(dc_verbs_opts_t *o, const dc_pl_opts_t *po)
{
    if (po->insecure) {
        o->secret = DC_PL_INSECURE_SECRET;
        o->secret_len = sizeof(DC_PL_INSECURE_SECRET) - 1;
    }
}

/* Whether HOST of "HOST:PORT" / "[V6]:PORT" resolves to loopback
 * addresses only (127.0.0.0/8, ::1). */
static bool dc_pl_loopback(const char *addr)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']')
        addr++, n -= 2;
    if (n == 0 || n >= sizeof(host))
        return false;
    memcpy(host, addr, n);
    host[n] = 0;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &ai) != 0)
        return false;
    bool ok = ai != NULL;
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        if (p->ai_family == AF_INET)
            ok &= (ntohl(((struct sockaddr_in *)p->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        else if (p->ai_family == AF_INET6)
            ok &= IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr) != 0;
        else
            ok = false;
    }
    freeaddrinfo(ai);
    return ok;
}

/* CPU seconds (user + system) of this process so far. */
static double dc_pl_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* Post the send of one data message of `len` bytes from `buf`, whose
 * CRC32C is `crc` when `len` is a full buffer (computed when the buffer was
 * filled), else computed here. */
static dc_status_t dc_pl_isend(const dc_verbs_ops_t *t, dc_verbs_conn_t *c,
                               const dc_pl_opts_t *po, const uint8_t *buf, size_t len,
                               uint32_t crc, dc_verbs_req_t **out)
{
    if (po->transport_crc)
        return t->isend(c, buf, len, NULL, out);
    if (len != po->size)
        crc = dc_crc32c(0, buf, len);
    return dc_verbs_isend_crc(c, buf, len, NULL, crc, out);
}

/* The other transport the server at addr completes a handshake with
 * (2 s each, quietly), or NULL: a client of one transport and a server of
 * another otherwise wait for each other until timeout_ms (tcp to a ucx
 * listener) or fail with a bare reset (ucx to a tcp one). */
static const char *dc_pl_probe(const dc_verbs_ops_t *mine, const char *addr,
                               const dc_verbs_opts_t *mo)
{
    static const char *const names[] = {"tcp", "ucx", "rdma"};
    dc_log_level_t lvl = dc_log_get_level();
    dc_log_set_level(DC_LOG_LEVEL_ERROR);
    const char *found = NULL;
    for (size_t i = 0; i < DC_ARRAY_SIZE(names) && !found; i++) {
        const dc_verbs_ops_t *t;
        char why[256];
        if (strcmp(names[i], mine->name) == 0 ||
            dc_verbs_select(names[i], &t, why, sizeof(why)) != DC_OK)
            continue;
        dc_verbs_opts_t o = *mo;
        o.timeout_ms = 2000;
        dc_verbs_conn_t *c = NULL;
        if (t->connect(&o, addr, &c) != DC_OK)
            continue;
        dc_status_t st;
        double dl = dc_now_s() + 2.5;
        while ((st = t->connect_test(c)) == DC_ERR_AGAIN && dc_now_s() < dl)
            (void)t->wait(c, 10);
        if (st == DC_OK)
            found = names[i];
        t->close(c);
    }
    dc_log_set_level(lvl);
    return found;
}

/* A failed connection to addr: where the server speaks another transport,
 * say so (the error of `st` stays the detail). */
static int dc_pl_conn_fail(const dc_verbs_ops_t *t, const char *addr, const dc_verbs_opts_t *o,
                           dc_status_t st)
{
    char err[1024];
    snprintf(err, sizeof(err), "%s", dc_last_error());
    const char *other = dc_pl_probe(t, addr, o);
    if (other) {
        dc_error(DC_ERR_INVALID,
                 "transport mismatch: the server at %s answers %s, this client uses %s (both "
                 "sides must use the same --transport); %s", addr, other, t->name, err);
        return dc_cli_fail("perf link", DC_ERR_INVALID, NULL);
    }
    dc_error(st, "%s", err);
    return dc_cli_fail("perf link", st, "connect %s", addr);
}

/* Wait for the connection; on a terminal, after a second, say what it
 * waits for (a server runs one client at a time: others queue).  After 3 s
 * without a handshake (and `o` given), ask whether the server speaks
 * another transport: then fail at once saying so (*mismatch set). */
static dc_status_t dc_pl_wait_conn(const dc_verbs_ops_t *t, dc_verbs_conn_t *c,
                                   const char *addr, const dc_verbs_opts_t *o,
                                   const char **mismatch)
{
    dc_status_t st;
    double t0 = dc_now_s(), next = t0 + 1.0, probe = t0 + 3.0;
    while ((st = t->connect_test(c)) == DC_ERR_AGAIN) {
        (void)t->wait(c, 10);
        double now = dc_now_s();
        if (o && mismatch && now >= probe) {
            probe = now + 1e9; /* once */
            if ((*mismatch = dc_pl_probe(t, addr, o)) != NULL) {
                dc_perf_progress_end();
                return dc_error(DC_ERR_INVALID,
                                "transport mismatch: the server at %s answers %s, this client "
                                "uses %s (both sides must use the same --transport)",
                                addr, *mismatch, t->name);
            }
        }
        if (addr && now >= next) {
            dc_perf_progress("perf link: waiting %.0f s for %s to complete the handshake "
                             "(a server serves one client at a time; or it is unreachable)",
                             now - t0, addr);
            next = now + 1.0;
        }
    }
    dc_perf_progress_end();
    return st;
}

static uint32_t dc_pl_depth(const dc_pl_opts_t *o, uint32_t streams)
{
    if (o->depth)
        return DC_MIN(o->depth, (uint32_t)DC_PL_MAX_DEPTH);
    uint64_t d = (32ull << 20) / (o->size ? o->size : 1);
    d = DC_MAX(d, 2ull * streams);
    d = DC_MAX(d, 2ull);
    return (uint32_t)DC_MIN(d, (uint64_t)DC_PL_MAX_DEPTH);
}

/* --- per-interval reports (-i SEC, as iperf3 -i) ------------------------------------ */

typedef struct dc_pl_ivrec {
    double start, end; /* seconds from the phase's start */
    uint64_t bytes, msgs;
} dc_pl_ivrec_t;

/* The intervals of one direction: every byte counted in the phase falls in
 * exactly one interval (the last one ends at the phase's end, so it may be
 * shorter), so their sum is the phase's total. */
typedef struct dc_pl_iv {
    double step;       /* seconds; 0: no intervals */
    double t0;         /* start of the phase (dc_now_s) */
    bool started;
    const char *label; /* "" or "TX " / "RX " (--bidir) */
    FILE *live;        /* print each interval as it closes; NULL: quiet */
    uint64_t bytes, msgs;
    uint32_t cur;      /* index of the open interval */
    dc_pl_ivrec_t *v;
    size_t n, cap;
    bool truncated;    /* out of memory for the list: the rest not kept */
} dc_pl_iv_t;

static void dc_pl_iv_print(FILE *fp, const char *label, const dc_pl_ivrec_t *r)
{
    char b[32];
    double d = r->end - r->start;
    fprintf(fp, "  [%s%6.2f-%6.2f s]  %10s  %8.3f Gb/s  %9.0f msg/s\n", label, r->start, r->end,
            dc_fmt_bytes(r->bytes, b, sizeof(b)), d > 0 ? r->bytes * 8.0 / d / 1e9 : 0.0,
            d > 0 ? r->msgs / d : 0.0);
    fflush(fp);
}

static void dc_pl_iv_close(dc_pl_iv_t *iv, double end)
{
    dc_pl_ivrec_t r = {iv->cur * iv->step, end, iv->bytes, iv->msgs};
    if (iv->n == iv->cap && !iv->truncated) {
        size_t cap = iv->cap ? 2 * iv->cap : 64;
        dc_pl_ivrec_t *v = realloc(iv->v, cap * sizeof(*v));
        if (v) {
            iv->v = v;
            iv->cap = cap;
        } else {
            iv->truncated = true;
        }
    }
    if (iv->n < iv->cap)
        iv->v[iv->n++] = r;
    if (iv->live)
        dc_pl_iv_print(iv->live, iv->label, &r);
    iv->bytes = iv->msgs = 0;
    iv->cur++;
}

static void dc_pl_iv_start(dc_pl_iv_t *iv, double t0)
{
    iv->t0 = t0;
    iv->started = true;
}

/* Close every interval that ended by `now`. */
static void dc_pl_iv_tick(dc_pl_iv_t *iv, double now)
{
    if (iv->step <= 0 || !iv->started)
        return;
    while (now - iv->t0 >= (iv->cur + 1) * iv->step)
        dc_pl_iv_close(iv, (iv->cur + 1) * iv->step);
}

static void dc_pl_iv_add(dc_pl_iv_t *iv, double now, uint64_t bytes)
{
    if (iv->step <= 0)
        return;
    dc_pl_iv_tick(iv, now);
    iv->bytes += bytes;
    iv->msgs++;
}

/* The phase ended at `tend` (its last counted byte): close the last one. */
static void dc_pl_iv_end(dc_pl_iv_t *iv, double tend)
{
    if (iv->step <= 0 || !iv->started)
        return;
    double end = tend - iv->t0;
    dc_pl_iv_tick(iv, tend);
    if (iv->bytes || end > iv->cur * iv->step)
        dc_pl_iv_close(iv, end > iv->cur * iv->step ? end : iv->cur * iv->step);
    /* a tick while waiting may have closed an interval past the last byte
     * (which came earlier): the list ends at the last byte, as the total */
    while (iv->n > 1 && iv->v[iv->n - 1].start >= end && !iv->v[iv->n - 1].bytes)
        iv->n--;
    if (iv->n && iv->v[iv->n - 1].end > end)
        iv->v[iv->n - 1].end = DC_MAX(end, iv->v[iv->n - 1].start);
}

/* The JSON object's first keys, the same for every direction: the path
 * (transport, device, why it was chosen, the transport's note) and the
 * run's shape. */
static json_t *dc_pl_json_head(const char *tname, const char *device, const char *why,
                               const dc_verbs_stats_t *s, const char *addr, const char *direction,
                               unsigned streams, const dc_pl_opts_t *po, unsigned depth)
{
    json_t *j = json_object();
    json_object_set_new(j, "transport", json_string(tname));
    json_object_set_new(j, "device", json_string(device));
    json_object_set_new(j, "why", json_string(why));
    json_object_set_new(j, "path_note", s->path_note[0] ? json_string(s->path_note) : json_null());
    json_object_set_new(j, "peer", json_string(addr));
    json_object_set_new(j, "direction", json_string(direction));
    json_object_set_new(j, "streams", json_integer(streams));
    json_object_set_new(j, "size", json_integer((json_int_t)po->size));
    json_object_set_new(j, "depth", json_integer(depth));
    json_object_set_new(j, "interval", json_real(po->interval));
    return j;
}

static json_t *dc_pl_iv_json(const dc_pl_iv_t *iv)
{
    json_t *a = json_array();
    for (size_t i = 0; i < iv->n; i++) {
        const dc_pl_ivrec_t *r = &iv->v[i];
        double d = r->end - r->start;
        json_t *o = json_object();
        json_object_set_new(o, "start", json_real(r->start));
        json_object_set_new(o, "end", json_real(r->end));
        json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
        json_object_set_new(o, "messages", json_integer((json_int_t)r->msgs));
        json_object_set_new(o, "gbps", json_real(d > 0 ? r->bytes * 8.0 / d / 1e9 : 0));
        json_array_append_new(a, o);
    }
    return a;
}

/* --- latency: the client's ping-pong ------------------------------------------------- */

/* `iters` round trips of an 8-byte message, the server echoing each; the
 * round-trip times in microseconds go to lat[0 .. *nlat).  The caller sends
 * the empty message that ends the phase. */
static dc_status_t dc_pl_ping(const dc_verbs_ops_t *t, dc_verbs_conn_t *c, uint32_t iters,
                              double *lat, uint32_t *nlat)
{
    dc_status_t st = DC_OK;
    *nlat = 0;
    for (uint32_t i = 0; i < iters; i++) {
        uint8_t ping[DC_PL_LAT_SIZE], pong[DC_PL_LAT_SIZE];
        dc_store_le64(ping, i);
        size_t plen = 0;
        uint64_t a = dc_now_ns();
        dc_verbs_req_t *rr, *sr;
        int rd = 0, sd = 0;
        if ((st = t->irecv(c, pong, sizeof(pong), NULL, &rr)) != DC_OK ||
            (st = t->isend(c, ping, sizeof(ping), NULL, &sr)) != DC_OK)
            return dc_error_prefix("ping %u", i), st;
        /* the round trip ends when the pong is here; the ping's own
         * completion (the server's ACK) is collected outside the timing */
        uint64_t b = 0;
        while (!rd || !sd) {
            if (!rd && (st = t->test(rr, &rd, &plen)) != DC_OK)
                break;
            if (rd && !b)
                b = dc_now_ns();
            if (!sd && (st = t->test(sr, &sd, NULL)) != DC_OK)
                break;
            /* block in the transport's poll rather than spin: on a shared
             * machine a spinning client steals the server's CPU */
            if (!rd || !sd)
                (void)t->wait(c, 10);
        }
        if (st != DC_OK)
            return dc_error_prefix("ping %u", i), st;
        if (plen != sizeof(pong) || dc_load_le64(pong) != i)
            return dc_error(DC_ERR_FORMAT, "bad pong %u (%zu bytes)", i, plen);
        lat[(*nlat)++] = (b - a) / 1e3;
    }
    return DC_OK;
}

/* --- reverse (-R) and bidirectional (--bidir) ---------------------------------------- *
 *
 * SETUP version 2 (48 bytes) adds to version 1's fields the flags
 * DC_PL_FLAG_REVERSE / DC_PL_FLAG_BIDIR, the duration in ns (offset 24) and
 * the byte count (offset 32; 0: by duration), since the server sends too.
 * A server that only knows version 1 refuses it ("bad SETUP").  Then both
 * directions run in one loop on each side (dc_pl_duplex): the sender keeps
 * `depth` messages in flight, and ends its data with `depth` empty messages,
 * so that the receiver, which keeps `depth` receives posted and cannot know
 * where the data ends, consumes exactly the messages it posted for (after
 * the first empty message it posts only for the rest of the `depth`).  Then
 * the server sends RESULT2 (80 bytes: what it received and sent, its CPU),
 * and the ping-pong runs as in version 1. */

#define DC_PL_SETUP2 48
#define DC_PL_RESULT2 80
#define DC_PL_FLAG_REVERSE 2u
#define DC_PL_FLAG_BIDIR 4u

/* One direction of one side. */
typedef struct dc_pl_dir {
    bool on;
    uint64_t size;
    uint32_t depth;
    bool verify, transport_crc;
    /* sending: until tend (dc_now_s) or `limit` bytes (0: by time) */
    double tend;
    uint64_t limit;
    uint32_t crc0;
    bool more;
    uint64_t data_posted, ends, queued;
    /* receiving: t0 at the first message when `t0_first` */
    bool t0_first, ended;
    uint64_t end_at, mismatches;
    uint8_t *expect;
    /* both: the ring of `depth` requests */
    uint64_t posted, head;
    uint8_t *bufs[DC_PL_MAX_DEPTH];
    uint8_t *slotp[DC_PL_MAX_DEPTH];
    dc_verbs_req_t *reqs[DC_PL_MAX_DEPTH];
    uint64_t bytes, msgs;
    double t0, tlast;
    dc_pl_iv_t iv;
} dc_pl_dir_t;

static void dc_pl_dir_free(dc_pl_dir_t *d)
{
    for (uint32_t i = 0; i < DC_PL_MAX_DEPTH; i++)
        free(d->bufs[i]);
    free(d->expect);
    free(d->iv.v);
    memset(d->bufs, 0, sizeof(d->bufs));
    d->expect = NULL;
    d->iv.v = NULL;
}

/* Buffers: with --verify one per slot (a sender regenerates each message,
 * a receiver checks it), else one shared (fault injection re-checks whole
 * messages on receive: separate ones then too). */
static dc_status_t dc_pl_dir_alloc(dc_pl_dir_t *d, bool sender)
{
    bool shared = !d->verify && (sender || !dc_fault_active());
    for (uint32_t i = 0; i < d->depth; i++) {
        if (shared && i > 0) {
            d->slotp[i] = d->bufs[0];
            continue;
        }
        if (!(d->bufs[i] = malloc(d->size)))
            return dc_error(DC_ERR_NOMEM, "perf link: out of memory for %u x %llu B buffers",
                            d->depth, (unsigned long long)d->size);
        dc_pl_fill(d->bufs[i], d->size, i);
        d->slotp[i] = d->bufs[i];
    }
    if (!sender && d->verify && !(d->expect = malloc(d->size)))
        return dc_error(DC_ERR_NOMEM, "perf link: out of memory");
    if (sender && !d->verify && !d->transport_crc)
        d->crc0 = dc_crc32c(0, d->bufs[0], d->size);
    d->more = true;
    return DC_OK;
}

static bool dc_pl_tx_done(const dc_pl_dir_t *d)
{
    return !d->on || (!d->more && d->ends == d->depth && d->head == d->posted);
}

static bool dc_pl_rx_done(const dc_pl_dir_t *d)
{
    return !d->on || (d->ended && d->head == d->end_at);
}

/* Post what the window allows and collect completed sends. */
static dc_status_t dc_pl_tx_step(const dc_verbs_ops_t *t, dc_verbs_conn_t *c, dc_pl_dir_t *d,
                                 bool *progress)
{
    dc_status_t st;
    double now = dc_now_s();
    if (d->more && (d->limit ? d->queued >= d->limit : now >= d->tend))
        d->more = false;
    while (d->posted - d->head < d->depth && (d->more || d->ends < d->depth)) {
        uint32_t slot = (uint32_t)(d->posted % d->depth);
        if (d->more) {
            size_t len = d->limit ? (size_t)DC_MIN(d->size, d->limit - d->queued) : d->size;
            uint32_t crc = d->crc0;
            if (d->verify) {
                dc_pl_fill(d->slotp[slot], len, d->data_posted);
                crc = d->transport_crc ? 0 : dc_crc32c(0, d->slotp[slot], len);
            } else if (len != d->size && !d->transport_crc) {
                crc = dc_crc32c(0, d->slotp[slot], len);
            }
            st = d->transport_crc ? t->isend(c, d->slotp[slot], len, NULL, &d->reqs[slot])
                                  : dc_verbs_isend_crc(c, d->slotp[slot], len, NULL, crc,
                                                       &d->reqs[slot]);
            if (st == DC_ERR_AGAIN)
                break;
            if (st != DC_OK)
                return dc_error_prefix("send"), st;
            d->data_posted++;
            d->queued += len;
            if (d->limit && d->queued >= d->limit)
                d->more = false;
        } else {
            st = t->isend(c, "", 0, NULL, &d->reqs[slot]);
            if (st == DC_ERR_AGAIN)
                break;
            if (st != DC_OK)
                return dc_error_prefix("send of the end marker"), st;
            d->ends++;
        }
        d->posted++;
        *progress = true;
    }
    while (d->head < d->posted) {
        int done = 0;
        size_t len = 0;
        if ((st = t->test(d->reqs[d->head % d->depth], &done, &len)) != DC_OK)
            return dc_error_prefix("send"), st;
        if (!done)
            break;
        *progress = true;
        if (d->head < d->data_posted) {
            d->tlast = dc_now_s();
            d->bytes += len;
            d->msgs++;
            dc_pl_iv_add(&d->iv, d->tlast, len);
        }
        d->head++;
    }
    return DC_OK;
}

/* Keep the receives posted and count what arrived. */
static dc_status_t dc_pl_rx_step(const dc_verbs_ops_t *t, dc_verbs_conn_t *c, dc_pl_dir_t *d,
                                 bool *progress)
{
    dc_status_t st;
    while (d->posted - d->head < d->depth && (!d->ended || d->posted < d->end_at)) {
        uint32_t slot = (uint32_t)(d->posted % d->depth);
        st = t->irecv(c, d->slotp[slot], d->size, NULL, &d->reqs[slot]);
        if (st == DC_ERR_AGAIN)
            break;
        if (st != DC_OK)
            return dc_error_prefix("receive"), st;
        d->posted++;
    }
    while (d->head < d->posted) {
        uint32_t slot = (uint32_t)(d->head % d->depth);
        int done = 0;
        size_t got = 0;
        if ((st = t->test(d->reqs[slot], &done, &got)) != DC_OK)
            return dc_error_prefix("receive"), st;
        if (!done)
            break;
        *progress = true;
        d->head++;
        if (got == 0) {
            if (!d->ended) {
                d->ended = true;
                d->end_at = d->head - 1 + d->depth;
            }
            continue;
        }
        if (d->ended)
            return dc_error(DC_ERR_FORMAT, "perf link: a %zu-byte message after the end of the "
                                           "data (the peer's depth differs?)",
                            got);
        double now = dc_now_s();
        if (d->t0_first && !d->msgs) {
            d->t0 = now;
            dc_pl_iv_start(&d->iv, now);
        }
        if (d->verify) {
            dc_pl_fill(d->expect, got, d->msgs);
            if (got > d->size || memcmp(d->expect, d->slotp[slot], got) != 0)
                d->mismatches++;
        }
        d->bytes += got;
        d->msgs++;
        d->tlast = now;
        dc_pl_iv_add(&d->iv, now, got);
    }
    return DC_OK;
}

/* Both directions at once (either may be off) until both ended. */
static dc_status_t dc_pl_duplex(const dc_verbs_ops_t *t, dc_verbs_conn_t *c, dc_pl_dir_t *tx,
                                dc_pl_dir_t *rx)
{
    dc_status_t st;
    while (!dc_pl_tx_done(tx) || !dc_pl_rx_done(rx)) {
        bool progress = false;
        if (!dc_pl_tx_done(tx) && (st = dc_pl_tx_step(t, c, tx, &progress)) != DC_OK)
            return st;
        if (!dc_pl_rx_done(rx) && (st = dc_pl_rx_step(t, c, rx, &progress)) != DC_OK)
            return st;
        double now = dc_now_s();
        if (tx->on && tx->more)
            dc_pl_iv_tick(&tx->iv, now);
        if (rx->on && !rx->ended)
            dc_pl_iv_tick(&rx->iv, now);
        if (!progress)
            (void)t->wait(c, 5);
    }
    if (tx->on)
        dc_pl_iv_end(&tx->iv, tx->msgs ? tx->tlast : tx->t0);
    if (rx->on)
        dc_pl_iv_end(&rx->iv, rx->msgs ? rx->tlast : rx->t0);
    return DC_OK;
}

/* Server side of a version-2 SETUP. */
static dc_status_t dc_pl_serve2(const dc_verbs_ops_t *t, dc_verbs_conn_t *c, const uint8_t *setup,
                                FILE *out)
{
    dc_status_t st;
    uint64_t size = dc_load_le64(setup + 8);
    uint32_t flags = dc_load_le32(setup + 16);
    uint32_t depth = dc_load_le32(setup + 20);
    uint64_t dur_ns = dc_load_le64(setup + 24), limit = dc_load_le64(setup + 32);
    if (size == 0 || size > DC_VERBS_DEFAULT_MAX_MSG || depth == 0 || depth > DC_PL_MAX_DEPTH)
        return dc_error(DC_ERR_FORMAT, "perf link: client asks for size %llu depth %u",
                        (unsigned long long)size, depth);
    if (flags & ~(DC_PL_FLAG_VERIFY | DC_PL_FLAG_REVERSE | DC_PL_FLAG_BIDIR) ||
        !(flags & (DC_PL_FLAG_REVERSE | DC_PL_FLAG_BIDIR)) ||
        ((flags & DC_PL_FLAG_REVERSE) && (flags & DC_PL_FLAG_BIDIR)))
        return dc_error(DC_ERR_FORMAT, "perf link: client sends unknown SETUP flags 0x%x", flags);
    if (!limit && (dur_ns == 0 || dur_ns > 1000000ull * 1000000000ull))
        return dc_error(DC_ERR_FORMAT, "perf link: client asks for a duration of %llu ns",
                        (unsigned long long)dur_ns);
    bool verify = flags & DC_PL_FLAG_VERIFY, bidir = flags & DC_PL_FLAG_BIDIR;
    dc_pl_dir_t tx = {.on = true, .size = size, .depth = depth, .verify = verify, .limit = limit};
    dc_pl_dir_t rx = {.on = bidir, .size = size, .depth = depth, .verify = verify,
                      .t0_first = true};
    if ((st = dc_pl_dir_alloc(&tx, true)) != DC_OK ||
        (bidir && (st = dc_pl_dir_alloc(&rx, false)) != DC_OK))
        goto out;
    double cpu0 = dc_pl_cpu_s();
    tx.t0 = tx.tlast = dc_now_s();
    tx.tend = tx.t0 + dur_ns / 1e9;
    dc_pl_iv_start(&tx.iv, tx.t0);
    if ((st = dc_pl_duplex(t, c, &tx, &rx)) != DC_OK)
        goto out;
    double cpu_s = dc_pl_cpu_s() - cpu0;
    uint8_t res[DC_PL_RESULT2] = {0};
    dc_store_le32(res, DC_PL_MAGIC);
    dc_store_le32(res + 4, 2);
    dc_store_le64(res + 8, rx.bytes);
    dc_store_le64(res + 16, rx.msgs);
    dc_store_le64(res + 24, rx.mismatches);
    dc_store_le64(res + 32, (uint64_t)((rx.tlast - rx.t0) * 1e9));
    dc_store_le64(res + 40, (uint64_t)(cpu_s * 1e9));
    dc_store_le64(res + 48, tx.bytes);
    dc_store_le64(res + 56, tx.msgs);
    dc_store_le64(res + 64, (uint64_t)((tx.tlast - tx.t0) * 1e9));
    if ((st = dc_verbs_send_blocking(c, res, sizeof(res), 60000)) != DC_OK)
        goto out;
    /* ping-pong: echo each 8-byte message until an empty one */
    for (;;) {
        uint8_t ping[DC_PL_LAT_SIZE];
        size_t len = 0;
        if ((st = dc_verbs_recv_blocking(c, ping, sizeof(ping), &len, 60000)) != DC_OK)
            goto out;
        if (len == 0)
            break;
        if ((st = dc_verbs_send_blocking(c, ping, len, 60000)) != DC_OK)
            goto out;
    }
    dc_verbs_stats_t s = {.size = sizeof(s)};
    t->stats(c, &s);
    double ts = tx.tlast - tx.t0, rs = rx.tlast - rx.t0;
    fprintf(out, "perf link server: %s via %s (%s): %s: sent %llu bytes in %llu messages, "
                 "%.3f s, %.2f Gb/s",
            s.peer, t->name, s.device, bidir ? "bidir" : "reverse",
            (unsigned long long)tx.bytes, (unsigned long long)tx.msgs, ts,
            ts > 0 ? tx.bytes * 8.0 / ts / 1e9 : 0.0);
    if (bidir)
        fprintf(out, "; received %llu bytes in %llu messages, %.3f s, %.2f Gb/s%s",
                (unsigned long long)rx.bytes, (unsigned long long)rx.msgs, rs,
                rs > 0 ? rx.bytes * 8.0 / rs / 1e9 : 0.0,
                verify ? (rx.mismatches ? ", DATA MISMATCH" : ", verified") : "");
    fprintf(out, "%s\n", s.reconnects ? ", reconnected" : "");
    fflush(out);
    st = DC_OK;
out:
    dc_pl_dir_free(&tx);
    dc_pl_dir_free(&rx);
    return st;
}

/* One direction's figures as JSON. */
static json_t *dc_pl_dir_json(const dc_pl_dir_t *d, bool verify, uint64_t mismatches)
{
    double secs = d->tlast - d->t0;
    json_t *j = json_object();
    json_object_set_new(j, "bytes", json_integer((json_int_t)d->bytes));
    json_object_set_new(j, "messages", json_integer((json_int_t)d->msgs));
    json_object_set_new(j, "seconds", json_real(secs));
    json_object_set_new(j, "gbps", json_real(secs > 0 ? d->bytes * 8.0 / secs / 1e9 : 0));
    json_object_set_new(j, "msg_rate", json_real(secs > 0 ? d->msgs / secs : 0));
    json_object_set_new(j, "verified", verify ? json_boolean(mismatches == 0) : json_null());
    json_object_set_new(j, "intervals", dc_pl_iv_json(&d->iv));
    return j;
}

static void dc_pl_dir_print(const char *what, const dc_pl_dir_t *d, uint32_t depth,
                            uint64_t size)
{
    char b[32];
    double secs = d->tlast - d->t0;
    printf("  %-9s %8.3f Gb/s  (%s in %.3f s, %llu x %llu B messages, depth %u), %.0f msg/s\n",
           what, secs > 0 ? d->bytes * 8.0 / secs / 1e9 : 0.0,
           dc_fmt_bytes(d->bytes, b, sizeof(b)), secs, (unsigned long long)d->msgs,
           (unsigned long long)size, depth, secs > 0 ? d->msgs / secs : 0.0);
}

/* Client side of -R / --bidir on a connected `c`; the caller closes it. */
static int dc_pl_client_duplex(const dc_verbs_ops_t *t, dc_verbs_conn_t *c,
                               const dc_pl_opts_t *po, uint32_t streams, uint32_t depth,
                               const char *why, const char *addr, json_t **jout)
{
    dc_status_t st;
    int rc = DC_EXIT_FAIL;
    double *lat = NULL;
    bool bidir = po->bidir;
    FILE *live = po->json ? NULL : stdout;
    dc_pl_dir_t tx = {.on = bidir, .size = po->size, .depth = depth, .verify = po->verify,
                      .transport_crc = po->transport_crc, .limit = po->bytes,
                      .iv = {.step = po->interval, .live = live, .label = bidir ? "TX " : ""}};
    dc_pl_dir_t rx = {.on = true, .size = po->size, .depth = depth, .verify = po->verify,
                      .iv = {.step = po->interval, .live = live, .label = bidir ? "RX " : ""}};
    if ((bidir && (st = dc_pl_dir_alloc(&tx, true)) != DC_OK) ||
        (st = dc_pl_dir_alloc(&rx, false)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "buffers");
        goto out;
    }
    uint8_t setup[DC_PL_SETUP2] = {0};
    dc_store_le32(setup, DC_PL_MAGIC);
    dc_store_le32(setup + 4, 2);
    dc_store_le64(setup + 8, po->size);
    dc_store_le32(setup + 16, (po->verify ? DC_PL_FLAG_VERIFY : 0) |
                                  (bidir ? DC_PL_FLAG_BIDIR : DC_PL_FLAG_REVERSE));
    dc_store_le32(setup + 20, depth);
    dc_store_le64(setup + 24, (uint64_t)(po->duration * 1e9));
    dc_store_le64(setup + 32, po->bytes);
    if (!po->json) {
        printf("perf link: transport %s, %s, %u stream(s), crc32c %s\n", t->name,
               bidir ? "both directions at once (TX: client to server, RX: server to client)"
                     : "reverse (the server sends)",
               streams, dc_crc32c_impl());
        fflush(stdout);
    }
    double cpu0 = dc_pl_cpu_s();
    /* the client's clock runs from the SETUP for both directions (as the
     * forward client's from its first send) */
    double t0 = dc_now_s();
    tx.t0 = rx.t0 = tx.tlast = rx.tlast = t0;
    tx.tend = t0 + po->duration;
    dc_pl_iv_start(&tx.iv, t0);
    dc_pl_iv_start(&rx.iv, t0);
    if ((st = dc_verbs_send_blocking(c, setup, sizeof(setup), 60000)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "setup");
        goto out;
    }
    if ((st = dc_pl_duplex(t, c, &tx, &rx)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "%s with %s", bidir ? "bidir" : "reverse", addr);
        goto out;
    }
    double cpu_s = dc_pl_cpu_s() - cpu0;
    uint8_t res[DC_PL_RESULT2];
    size_t rlen = 0;
    if ((st = dc_verbs_recv_blocking(c, res, sizeof(res), &rlen, 60000)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "result");
        goto out;
    }
    if (rlen != DC_PL_RESULT2 || dc_load_le32(res) != DC_PL_MAGIC || dc_load_le32(res + 4) != 2) {
        rc = dc_cli_fail("perf link", DC_ERR_FORMAT, "bad RESULT message from the server");
        goto out;
    }
    uint64_t srv_rx = dc_load_le64(res + 8), srv_mism = dc_load_le64(res + 24);
    double srv_cpu_s = dc_load_le64(res + 40) / 1e9;
    uint64_t srv_tx = dc_load_le64(res + 48);
    uint32_t iters = po->lat_iters, nlat = 0;
    if (!(lat = calloc(iters ? iters : 1, sizeof(double)))) {
        rc = dc_cli_fail("perf link", DC_ERR_NOMEM, "latency samples");
        goto out;
    }
    if ((st = dc_pl_ping(t, c, iters, lat, &nlat)) != DC_OK ||
        (st = dc_verbs_send_blocking(c, "", 0, 60000)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "latency phase");
        goto out;
    }
    dc_verbs_stats_t s = {.size = sizeof(s)};
    t->stats(c, &s);
    const char *device = s.device[0] ? s.device : "?";
    double p50 = dc_perf_percentile_of(lat, nlat, 50), p99 = dc_perf_percentile_of(lat, nlat, 99);
    uint64_t all_bytes = tx.bytes + rx.bytes;
    double rsecs = rx.tlast - rx.t0, tsecs = tx.tlast - tx.t0;
    double gbps = (rsecs > 0 ? rx.bytes * 8.0 / rsecs / 1e9 : 0) +
                  (tsecs > 0 ? tx.bytes * 8.0 / tsecs / 1e9 : 0);
    if (po->json) {
        json_t *j = dc_pl_json_head(t->name, device, why, &s, addr, bidir ? "bidir" : "reverse",
                                    streams, po, depth);
        /* bytes / gbps: what the client received (-R), or both directions
         * summed (--bidir, each under its own key) */
        json_object_set_new(j, "bytes", json_integer((json_int_t)all_bytes));
        json_object_set_new(j, "messages", json_integer((json_int_t)(tx.msgs + rx.msgs)));
        json_object_set_new(j, "seconds", json_real(DC_MAX(rsecs, tsecs)));
        json_object_set_new(j, "gbps", json_real(gbps));
        json_object_set_new(j, "msg_rate",
                            json_real((rsecs > 0 ? rx.msgs / rsecs : 0) +
                                      (tsecs > 0 ? tx.msgs / tsecs : 0)));
        json_object_set_new(j, "received_bytes", json_integer((json_int_t)rx.bytes));
        json_object_set_new(j, "sent_bytes", json_integer((json_int_t)tx.bytes));
        json_object_set_new(j, "server_sent_bytes", json_integer((json_int_t)srv_tx));
        json_object_set_new(j, "server_bytes", json_integer((json_int_t)srv_rx));
        if (bidir) {
            json_object_set_new(j, "client_to_server", dc_pl_dir_json(&tx, po->verify, srv_mism));
            json_object_set_new(j, "server_to_client",
                                dc_pl_dir_json(&rx, po->verify, rx.mismatches));
        } else {
            json_object_set_new(j, "intervals", dc_pl_iv_json(&rx.iv));
        }
        json_t *lj = json_object();
        json_object_set_new(lj, "p50", nlat ? json_real(p50) : json_null());
        json_object_set_new(lj, "p99", nlat ? json_real(p99) : json_null());
        json_object_set_new(lj, "n", json_integer(nlat));
        json_object_set_new(j, "latency_us", lj);
        json_object_set_new(j, "verified", po->verify ? json_boolean(rx.mismatches + srv_mism == 0)
                                                      : json_null());
        json_object_set_new(j, "resends", json_integer((json_int_t)s.resends));
        json_object_set_new(j, "reconnects", json_integer((json_int_t)s.reconnects));
        json_object_set_new(j, "caller_crc", json_boolean(!po->transport_crc));
        json_object_set_new(j, "crc32c", json_string(dc_crc32c_impl()));
        json_object_set_new(j, "encryption", json_string(s.encryption[0] ? s.encryption : "none"));
        json_object_set_new(j, "ktls", json_integer(s.ktls));
        json_object_set_new(j, "cpu_seconds", json_real(cpu_s));
        json_object_set_new(j, "cpu_s_per_gb",
                            json_real(all_bytes ? cpu_s / (all_bytes / 1e9) : 0));
        json_object_set_new(j, "server_cpu_s_per_gb",
                            json_real(srv_rx + srv_tx ? srv_cpu_s / ((srv_rx + srv_tx) / 1e9)
                                                      : 0));
        if (jout) {
            *jout = j;
        } else {
            dc_perf_json_print(j);
            json_decref(j);
        }
    } else {
        printf("  chosen: %s, device %s\n", why, device);
        if (s.path_note[0])
            printf("  WARNING: %s\n", s.path_note);
        if (bidir)
            dc_pl_dir_print("TX c->s", &tx, depth, po->size);
        dc_pl_dir_print(bidir ? "RX s->c" : "goodput", &rx, depth, po->size);
        printf("  encryption %s%s\n", s.encryption[0] ? s.encryption : "none",
               s.ktls ? " (kernel TLS)" : "");
        printf("  cpu       client %.3f s/GB, server %.3f s/GB\n",
               all_bytes ? cpu_s / (all_bytes / 1e9) : 0,
               srv_rx + srv_tx ? srv_cpu_s / ((srv_rx + srv_tx) / 1e9) : 0);
        if (nlat)
            printf("  latency   p50 %.1f us  p99 %.1f us  (round trip, %u x %u B ping-pong)\n",
                   p50, p99, nlat, DC_PL_LAT_SIZE);
        else
            printf("  latency   not measured (--lat-iters 0)\n");
        printf("  recovery  %llu re-sent message(s), %llu reconnect(s)\n",
               (unsigned long long)s.resends, (unsigned long long)s.reconnects);
        if (po->verify)
            printf("  verify    %s\n", rx.mismatches + srv_mism ? "MISMATCH" : "byte-exact");
    }
    if (srv_tx != rx.bytes || srv_rx != tx.bytes) {
        rc = dc_cli_fail("perf link", DC_ERR_VERIFY,
                         "server sent %llu bytes, client received %llu; client sent %llu, "
                         "server received %llu",
                         (unsigned long long)srv_tx, (unsigned long long)rx.bytes,
                         (unsigned long long)tx.bytes, (unsigned long long)srv_rx);
        goto out;
    }
    if (po->verify && rx.mismatches + srv_mism) {
        rc = dc_cli_fail("perf link", DC_ERR_VERIFY,
                         "%llu message(s) arrived damaged at the client, %llu at the server",
                         (unsigned long long)rx.mismatches, (unsigned long long)srv_mism);
        goto out;
    }
    rc = DC_EXIT_OK;
out:
    dc_pl_dir_free(&tx);
    dc_pl_dir_free(&rx);
    free(lat);
    return rc;
}

/* --- server ----------------------------------------------------------------------------- */

static volatile sig_atomic_t dc_pl_stop;
static void dc_pl_on_signal(int sig)
{
    (void)sig;
    dc_pl_stop = 1;
}

/* Serve one connected client.  Any error ends this client only. */
static dc_status_t dc_pl_serve(const dc_verbs_ops_t *t, dc_verbs_conn_t *c, FILE *out)
{
    dc_status_t st;
    uint8_t setup[DC_PL_SETUP2];
    size_t len = 0;
    uint8_t *bufs[DC_PL_MAX_DEPTH] = {0};
    uint8_t *expect = NULL;
    dc_verbs_req_t *reqs[DC_PL_MAX_DEPTH];
    if ((st = dc_verbs_recv_blocking(c, setup, sizeof(setup), &len, 60000)) != DC_OK)
        return st;
    if (len == DC_PL_SETUP2 && dc_load_le32(setup) == DC_PL_MAGIC && dc_load_le32(setup + 4) == 2)
        return dc_pl_serve2(t, c, setup, out); /* -R / --bidir */
    if (len != DC_PL_SETUP || dc_load_le32(setup) != DC_PL_MAGIC || dc_load_le32(setup + 4) != 1)
        return dc_error(DC_ERR_FORMAT, "perf link: bad SETUP message from the client");
    uint64_t size = dc_load_le64(setup + 8);
    uint32_t flags = dc_load_le32(setup + 16);
    uint32_t depth = dc_load_le32(setup + 20);
    if (size == 0 || size > DC_VERBS_DEFAULT_MAX_MSG || depth == 0 || depth > DC_PL_MAX_DEPTH)
        return dc_error(DC_ERR_FORMAT, "perf link: client asks for size %llu depth %u",
                        (unsigned long long)size, depth);
    bool verify = flags & DC_PL_FLAG_VERIFY;
    /* Without --verify every receive lands in one buffer (the bytes are
     * still CRC-checked by the transport), as iperf3 reads into one buffer;
     * fault injection needs separate buffers (it re-checks whole messages). */
    bool shared = !verify && !dc_fault_active();
    uint8_t *slotp[DC_PL_MAX_DEPTH];
    for (uint32_t i = 0; i < depth; i++) {
        if (shared && i > 0) {
            slotp[i] = bufs[0];
            continue;
        }
        if (!(bufs[i] = malloc(size))) {
            st = dc_error(DC_ERR_NOMEM, "perf link: out of memory");
            goto out;
        }
        slotp[i] = bufs[i];
    }
    if (verify && !(expect = malloc(size))) {
        st = dc_error(DC_ERR_NOMEM, "perf link: out of memory");
        goto out;
    }
    /* One receive ring for both phases: the k-th receive posted gets the k-th
     * message, so receives posted past the end of the bandwidth phase carry
     * the pings that follow.  Phase 0: bandwidth until an empty message;
     * phase 1: echo each ping until an empty message. */
    uint64_t bytes = 0, msgs = 0, mismatches = 0, posted = 0, head = 0;
    uint64_t t0 = 0, t1 = 0;
    double cpu0 = 0, cpu1 = 0;
    int phase = 0;
    while (phase < 2) {
        while (posted - head < depth) {
            uint32_t slot = (uint32_t)(posted % depth);
            st = t->irecv(c, slotp[slot], size, NULL, &reqs[slot]);
            if (st == DC_ERR_AGAIN)
                break;
            if (st != DC_OK)
                goto out;
            posted++;
        }
        uint32_t slot = (uint32_t)(head % depth);
        int done = 0;
        size_t got = 0;
        if ((st = t->test(reqs[slot], &done, &got)) != DC_OK)
            goto out;
        if (!done) {
            (void)t->wait(c, 10);
            continue;
        }
        head++;
        if (phase == 1) {
            if (got == 0) {
                phase = 2;
            } else if ((st = dc_verbs_send_blocking(c, slotp[slot], got, 60000)) != DC_OK) {
                goto out;
            }
            continue;
        }
        if (got == 0) {
            uint8_t res[DC_PL_RESULT] = {0};
            dc_store_le32(res, DC_PL_MAGIC);
            dc_store_le64(res + 8, bytes);
            dc_store_le64(res + 16, msgs);
            dc_store_le64(res + 24, mismatches);
            dc_store_le64(res + 32, t1 - t0);
            dc_store_le64(res + 40, (uint64_t)((cpu1 - cpu0) * 1e9));
            if ((st = dc_verbs_send_blocking(c, res, sizeof(res), 60000)) != DC_OK)
                goto out;
            phase = 1;
            continue;
        }
        if (!t0) {
            t0 = dc_now_ns();
            cpu0 = dc_pl_cpu_s();
        }
        t1 = dc_now_ns();
        cpu1 = dc_pl_cpu_s();
        if (verify) {
            /* the last message of a --bytes run that is no multiple of
             * --size is shorter; the client checks the byte count */
            dc_pl_fill(expect, got, msgs);
            if (got > size || memcmp(expect, slotp[slot], got) != 0)
                mismatches++;
        }
        bytes += got;
        msgs++;
    }
    dc_verbs_stats_t s = {.size = sizeof(s)};
    t->stats(c, &s);
    fprintf(out, "perf link server: %s via %s (%s): %llu bytes in %llu messages, %.3f s, "
                 "%.2f Gb/s%s%s\n",
            s.peer, t->name, s.device, (unsigned long long)bytes, (unsigned long long)msgs,
            (t1 - t0) / 1e9, (t1 > t0) ? bytes * 8.0 / (double)(t1 - t0) : 0.0,
            verify ? (mismatches ? ", DATA MISMATCH" : ", verified") : "",
            s.reconnects ? ", reconnected" : "");
    fflush(out);
    st = DC_OK;
out:
    for (uint32_t i = 0; i < DC_PL_MAX_DEPTH; i++)
        free(bufs[i]);
    free(expect);
    return st;
}

static int dc_pl_server(const char *bind, const char *transport, bool once, const char *addr_file,
                        const dc_pl_opts_t *po)
{
    const dc_verbs_ops_t *t;
    char why[512];
    dc_status_t st = dc_verbs_select(transport, &t, why, sizeof(why));
    if (st != DC_OK)
        return dc_cli_fail("perf link", st, "transport");
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.timeout_ms = po->timeout_ms;
    dc_pl_auth(&o, po);
    dc_verbs_listener_t *l;
    if ((st = t->listen(&o, bind, &l)) != DC_OK)
        return dc_cli_fail("perf link", st, "listen");
    char addr[128];
    t->listen_addr(l, addr, sizeof(addr));
    fprintf(stdout, "perf link server: listening on %s (transport %s: %s)%s\n", addr, t->name,
            why, po->insecure ? " INSECURE: no job secret, loopback only" : "");
    fflush(stdout);
    if (addr_file) {
        FILE *f = fopen(addr_file, "w");
        if (!f || fprintf(f, "%s\n", addr) < 0 || fclose(f) != 0) {
            t->listen_close(l);
            return dc_cli_fail("perf link", DC_ERR_IO, "cannot write %s", addr_file);
        }
    }
    signal(SIGINT, dc_pl_on_signal);
    signal(SIGTERM, dc_pl_on_signal);
    int rc = DC_EXIT_OK;
    while (!dc_pl_stop) {
        dc_verbs_conn_t *c = NULL;
        st = t->accept(l, &c);
        if (st == DC_ERR_AGAIN) {
            usleep(2000);
            continue;
        }
        if (st != DC_OK) {
            rc = dc_cli_fail("perf link", st, "accept");
            break;
        }
        st = dc_pl_serve(t, c, stdout);
        if (st != DC_OK)
            DC_LOG_WARN("perf link server: client dropped: %s", dc_last_error());
        t->close(c);
        if (once) {
            rc = st == DC_OK ? DC_EXIT_OK : DC_EXIT_FAIL;
            break;
        }
    }
    t->listen_close(l);
    return rc;
}

/* --- client ------------------------------------------------------------------------------ */

/* One run of the client; with `jout`, its JSON object goes there instead
 * of stdout.  `tls`: DC_VERBS_TLS_* for the connection. */
static int dc_pl_client_run(const char *addr, const dc_pl_opts_t *po, int tls, json_t **jout)
{
    const dc_verbs_ops_t *t;
    char why[512];
    dc_status_t st = dc_verbs_select(po->transport, &t, why, sizeof(why));
    if (st != DC_OK)
        return dc_cli_fail("perf link", st, "transport");
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.streams = po->streams;
    o.timeout_ms = po->timeout_ms;
    o.tls = tls;
    dc_pl_auth(&o, po);
    if (po->zerocopy)
        o.zerocopy = 1;
    dc_verbs_conn_t *c = NULL;
    uint8_t *bufs[DC_PL_MAX_DEPTH] = {0};
    double *lat = NULL;
    dc_pl_iv_t iv = {.label = ""}; /* the forward run's intervals (-i) */
    int rc = DC_EXIT_FAIL;
    if ((st = t->connect(&o, addr, &c)) != DC_OK) {
        rc = dc_pl_conn_fail(t, addr, &o, st);
        goto out;
    }
    const char *mismatch = NULL;
    if ((st = dc_pl_wait_conn(t, c, addr, &o, &mismatch)) != DC_OK) {
        rc = mismatch ? dc_cli_fail("perf link", st, NULL) : dc_pl_conn_fail(t, addr, &o, st);
        goto out;
    }
    dc_verbs_stats_t s0 = {.size = sizeof(s0)};
    t->stats(c, &s0);
    uint32_t streams = s0.streams ? s0.streams : 1;
    uint32_t depth = dc_pl_depth(po, streams);
    if (po->reverse || po->bidir) {
        rc = dc_pl_client_duplex(t, c, po, streams, depth, why, addr, jout);
        goto out;
    }
    /* With --verify each in-flight slot has its own buffer, regenerated per
     * message; otherwise one buffer is sent over and over (as iperf3 and
     * ib_write_bw do: the link is measured, not the memory system). */
    uint8_t *slotp[DC_PL_MAX_DEPTH];
    for (uint32_t i = 0; i < depth; i++) {
        if (!po->verify && i > 0) {
            slotp[i] = bufs[0];
            continue;
        }
        if (!(bufs[i] = malloc(po->size))) {
            rc = dc_cli_fail("perf link", DC_ERR_NOMEM, "buffers");
            goto out;
        }
        dc_pl_fill(bufs[i], po->size, i);
        slotp[i] = bufs[i];
    }
    /* the re-sent buffer's CRC32C, once (--verify: after each fill) */
    uint32_t crc0 = po->verify || po->transport_crc ? 0 : dc_crc32c(0, bufs[0], po->size);
    uint8_t setup[DC_PL_SETUP] = {0};
    dc_store_le32(setup, DC_PL_MAGIC);
    dc_store_le32(setup + 4, 1);
    dc_store_le64(setup + 8, po->size);
    dc_store_le32(setup + 16, po->verify ? DC_PL_FLAG_VERIFY : 0);
    dc_store_le32(setup + 20, depth);
    if ((st = dc_verbs_send_blocking(c, setup, sizeof(setup), 60000)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "setup");
        goto out;
    }
    dc_verbs_req_t *reqs[DC_PL_MAX_DEPTH];
    /* warmup: po->warmup messages, depth in flight, drained before timing */
    uint64_t warm_bytes = 0;
    for (uint64_t wsent = 0, wacked = 0; wacked < po->warmup;) {
        while (wsent < po->warmup && wsent - wacked < depth) {
            uint32_t slot = (uint32_t)(wsent % depth);
            uint32_t crc = crc0;
            if (po->verify) {
                dc_pl_fill(slotp[slot], po->size, wsent);
                if (!po->transport_crc)
                    crc = dc_crc32c(0, slotp[slot], po->size);
            }
            st = dc_pl_isend(t, c, po, slotp[slot], po->size, crc, &reqs[slot]);
            if (st == DC_ERR_AGAIN)
                break;
            if (st != DC_OK) {
                rc = dc_cli_fail("perf link", st, "warmup send");
                goto out;
            }
            wsent++;
        }
        if (wsent == wacked)
            continue;
        int done = 0;
        size_t len = 0;
        if ((st = t->test(reqs[wacked % depth], &done, &len)) != DC_OK) {
            rc = dc_cli_fail("perf link", st, "warmup send");
            goto out;
        }
        if (!done) {
            (void)t->wait(c, 5);
            continue;
        }
        wacked++;
        warm_bytes += len;
    }
    /* bandwidth phase (message indices continue after the warmup's, so
     * that --verify seeds every message differently) */
    uint64_t sent_msgs = 0, acked = 0, acked_bytes = 0, queued_bytes = 0;
    double cpu0 = dc_pl_cpu_s();
    double t0 = dc_now_s(), tend = t0 + po->duration, tlast = t0, tprog = t0;
    bool more = true;
    iv.step = po->interval;
    iv.live = po->json ? NULL : stdout;
    if (iv.live && iv.step > 0) {
        printf("perf link: transport %s, %llu B messages, a report every %.2f s (-i)\n", t->name,
               (unsigned long long)po->size, iv.step);
        fflush(stdout);
    }
    dc_pl_iv_start(&iv, t0);
    while (more || sent_msgs > acked) {
        double now = dc_now_s();
        if (po->bytes ? queued_bytes >= po->bytes : now >= tend)
            more = false;
        while (more && sent_msgs - acked < depth) {
            uint32_t slot = (uint32_t)(sent_msgs % depth);
            size_t len = po->size;
            if (po->bytes)
                len = (size_t)DC_MIN(po->size, po->bytes - queued_bytes);
            if (len == 0) {
                more = false;
                break;
            }
            uint32_t crc = crc0;
            if (po->verify) {
                dc_pl_fill(slotp[slot], len, po->warmup + sent_msgs);
                if (!po->transport_crc)
                    crc = dc_crc32c(0, slotp[slot], len);
            }
            st = dc_pl_isend(t, c, po, slotp[slot], len, crc, &reqs[slot]);
            if (st == DC_ERR_AGAIN)
                break;
            if (st != DC_OK) {
                rc = dc_cli_fail("perf link", st, "send");
                goto out;
            }
            queued_bytes += len;
            sent_msgs++;
            if (po->bytes && queued_bytes >= po->bytes)
                more = false;
        }
        if (sent_msgs == acked)
            continue;
        uint32_t slot = (uint32_t)(acked % depth);
        int done = 0;
        size_t len = 0;
        if ((st = t->test(reqs[slot], &done, &len)) != DC_OK) {
            rc = dc_cli_fail("perf link", st, "send");
            goto out;
        }
        if (!done) {
            (void)t->wait(c, 5);
        } else {
            acked++;
            acked_bytes += len;
            tlast = dc_now_s();
            dc_pl_iv_add(&iv, tlast, len);
        }
        if (more)
            dc_pl_iv_tick(&iv, now);
        if (!po->json && !iv.step && now - tprog >= 0.5) {
            tprog = now;
            char b[32];
            dc_perf_progress("perf link %s x%u: %s, %.2f Gb/s", t->name, streams,
                             dc_fmt_bytes(acked_bytes, b, sizeof(b)),
                             acked_bytes * 8.0 / 1e9 / (now - t0 > 0 ? now - t0 : 1));
        }
    }
    dc_perf_progress_end();
    dc_pl_iv_end(&iv, tlast);
    double cpu_s = dc_pl_cpu_s() - cpu0;
    double secs = tlast - t0;
    if ((st = dc_verbs_send_blocking(c, "", 0, 60000)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "end of bandwidth phase");
        goto out;
    }
    uint8_t res[DC_PL_RESULT];
    size_t rlen = 0;
    if ((st = dc_verbs_recv_blocking(c, res, sizeof(res), &rlen, 60000)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "result");
        goto out;
    }
    if (rlen != DC_PL_RESULT || dc_load_le32(res) != DC_PL_MAGIC) {
        rc = dc_cli_fail("perf link", DC_ERR_FORMAT, "bad RESULT message from the server");
        goto out;
    }
    uint64_t srv_bytes = dc_load_le64(res + 8), srv_msgs = dc_load_le64(res + 16);
    uint64_t mism = dc_load_le64(res + 24);
    double srv_cpu_s = (double)dc_load_le64(res + 40) / 1e9;
    /* latency phase */
    uint32_t iters = po->lat_iters;
    lat = calloc(iters ? iters : 1, sizeof(double));
    if (!lat) {
        rc = dc_cli_fail("perf link", DC_ERR_NOMEM, "latency samples");
        goto out;
    }
    uint32_t nlat = 0;
    if ((st = dc_pl_ping(t, c, iters, lat, &nlat)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "latency phase");
        goto out;
    }
    if ((st = dc_verbs_send_blocking(c, "", 0, 60000)) != DC_OK) {
        rc = dc_cli_fail("perf link", st, "end of latency phase");
        goto out;
    }
    dc_verbs_stats_t s = {.size = sizeof(s)};
    t->stats(c, &s);
    double gbps = secs > 0 ? acked_bytes * 8.0 / secs / 1e9 : 0;
    double rate = secs > 0 ? acked / secs : 0;
    double p50 = dc_perf_percentile_of(lat, nlat, 50), p99 = dc_perf_percentile_of(lat, nlat, 99);
    const char *device = s.device[0] ? s.device : "?";
    if (po->json) {
        json_t *j =
            dc_pl_json_head(t->name, device, why, &s, addr, "forward", streams, po, depth);
        json_object_set_new(j, "intervals", dc_pl_iv_json(&iv));
        json_object_set_new(j, "warmup", json_integer((json_int_t)po->warmup));
        json_object_set_new(j, "bytes", json_integer((json_int_t)acked_bytes));
        json_object_set_new(j, "messages", json_integer((json_int_t)acked));
        json_object_set_new(j, "seconds", json_real(secs));
        json_object_set_new(j, "gbps", json_real(gbps));
        json_object_set_new(j, "msg_rate", json_real(rate));
        json_t *lj = json_object();
        /* not measured (--lat-iters 0): null, not a latency of 0 */
        json_object_set_new(lj, "p50", nlat ? json_real(p50) : json_null());
        json_object_set_new(lj, "p99", nlat ? json_real(p99) : json_null());
        json_object_set_new(lj, "n", json_integer(nlat));
        json_object_set_new(j, "latency_us", lj);
        json_object_set_new(j, "server_bytes", json_integer((json_int_t)srv_bytes));
        json_object_set_new(j, "verified", po->verify ? json_boolean(mism == 0) : json_null());
        json_object_set_new(j, "resends", json_integer((json_int_t)s.resends));
        json_object_set_new(j, "reconnects", json_integer((json_int_t)s.reconnects));
        json_object_set_new(j, "zerocopy", json_boolean(po->zerocopy));
        json_object_set_new(j, "caller_crc", json_boolean(!po->transport_crc));
        json_object_set_new(j, "crc32c", json_string(dc_crc32c_impl()));
        json_object_set_new(j, "zc_sends", json_integer((json_int_t)s.zc_sends));
        json_object_set_new(j, "zc_copied", json_integer((json_int_t)s.zc_copied));
        json_object_set_new(j, "encryption", json_string(s.encryption[0] ? s.encryption : "none"));
        json_object_set_new(j, "insecure", json_boolean(po->insecure));
        json_object_set_new(j, "ktls", json_integer(s.ktls));
        json_object_set_new(j, "cpu_seconds", json_real(cpu_s));
        json_object_set_new(j, "cpu_s_per_gb",
                            json_real(acked_bytes ? cpu_s / (acked_bytes / 1e9) : 0));
        json_object_set_new(j, "server_cpu_s_per_gb",
                            json_real(srv_bytes ? srv_cpu_s / (srv_bytes / 1e9) : 0));
        if (jout) {
            *jout = j;
        } else {
            dc_perf_json_print(j);
            json_decref(j);
        }
    } else {
        char b[32];
        printf("perf link: transport %s, device %s, %u stream(s), crc32c %s\n", t->name, device,
               streams, dc_crc32c_impl());
        printf("  chosen: %s\n", why);
        if (po->insecure)
            printf("  INSECURE: no job secret (--insecure), loopback only\n");
        if (s.path_note[0])
            printf("  WARNING: %s\n", s.path_note);
        printf("  goodput   %8.3f Gb/s  (%s in %.3f s, %llu x %llu B messages, depth %u)\n", gbps,
               dc_fmt_bytes(acked_bytes, b, sizeof(b)), secs, (unsigned long long)acked,
               (unsigned long long)po->size, depth);
        printf("  msg rate  %8.0f msg/s\n", rate);
        printf("  encryption %s%s\n", s.encryption[0] ? s.encryption : "none",
               s.ktls ? " (kernel TLS)" : "");
        printf("  cpu       client %.3f s/GB, server %.3f s/GB\n",
               acked_bytes ? cpu_s / (acked_bytes / 1e9) : 0,
               srv_bytes ? srv_cpu_s / (srv_bytes / 1e9) : 0);
        if (nlat)
            printf("  latency   p50 %.1f us  p99 %.1f us  (round trip, %u x %u B ping-pong)\n",
                   p50, p99, nlat, DC_PL_LAT_SIZE);
        else
            printf("  latency   not measured (--lat-iters 0)\n");
        printf("  recovery  %llu re-sent message(s), %llu reconnect(s)\n",
               (unsigned long long)s.resends, (unsigned long long)s.reconnects);
        if (po->zerocopy)
            printf("  zerocopy  %llu MSG_ZEROCOPY send(s), %llu of them copied by the kernel%s\n",
                   (unsigned long long)s.zc_sends, (unsigned long long)s.zc_copied,
                   s.zc_sends && s.zc_copied == s.zc_sends ? " (no zero-copy path here)" : "");
        if (po->verify)
            printf("  verify    %s (server checked %llu messages)\n",
                   mism ? "MISMATCH" : "byte-exact", (unsigned long long)srv_msgs);
    }
    if (srv_bytes != warm_bytes + acked_bytes) {
        rc = dc_cli_fail("perf link", DC_ERR_VERIFY, "server counted %llu bytes, client %llu",
                         (unsigned long long)srv_bytes,
                         (unsigned long long)(warm_bytes + acked_bytes));
        goto out;
    }
    if (po->verify && mism) {
        rc = dc_cli_fail("perf link", DC_ERR_VERIFY, "%llu message(s) arrived damaged",
                         (unsigned long long)mism);
        goto out;
    }
    rc = DC_EXIT_OK;
out:
    dc_perf_progress_end();
    if (c)
        t->close(c);
    for (uint32_t i = 0; i < DC_PL_MAX_DEPTH; i++)
        free(bufs[i]);
    free(lat);
    free(iv.v);
    return rc;
}

/* --tls: clear, then TLS, on the same server; side by side. */
static int dc_pl_client(const char *addr, const dc_pl_opts_t *po)
{
    if (!po->tls_compare)
        return dc_pl_client_run(addr, po, DC_VERBS_TLS_CONFIG, NULL);
    json_t *jc = NULL, *jt = NULL;
    if (!po->json)
        printf("--- in clear ---\n");
    int rc = dc_pl_client_run(addr, po, DC_VERBS_TLS_OFF, po->json ? &jc : NULL);
    if (rc != DC_EXIT_OK)
        return rc;
    if (!po->json)
        printf("--- with TLS ---\n");
    dc_pl_opts_t pt = *po;
    if ((rc = dc_pl_client_run(addr, &pt, DC_VERBS_TLS_ON, po->json ? &jt : NULL)) != DC_EXIT_OK) {
        json_decref(jc);
        return rc;
    }
    if (!po->json)
        return DC_EXIT_OK; /* each run printed its own lines */
    double gc = json_real_value(json_object_get(jc, "gbps"));
    double gt = json_real_value(json_object_get(jt, "gbps"));
    json_t *j = json_object();
    json_object_set_new(j, "encryption", json_incref(json_object_get(jt, "encryption")));
    json_object_set_new(j, "goodput_ratio", json_real(gc > 0 ? gt / gc : 0));
    json_object_set_new(j, "clear", jc);
    json_object_set_new(j, "tls", jt);
    dc_perf_json_print(j);
    json_decref(j);
    return DC_EXIT_OK;
}

/* -a / --sweep: one run per message size, 2^k from 64 B up to --size (and
 * --size itself when it is no power of two), as ib_write_bw -a: one line
 * (text) or one object in "sweep" (JSON) per size. */
static int dc_pl_sweep(const char *addr, const dc_pl_opts_t *po)
{
    json_t *arr = json_array(), *first = NULL;
    int rc = DC_EXIT_OK;
    for (uint64_t sz = 64;; sz *= 2) {
        dc_pl_opts_t pc = *po;
        pc.size = DC_MIN(sz, po->size);
        pc.json = true;
        json_t *j = NULL;
        if ((rc = dc_pl_client_run(addr, &pc, DC_VERBS_TLS_CONFIG, &j)) != DC_EXIT_OK)
            break;
        json_t *lat = json_object_get(json_object_get(j, "latency_us"), "p50");
        if (!first) {
            first = j;
            if (!po->json) {
                printf("perf link sweep: transport %s, device %s, %s, %.2f s per size\n",
                       json_string_value(json_object_get(j, "transport")),
                       json_string_value(json_object_get(j, "device")),
                       json_string_value(json_object_get(j, "direction")), po->duration);
                printf("  chosen: %s\n", json_string_value(json_object_get(j, "why")));
                printf("  %10s  %12s  %8s  %10s  %12s  %9s\n", "size (B)", "messages",
                       "seconds", "Gb/s", "msg/s", "p50 us");
            }
        }
        if (!po->json) {
            char p50[32] = "-";
            if (lat && json_is_real(lat))
                snprintf(p50, sizeof(p50), "%.1f", json_real_value(lat));
            printf("  %10llu  %12lld  %8.3f  %10.3f  %12.0f  %9s\n", (unsigned long long)pc.size,
                   (long long)json_integer_value(json_object_get(j, "messages")),
                   json_real_value(json_object_get(j, "seconds")),
                   json_real_value(json_object_get(j, "gbps")),
                   json_real_value(json_object_get(j, "msg_rate")), p50);
            fflush(stdout);
        }
        json_array_append_new(arr, j);
        if (pc.size >= po->size)
            break;
    }
    if (rc == DC_EXIT_OK && po->json) {
        json_t *o = json_object();
        json_object_set(o, "transport", json_object_get(first, "transport"));
        json_object_set(o, "device", json_object_get(first, "device"));
        json_object_set(o, "why", json_object_get(first, "why"));
        json_object_set(o, "direction", json_object_get(first, "direction"));
        json_object_set_new(o, "seconds_per_size", json_real(po->duration));
        json_object_set(o, "sweep", arr);
        dc_perf_json_print(o);
        json_decref(o);
    }
    json_decref(arr);
    return rc;
}

int dc_cmd_perf_link(int argc, char **argv)
{
    if (dc_cli_wants_help(argc, argv)) {
        dc_perf_link_help(stdout);
        return DC_EXIT_OK;
    }
    enum { O_SERVER = 256, O_BIND, O_ONCE, O_ADDRFILE, O_CLIENT, O_TRANSPORT, O_STREAMS,
           O_SIZE, O_DURATION, O_BYTES, O_DEPTH, O_LAT, O_VERIFY, O_TIMEOUT, O_JSON, O_ZC,
           O_WARMUP, O_TCRC, O_TLS, O_INSECURE, O_BIDIR };
    static const struct option opts[] = {
        {"server", no_argument, NULL, O_SERVER},
        {"bind", required_argument, NULL, O_BIND},
        {"once", no_argument, NULL, O_ONCE},
        {"addr-file", required_argument, NULL, O_ADDRFILE},
        {"client", required_argument, NULL, O_CLIENT},
        {"transport", required_argument, NULL, O_TRANSPORT},
        {"streams", required_argument, NULL, O_STREAMS},
        {"size", required_argument, NULL, O_SIZE},
        {"duration", required_argument, NULL, O_DURATION},
        {"bytes", required_argument, NULL, O_BYTES},
        {"depth", required_argument, NULL, O_DEPTH},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"lat-iters", required_argument, NULL, O_LAT},
        {"verify", no_argument, NULL, O_VERIFY},
        {"zerocopy", no_argument, NULL, O_ZC},
        {"tls", no_argument, NULL, O_TLS},
        {"transport-crc", no_argument, NULL, O_TCRC},
        {"timeout-ms", required_argument, NULL, O_TIMEOUT},
        {"json", no_argument, NULL, O_JSON},
        {"insecure", no_argument, NULL, O_INSECURE},
        {"interval", required_argument, NULL, 'i'},
        {"reverse", no_argument, NULL, 'R'},
        {"bidir", no_argument, NULL, O_BIDIR},
        {"sweep", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "perf link";
    bool server = false, once = false, sweep = false, interval_set = false, duration_set = false;
    const char *bind = "0.0.0.0:7471", *client = NULL, *addr_file = NULL;
    dc_pl_opts_t po = {.size = 4u << 20, .duration = 5, .lat_iters = 2000};
    uint64_t v;
    int c;
    optind = 1;
    while ((c = dc_cli_getopt(cmd, argc, argv, "hi:Ra", opts)) != -1) {
        switch (c) {
        case O_SERVER: server = true; break;
        case O_BIND: bind = optarg; break;
        case O_ONCE: once = true; break;
        case O_ADDRFILE: addr_file = optarg; break;
        case O_CLIENT: client = optarg; break;
        case O_TRANSPORT: po.transport = optarg; break;
        case O_STREAMS:
            if (!dc_cli_parse_u64(cmd, "--streams", optarg, &v))
                return DC_EXIT_USAGE;
            if (v < 1 || v > 64)
                return dc_cli_usage_error(cmd, "--streams must be 1..64");
            po.streams = (uint32_t)v;
            break;
        case O_SIZE:
            if (!dc_cli_parse_size(cmd, "--size", optarg, &po.size))
                return DC_EXIT_USAGE;
            if (po.size < 1 || po.size > DC_VERBS_DEFAULT_MAX_MSG)
                return dc_cli_usage_error(cmd, "--size must be 1 .. 64MiB");
            break;
        case O_DURATION:
            if (!dc_cli_parse_double(cmd, "--duration", optarg, &po.duration))
                return DC_EXIT_USAGE;
            if (!(po.duration > 0 && po.duration < 1e6))
                return dc_cli_usage_error(cmd, "--duration must be positive");
            duration_set = true;
            break;
        case 'i':
            if (!dc_cli_parse_double(cmd, "--interval", optarg, &po.interval))
                return DC_EXIT_USAGE;
            if (!(po.interval == 0 || (po.interval >= 0.05 && po.interval <= 3600)))
                return dc_cli_usage_error(cmd, "--interval must be 0 (off) or 0.05 .. 3600 s");
            interval_set = true;
            break;
        case 'R': po.reverse = true; break;
        case O_BIDIR: po.bidir = true; break;
        case 'a': sweep = true; break;
        case O_BYTES:
            if (!dc_cli_parse_size(cmd, "--bytes", optarg, &po.bytes))
                return DC_EXIT_USAGE;
            break;
        case O_DEPTH:
            if (!dc_cli_parse_u64(cmd, "--depth", optarg, &v))
                return DC_EXIT_USAGE;
            if (v < 1 || v > DC_PL_MAX_DEPTH)
                return dc_cli_usage_error(cmd, "--depth must be 1..%d", DC_PL_MAX_DEPTH);
            po.depth = (uint32_t)v;
            break;
        case O_WARMUP:
            if (!dc_cli_parse_u64(cmd, "--warmup", optarg, &v))
                return DC_EXIT_USAGE;
            if (v > 100000000)
                return dc_cli_usage_error(cmd, "--warmup too large");
            po.warmup = v;
            break;
        case O_LAT:
            if (!dc_cli_parse_u64(cmd, "--lat-iters", optarg, &v))
                return DC_EXIT_USAGE;
            if (v > 10000000)
                return dc_cli_usage_error(cmd, "--lat-iters too large");
            po.lat_iters = (uint32_t)v;
            break;
        case O_VERIFY: po.verify = true; break;
        case O_ZC: po.zerocopy = true; break;
        case O_TLS: po.tls_compare = true; break;
        case O_TCRC: po.transport_crc = true; break;
        case O_TIMEOUT:
            if (!dc_cli_parse_u64(cmd, "--timeout-ms", optarg, &v))
                return DC_EXIT_USAGE;
            if (v < 1 || v > 86400000)
                return dc_cli_usage_error(cmd, "--timeout-ms must be 1..86400000");
            po.timeout_ms = (uint32_t)v;
            break;
        case O_JSON: po.json = true; break;
        case O_INSECURE: po.insecure = true; break;
        default: return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (server == (client != NULL))
        return dc_cli_usage_error(cmd, "give exactly one of --server or --client ADDR:PORT");
    if (po.insecure && !dc_pl_loopback(server ? bind : client))
        return dc_cli_usage_error(cmd, "--insecure runs without the job secret, so only on "
                                       "loopback: %s is not a loopback address (%s 127.0.0.1:PORT)",
                                  server ? bind : client, server ? "--bind" : "--client");
    if (server)
        return dc_pl_server(bind, po.transport, once, addr_file, &po);
    if (po.reverse && po.bidir)
        return dc_cli_usage_error(cmd, "give -R (the server sends) or --bidir, not both");
    if ((po.reverse || po.bidir || sweep) && po.tls_compare)
        return dc_cli_usage_error(cmd, "--tls compares the forward direction only (not with "
                                       "-R, --bidir or --sweep)");
    if ((po.reverse || po.bidir) && po.warmup)
        return dc_cli_usage_error(cmd, "--warmup applies to the forward direction only");
    if (sweep && po.bidir)
        return dc_cli_usage_error(cmd, "--sweep runs one direction (forward, or -R)");
    /* as iperf3: a report per second unless -i 0; a sweep reports per size
     * (1 s each) unless asked */
    if (!interval_set)
        po.interval = sweep ? 0 : 1;
    if (sweep && !duration_set)
        po.duration = 1;
    if (po.tls_compare && !po.transport)
        po.transport = "tcp";
    if (po.tls_compare && strcmp(po.transport, "tcp") != 0)
        return dc_cli_usage_error(cmd, "--tls measures TLS on the tcp transport (not %s)",
                                  po.transport);
    if (po.json)
        dc_perf_json_reserve_stdout();
    if (sweep)
        return dc_pl_sweep(client, &po);
    return dc_pl_client(client, &po);
}
