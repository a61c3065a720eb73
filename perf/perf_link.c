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

#include <errno.h>
#include <getopt.h>
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
            "                           [--tls] [--json]\n"
            "\n"
            "Measure a link through a deltacast transport: goodput (Gb/s, 1e9 bit/s, payload\n"
            "bytes acknowledged by the receiver), message rate, and round-trip latency\n"
            "percentiles of an 8-byte ping-pong.  Reports which transport and device were\n"
            "used and why.  Both sides need the job secret (DELTACAST_SECRET_FILE or\n"
            "DELTACAST_SECRET).  The server keeps serving clients one after another.\n"
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
            "  --tls                    tcp: measure the link twice, in clear and with TLS 1.3\n"
            "                           (config tls_cipher; PSK from the job secret or the\n"
            "                           tls_* certificates), side by side: goodput ratio and\n"
            "                           CPU seconds per GB of client and server.  Without it\n"
            "                           the link is encrypted as config tls says (tls=on:\n"
            "                           encrypted; auto: clear, perf link is no region edge)\n"
            "  --timeout-ms MS          connect/reconnect timeout (default config)\n"
            "  --json                   one JSON object (keys: transport, device, why,\n"
            "                           path_note (why a faster path of this node, e.g.\n"
            "                           RDMA under UCX, went unused; null: none), streams,\n"
            "                           size, bytes, seconds, gbps, msg_rate,\n"
            "                           latency_us {p50, p99}, resends, reconnects,\n"
            "                           encryption (cipher suite or \"none\"), ktls,\n"
            "                           cpu_s_per_gb, server_cpu_s_per_gb); with --tls:\n"
            "                           {clear, tls, goodput_ratio, encryption}\n"
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
    uint32_t timeout_ms;
} dc_pl_opts_t;

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
    uint8_t setup[DC_PL_SETUP];
    size_t len = 0;
    uint8_t *bufs[DC_PL_MAX_DEPTH] = {0};
    uint8_t *expect = NULL;
    dc_verbs_req_t *reqs[DC_PL_MAX_DEPTH];
    if ((st = dc_verbs_recv_blocking(c, setup, sizeof(setup), &len, 60000)) != DC_OK)
        return st;
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
    dc_verbs_listener_t *l;
    if ((st = t->listen(&o, bind, &l)) != DC_OK)
        return dc_cli_fail("perf link", st, "listen");
    char addr[128];
    t->listen_addr(l, addr, sizeof(addr));
    fprintf(stdout, "perf link server: listening on %s (transport %s: %s)\n", addr, t->name,
            why);
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
    if (po->zerocopy)
        o.zerocopy = 1;
    dc_verbs_conn_t *c = NULL;
    uint8_t *bufs[DC_PL_MAX_DEPTH] = {0};
    double *lat = NULL;
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
        }
        if (!po->json && now - tprog >= 0.5) {
            tprog = now;
            char b[32];
            dc_perf_progress("perf link %s x%u: %s, %.2f Gb/s", t->name, streams,
                             dc_fmt_bytes(acked_bytes, b, sizeof(b)),
                             acked_bytes * 8.0 / 1e9 / (now - t0 > 0 ? now - t0 : 1));
        }
    }
    dc_perf_progress_end();
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
    for (uint32_t i = 0; i < iters; i++) {
        uint8_t ping[DC_PL_LAT_SIZE], pong[DC_PL_LAT_SIZE];
        dc_store_le64(ping, i);
        size_t plen = 0;
        uint64_t a = dc_now_ns();
        dc_verbs_req_t *rr, *sr;
        int rd = 0, sd = 0;
        if ((st = t->irecv(c, pong, sizeof(pong), NULL, &rr)) != DC_OK ||
            (st = t->isend(c, ping, sizeof(ping), NULL, &sr)) != DC_OK) {
            rc = dc_cli_fail("perf link", st, "ping");
            goto out;
        }
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
        if (st != DC_OK) {
            rc = dc_cli_fail("perf link", st, "ping");
            goto out;
        }
        if (plen != sizeof(pong) || dc_load_le64(pong) != i) {
            rc = dc_cli_fail("perf link", DC_ERR_FORMAT, "bad pong");
            goto out;
        }
        lat[nlat++] = (b - a) / 1e3;
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
        json_t *j = json_object();
        json_object_set_new(j, "transport", json_string(t->name));
        json_object_set_new(j, "device", json_string(device));
        json_object_set_new(j, "why", json_string(why));
        json_object_set_new(j, "path_note", s.path_note[0] ? json_string(s.path_note)
                                                          : json_null());
        json_object_set_new(j, "peer", json_string(addr));
        json_object_set_new(j, "streams", json_integer(streams));
        json_object_set_new(j, "size", json_integer((json_int_t)po->size));
        json_object_set_new(j, "depth", json_integer(depth));
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

int dc_cmd_perf_link(int argc, char **argv)
{
    if (dc_cli_wants_help(argc, argv)) {
        dc_perf_link_help(stdout);
        return DC_EXIT_OK;
    }
    enum { O_SERVER = 256, O_BIND, O_ONCE, O_ADDRFILE, O_CLIENT, O_TRANSPORT, O_STREAMS,
           O_SIZE, O_DURATION, O_BYTES, O_DEPTH, O_LAT, O_VERIFY, O_TIMEOUT, O_JSON, O_ZC,
           O_WARMUP, O_TCRC, O_TLS };
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
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "perf link";
    bool server = false, once = false;
    const char *bind = "0.0.0.0:7471", *client = NULL, *addr_file = NULL;
    dc_pl_opts_t po = {.size = 4u << 20, .duration = 5, .lat_iters = 2000};
    uint64_t v;
    int c;
    optind = 1;
    while ((c = dc_cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
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
            break;
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
        default: return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (server == (client != NULL))
        return dc_cli_usage_error(cmd, "give exactly one of --server or --client ADDR:PORT");
    if (server)
        return dc_pl_server(bind, po.transport, once, addr_file, &po);
    if (po.tls_compare && !po.transport)
        po.transport = "tcp";
    if (po.tls_compare && strcmp(po.transport, "tcp") != 0)
        return dc_cli_usage_error(cmd, "--tls measures TLS on the tcp transport (not %s)",
                                  po.transport);
    if (po.json)
        dc_perf_json_reserve_stdout();
    return dc_pl_client(client, &po);
}
