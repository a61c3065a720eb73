/* config.c - the table of tunables, environment overrides, size parsing. */
#include "dc_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define S DC_CONFIG_TYPE_STRING
#define Z DC_CONFIG_TYPE_SIZE
#define I DC_CONFIG_TYPE_INT
#define B DC_CONFIG_TYPE_BOOL
#define E DC_CONFIG_TYPE_ENUM
#define MS DC_CONFIG_TYPE_MS

/* Keep sorted by layer; the CLI prints it in this order.  Append only:
 * the table is public (dc_config_table) and frozen between releases.
 * {name, default, doc, type, choices, where} */
static const dc_config_entry_t dc_config_entries[] = {
    {"log", "warn", "log level: error, warn, info, debug", E, "error|warn|info|debug",
     "util/log.c, process-wide (first log line; dc_config_set applies it at once)"},
    {"chunk_size", "4MiB", "dense bytes per chunk (unit of encoding, transfer, retry)", Z, NULL,
     "kernels/delta.c per call; engine per node"},
    {"threads", "0", "encode/apply worker threads (0 = all online CPUs)", I, NULL,
     "engine, per node"},
    {"codec_layout", "simd",
     "how deltas are coded: simd (gap-quotient positions and 32-way rANS values; AVX2 / "
     "AVX-512 receivers decode them fastest) or compact (Golomb positions, 4-way rANS: "
     "faster on receivers without AVX2, e.g. ARM)", E, "simd|compact",
     "kernels/codec.c, per diff"},
    {"codec_model", "ctx",
     "how sparse chunks are modelled: ctx (positions by class of the base value's magnitude, "
     "values as XOR words or integer steps, whichever is smaller: the smallest deltas) or "
     "order0 (positions and XOR words alone: what deltacast 0.2 reads)", E, "ctx|order0",
     "kernels/codec.c, per diff"},
    {"inflight_bytes", "1GiB", "bound on memory held by frames in flight per node", Z, NULL,
     "engine, per node"},
    {"transport", "auto", "intra-region transport: auto, rdma, ucx, tcp (between regions: always "
     "tcp); dc_refit_node_opts_t.transport overrides it per node", E, "auto|rdma|ucx|tcp",
     "verbs/transport.c, per node (and tree/print.c)"},
    {"lan_port_offset", "10000",
     "with transport ucx, nodes listen for their region on their topology port + this (the "
     "topology port takes tcp from other regions)", Z, NULL, "engine, per node"},
    {"tcp_streams", "auto",
     "parallel TCP streams per connection: K, or auto (one per 5 Gbit/s of the edge's "
     "rate in the topology, at least 1; 4 when the rate is unknown)", I, "auto",
     "verbs/transport.c, per connection"},
    {"tcp_sockbuf", "16MiB", "TCP socket send/receive buffer size", Z, NULL,
     "verbs/transport.c, per connection"},
    {"timeout_ms", "30000", "connect/handshake/ack timeout in milliseconds", MS, NULL,
     "engine, per node; verbs per connection"},
    {"hold_timeout_ms", "600000",
     "root: how long a receiver may hold a version staged (dc_refit_receiver_hold: received, "
     "not applied, while its rollout engine generates) before the version is aborted, naming "
     "that receiver; a holding receiver is alive, never aborted as silent", MS, NULL,
     "engine, root"},
    {"secret_file", "", "file holding the job secret for HMAC authentication (also `deltacast "
     "node --secret-file`, Python secret_file=)", S, NULL,
     "verbs/auth.c, per connection"},
    {"secret", "", "job secret (prefer secret_file; DELTACAST_SECRET, Python secret=)", S, NULL,
     "verbs/auth.c, per connection"},
    {"fault", "", "fault injection for tests: corrupt=P,corrupt_at=OFF,drop_after=N,stall_ms=T",
     S, NULL, "verbs/fault.c, process-wide (first connection)"},
    {"kern_isa", "", "force a lower kernel ISA: scalar, avx2, avx512 (default: best)", E,
     "|scalar|avx2|avx512", "kernels/ ISA dispatch, process-wide (first kernel call)"},
    {"ucx_err_mode", "peer", "UCX endpoint error mode: peer (detect dead peers) or none (shm)",
     E, "peer|none", "verbs/ UCX transport, per connection"},
    {"ucx_piece", "512KiB", "UCX: a message is sent as pieces of this size, each with its own "
     "CRC32C (64KiB..1GiB)", Z, NULL, "verbs/ UCX transport, per connection"},
    {"ucx_ahead", "1MiB", "UCX: bytes of pieces posted to UCP ahead of the transfer (0: no limit)",
     Z, NULL, "verbs/ UCX transport, per connection"},
    {"ucx_spin_us", "200", "UCX: microseconds a blocking wait polls before it sleeps (0: sleep "
     "at once; never with one CPU)", I, NULL, "verbs/ UCX transport, per connection"},
    {"rdma_device", "", "RDMA device to use, e.g. mlx5_0 (default: first active)", S, NULL,
     "verbs/rdma.c, process-wide (first RDMA use)"},
    {"wan_fifo", "0", "perf refit: keep plain FIFO queues on the emulated WAN links instead of "
     "fq_codel's per-flow fairness", B, NULL, "perf/perf_refit.c, per run"},
    {"engine_crash_at", "", "test hook: a receiver dies by SIGKILL mid-apply of this chunk "
     "index (\"\": off)", I, NULL, "engine, per node"},
    {"engine_root_crash", "", "test hook: the root dies by SIGKILL after frames=N frames or "
     "after the commit of version commit=V (\"\": off)", S, NULL, "engine, per node"},
    {"engine_trace", "", "test hook: directory where each node writes trace.<rank>, its "
     "per-frame events (\"\": off)", S, NULL, "engine, per node"},
    {"handshake_timeout_ms", "5000",
     "listeners: a peer that has not authenticated within this many milliseconds (capped "
     "at timeout_ms) is dropped; with the per-address cap and eviction of the oldest "
     "unauthenticated handshake, idle or slow connections cannot lock peers out", MS, NULL,
     "verbs/ tcp, ucx and rdma listeners, per listener"},
    {"tls", "auto",
     "TLS 1.3 on tcp connections: auto (between regions), on (every tcp connection; "
     "listeners refuse clear streams), off (none; listeners refuse TLS)", E, "auto|on|off",
     "verbs/tcp_tls.c, per connection (listeners: per listener)"},
    {"tls_cipher", "TLS_AES_128_GCM_SHA256", "TLS 1.3 cipher suite", E,
     "TLS_AES_128_GCM_SHA256|TLS_AES_256_GCM_SHA384|TLS_CHACHA20_POLY1305_SHA256",
     "verbs/tcp_tls.c, per connection"},
    {"tls_ca_file", "", "TLS certificate mode: PEM file of the CA that signs every node's "
     "certificate (\"\": PSK mode, the key derived from the job secret)", S, NULL,
     "verbs/tcp_tls.c, per connection"},
    {"tls_cert_file", "", "TLS certificate mode: this node's certificate (PEM chain); it "
     "names the node's host name as in the topology (DNS subjectAltName or CN)", S, NULL,
     "verbs/tcp_tls.c, per connection"},
    {"tls_key_file", "", "TLS certificate mode: this node's private key (PEM)", S, NULL,
     "verbs/tcp_tls.c, per connection"},
    {"device_apply", "device",
     "a receiver with weights in GPU memory: device (apply xor-sparse/xor-dense/put-dense "
     "chunks on the GPU, only the decoded lists cross PCIe; other kinds are staged, said "
     "once) or stage (every chunk through the host, both ways: the old path)", E,
     "device|stage", "engine/devpath.c, per receiver"},
    {"device_encode", "device",
     "a sender with weights in GPU memory: device (diff, target digest and the ctx model's "
     "inputs computed on the GPU, only change lists cross PCIe, the host entropy-codes them "
     "into the same payload; dense chunks are staged, said once) or stage (every chunk "
     "copied whole to the host: the old path)", E, "device|stage",
     "engine/devsend.c, per sender"},
    {"device_baseline", "auto",
     "a sender with weights in GPU memory: where its baseline copy lives: device (device "
     "memory, updated device to device at each commit) or host (host memory, streamed to "
     "the GPU chunk by chunk: the baseline stream; updated from the change lists) or auto "
     "(device when the device encode is on and the device memory allows, else host)", E,
     "auto|device|host", "engine/shard.c, per sender"},
    {"device_baseline_lock", "1",
     "a sender with weights in GPU memory whose baseline copy is in host memory: page-lock "
     "it (1: the baseline stream runs by DMA at the link's speed) or not (0: pageable, "
     "slower copies, when locking the model's size of host memory is not wanted; locking "
     "tens of GB takes seconds at open)", B, NULL, "engine/shard.c, per sender"},
    {NULL, NULL, NULL, 0, NULL, NULL},
};

#undef S
#undef Z
#undef I
#undef B
#undef E
#undef MS

#define DC_CONFIG_N (DC_ARRAY_SIZE(dc_config_entries) - 1)

static char *dc_config_overrides[DC_CONFIG_N];
static char *dc_config_envcache[DC_CONFIG_N];
static pthread_mutex_t dc_config_lock = PTHREAD_MUTEX_INITIALIZER;

const dc_config_entry_t *dc_config_table(void)
{
    return dc_config_entries;
}

static int dc_config_index(const char *name)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < DC_CONFIG_N; i++)
        if (strcmp(dc_config_entries[i].name, name) == 0)
            return (int)i;
    return -1;
}

const dc_config_entry_t *dc_config_find(const char *name)
{
    int i = dc_config_index(name);
    return i < 0 ? NULL : &dc_config_entries[i];
}

const char *dc_config_get(const char *name)
{
    int i = dc_config_index(name);
    if (i < 0)
        return NULL;
    const char *res;
    pthread_mutex_lock(&dc_config_lock);
    if (dc_config_overrides[i]) {
        res = dc_config_overrides[i];
    } else {
        char env[64] = "DELTACAST_";
        size_t n = strlen(env);
        for (const char *p = name; *p && n + 1 < sizeof(env); p++)
            env[n++] = (char)toupper((unsigned char)*p);
        env[n] = '\0';
        const char *v = getenv(env);
        if (v) {
            /* cache a copy so the returned pointer stays valid */
            if (!dc_config_envcache[i] || strcmp(dc_config_envcache[i], v) != 0) {
                free(dc_config_envcache[i]);
                dc_config_envcache[i] = strdup(v);
            }
            res = dc_config_envcache[i] ? dc_config_envcache[i] : dc_config_entries[i].def;
        } else {
            res = dc_config_entries[i].def;
        }
    }
    pthread_mutex_unlock(&dc_config_lock);
    return res;
}

dc_status_t dc_config_set(const char *name, const char *value)
{
    int i = dc_config_index(name);
    if (i < 0)
        return dc_error(DC_ERR_NOT_FOUND, "unknown configuration key '%s'",
                        name ? name : "(null)");
    char *copy = NULL;
    if (value) {
        copy = strdup(value);
        if (!copy)
            return dc_error(DC_ERR_NOMEM, "config: out of memory");
    }
    pthread_mutex_lock(&dc_config_lock);
    free(dc_config_overrides[i]);
    dc_config_overrides[i] = copy;
    pthread_mutex_unlock(&dc_config_lock);
    if (strcmp(name, "log") == 0 && value) {
        dc_log_level_t lvl;
        if (dc_log_level_parse(value, &lvl) == DC_OK)
            dc_log_set_level(lvl);
    }
    return DC_OK;
}

static const char *const dc_config_type_names[] = {"string", "size", "int", "bool", "enum",
                                                   "ms"};

static const char *dc_config_type_name(dc_config_type_t t)
{
    return (unsigned)t < DC_ARRAY_SIZE(dc_config_type_names) ? dc_config_type_names[t] : "?";
}

/* The entry and effective value of `name`, which must be of type `type`. */
static dc_status_t dc_config_typed(const char *name, dc_config_type_t type,
                                   const dc_config_entry_t **e, const char **v)
{
    int i = dc_config_index(name);
    if (i < 0)
        return dc_error(DC_ERR_NOT_FOUND, "unknown configuration key '%s'",
                        name ? name : "(null)");
    *e = &dc_config_entries[i];
    if ((*e)->type != type)
        return dc_error(DC_ERR_INVALID, "config %s is of type %s, not %s", name,
                        dc_config_type_name((*e)->type), dc_config_type_name(type));
    *v = dc_config_get(name);
    return DC_OK;
}

/* Index of `v` in the '|'-separated `choices`, or -1. */
static int dc_config_choice(const char *choices, const char *v)
{
    if (!choices)
        return -1;
    size_t vl = strlen(v);
    int k = 0;
    for (const char *p = choices;; k++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vl && strncmp(p, v, len) == 0)
            return k;
        if (!bar)
            return -1;
        p = bar + 1;
    }
}

dc_status_t dc_config_get_size(const char *name, uint64_t *out)
{
    const dc_config_entry_t *e;
    const char *v;
    /* an INT or MS key reads as a size too (a count without unit): the
     * transports read tcp_streams and timeout_ms this way */
    dc_config_type_t t = DC_CONFIG_TYPE_SIZE;
    const dc_config_entry_t *f = dc_config_find(name);
    if (f && (f->type == DC_CONFIG_TYPE_INT || f->type == DC_CONFIG_TYPE_MS))
        t = f->type;
    dc_status_t st = dc_config_typed(name, t, &e, &v);
    if (st != DC_OK)
        return st;
    uint64_t r;
    st = dc_parse_size(v, &r);
    if (st != DC_OK) {
        dc_error_prefix("config %s", name);
        return st;
    }
    *out = r;
    return DC_OK;
}

/* A decimal integer, all of `v`, within [lo, hi]. */
static int dc_config_parse_int(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!*v || isspace((unsigned char)*v))
        return 0;
    errno = 0;
    char *end;
    long long r = strtoll(v, &end, 10);
    if (*end || errno || r < lo || r > hi)
        return 0;
    *out = r;
    return 1;
}

dc_status_t dc_config_get_int(const char *name, int64_t *out)
{
    const dc_config_entry_t *e;
    const char *v;
    dc_status_t st = dc_config_typed(name, DC_CONFIG_TYPE_INT, &e, &v);
    if (st != DC_OK)
        return st;
    int64_t r;
    if (dc_config_choice(e->choices, v) >= 0) {
        *out = 0;
        return DC_OK;
    }
    if (!*v)
        return dc_error(DC_ERR_NOT_FOUND, "config %s is not set", name);
    if (!dc_config_parse_int(v, INT64_MIN, INT64_MAX, &r))
        return dc_error(DC_ERR_INVALID, "config %s='%s': not an integer%s%s", name, v,
                        e->choices ? " or one of " : "", e->choices ? e->choices : "");
    *out = r;
    return DC_OK;
}

dc_status_t dc_config_get_bool(const char *name, int *out)
{
    const dc_config_entry_t *e;
    const char *v;
    dc_status_t st = dc_config_typed(name, DC_CONFIG_TYPE_BOOL, &e, &v);
    if (st != DC_OK)
        return st;
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"", "0", "no", "false", "off"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(yes); i++)
        if (strcasecmp(v, yes[i]) == 0) {
            *out = 1;
            return DC_OK;
        }
    for (size_t i = 0; i < DC_ARRAY_SIZE(no); i++)
        if (strcasecmp(v, no[i]) == 0) {
            *out = 0;
            return DC_OK;
        }
    return dc_error(DC_ERR_INVALID, "config %s='%s': not a boolean (1/0, yes/no, true/false, "
                    "on/off)", name, v);
}

dc_status_t dc_config_get_enum(const char *name, unsigned *out)
{
    const dc_config_entry_t *e;
    const char *v;
    dc_status_t st = dc_config_typed(name, DC_CONFIG_TYPE_ENUM, &e, &v);
    if (st != DC_OK)
        return st;
    int k = dc_config_choice(e->choices, v);
    if (k < 0)
        return dc_error(DC_ERR_INVALID, "config %s='%s': not one of %s", name, v, e->choices);
    *out = (unsigned)k;
    return DC_OK;
}

dc_status_t dc_config_get_ms(const char *name, uint64_t *out)
{
    const dc_config_entry_t *e;
    const char *v;
    dc_status_t st = dc_config_typed(name, DC_CONFIG_TYPE_MS, &e, &v);
    if (st != DC_OK)
        return st;
    int64_t r;
    if (!dc_config_parse_int(v, 0, INT64_MAX, &r))
        return dc_error(DC_ERR_INVALID, "config %s='%s': not a number of milliseconds", name, v);
    *out = (uint64_t)r;
    return DC_OK;
}

void dc_config_print(FILE *fp)
{
    fprintf(fp, "Configuration (environment DELTACAST_<NAME> overrides the default):\n");
    for (size_t i = 0; i < DC_CONFIG_N; i++) {
        const dc_config_entry_t *e = &dc_config_entries[i];
        const char *eff = dc_config_get(e->name);
        if (strcmp(e->name, "secret") == 0 && *eff)
            eff = "(set, hidden)";
        fprintf(fp, "  %-17s %-10s %s%s%s%s\n", e->name, *e->def ? e->def : "\"\"",
                e->doc,
                strcmp(eff, e->def) != 0 ? " [now: " : "",
                strcmp(eff, e->def) != 0 ? eff : "",
                strcmp(eff, e->def) != 0 ? "]" : "");
        fprintf(fp, "  %-17s %-10s (%s%s%s; read by %s)\n", "", "",
                dc_config_type_name(e->type), e->choices ? ": " : "",
                e->choices ? e->choices : "", e->where);
    }
}

/* Parse a non-negative finite number prefix; returns the end pointer. */
static dc_status_t dc_parse_number(const char *s, double *val, const char **end)
{
    if (!s || !*s)
        return dc_error(DC_ERR_INVALID, "empty number");
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '-' || *s == '+')
        return dc_error(DC_ERR_INVALID, "'%s': sign not allowed", s);
    if (!isdigit((unsigned char)*s) && *s != '.')
        return dc_error(DC_ERR_INVALID, "'%s' is not a number", s);
    errno = 0;
    char *e;
    double v = strtod(s, &e);
    if (e == s || errno == ERANGE || !isfinite(v) || v < 0)
        return dc_error(DC_ERR_INVALID, "'%s' is not a valid number", s);
    *val = v;
    *end = e;
    return DC_OK;
}

dc_status_t dc_parse_size(const char *s, uint64_t *out)
{
    double v;
    const char *e;
    if (dc_parse_number(s, &v, &e) != DC_OK)
        return dc_error(DC_ERR_INVALID, "size '%s' is not a number with an optional unit", s ? s : "");
    double mult = 1;
    if (*e) {
        char u = (char)tolower((unsigned char)*e);
        const char *units = "kmgtp";
        const char *pos = strchr(units, u);
        if (pos && u) {
            int pw = (int)(pos - units) + 1;
            e++;
            double base = 1000;
            if (*e == 'i' || *e == 'I') {
                base = 1024;
                e++;
            }
            mult = pow(base, pw);
        }
        if (*e == 'b' || *e == 'B')
            e++;
        if (*e)
            return dc_error(DC_ERR_INVALID, "size '%s': unknown unit (use k, M, G, T, KiB, MiB, GiB, TiB)", s);
    }
    double r = v * mult;
    if (r >= 18446744073709551615.0)
        return dc_error(DC_ERR_INVALID, "size '%s' overflows 64 bits", s);
    if (r != floor(r))
        return dc_error(DC_ERR_INVALID, "size '%s' is not a whole number of bytes", s);
    *out = (uint64_t)r;
    return DC_OK;
}

dc_status_t dc_parse_rate(const char *s, double *bps)
{
    double v;
    const char *e;
    if (dc_parse_number(s, &v, &e) != DC_OK)
        return dc_error(DC_ERR_INVALID, "rate '%s' is not a number with a unit like 100mbit", s ? s : "");
    double mult = 1;
    if (*e) {
        char u = (char)tolower((unsigned char)*e);
        switch (u) {
        case 'k': mult = 1e3; e++; break;
        case 'm': mult = 1e6; e++; break;
        case 'g': mult = 1e9; e++; break;
        case 't': mult = 1e12; e++; break;
        default: break;
        }
        if (strcasecmp(e, "bit") == 0 || strcasecmp(e, "bps") == 0 ||
            strcasecmp(e, "b") == 0 || strcasecmp(e, "bit/s") == 0 || *e == '\0') {
            /* bits per second */
        } else {
            return dc_error(DC_ERR_INVALID, "rate '%s': unknown unit (use kbit, mbit, gbit, tbit)", s);
        }
    }
    if (v * mult <= 0)
        return dc_error(DC_ERR_INVALID, "rate '%s' must be positive", s);
    *bps = v * mult;
    return DC_OK;
}
