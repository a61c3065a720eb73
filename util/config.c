/* config.c - the table of tunables, environment overrides, size parsing. */
#include "dc_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* Keep sorted by layer; the CLI prints it in this order. */
static const dc_config_entry_t dc_config_entries[] = {
    {"log", "warn", "log level: error, warn, info, debug"},
    {"chunk_size", "4MiB", "dense bytes per chunk (unit of encoding, transfer, retry)"},
    {"threads", "0", "encode/apply worker threads (0 = all online CPUs)"},
    {"codec_layout", "simd",
     "how deltas are coded: simd (gap-quotient positions and 32-way rANS values; AVX2 / "
     "AVX-512 receivers decode them fastest) or compact (Golomb positions, 4-way rANS: "
     "faster on receivers without AVX2, e.g. ARM)"},
    {"inflight_bytes", "1GiB", "bound on memory held by frames in flight per node"},
    {"transport", "auto", "intra-region transport: auto, rdma, ucx, tcp (between regions: always "
     "tcp)"},
    {"lan_port_offset", "10000",
     "with transport ucx, nodes listen for their region on their topology port + this (the "
     "topology port takes tcp from other regions)"},
    {"tcp_streams", "auto",
     "parallel TCP streams per connection: K, or auto (one per 5 Gbit/s of the edge's "
     "rate in the topology, at least 1; 4 when the rate is unknown)"},
    {"tcp_sockbuf", "16MiB", "TCP socket send/receive buffer size"},
    {"timeout_ms", "30000", "connect/handshake/ack timeout in milliseconds"},
    {"secret_file", "", "file holding the job secret for HMAC authentication"},
    {"secret", "", "job secret (prefer secret_file; environment only)"},
    {"fault", "", "fault injection for tests: corrupt=P,corrupt_at=OFF,drop_after=N,stall_ms=T"},
    {"kern_isa", "", "force a lower kernel ISA: scalar, avx2, avx512 (default: best)"},
    {"ucx_err_mode", "peer", "UCX endpoint error mode: peer (detect dead peers) or none (shm)"},
    {"ucx_piece", "512KiB", "UCX: a message is sent as pieces of this size, each with its own "
     "CRC32C (64KiB..1GiB)"},
    {"ucx_ahead", "1MiB", "UCX: bytes of pieces posted to UCP ahead of the transfer (0: no limit)"},
    {"ucx_spin_us", "200", "UCX: microseconds a blocking wait polls before it sleeps (0: sleep "
     "at once; never with one CPU)"},
    {"rdma_device", "", "RDMA device to use, e.g. mlx5_0 (default: first active)"},
    {NULL, NULL, NULL},
};

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

dc_status_t dc_config_get_size(const char *name, uint64_t *out)
{
    const char *v = dc_config_get(name);
    if (!v)
        return dc_error(DC_ERR_NOT_FOUND, "unknown configuration key '%s'", name);
    dc_status_t st = dc_parse_size(v, out);
    if (st != DC_OK)
        dc_error_prefix("config %s", name);
    return st;
}

void dc_config_print(FILE *fp)
{
    fprintf(fp, "Configuration (environment DELTACAST_<NAME> overrides the default):\n");
    for (size_t i = 0; i < DC_CONFIG_N; i++) {
        const dc_config_entry_t *e = &dc_config_entries[i];
        const char *eff = dc_config_get(e->name);
        if (strcmp(e->name, "secret") == 0 && *eff)
            eff = "(set, hidden)";
        fprintf(fp, "  %-15s %-10s %s%s%s%s\n", e->name, *e->def ? e->def : "\"\"",
                e->doc,
                strcmp(eff, e->def) != 0 ? " [now: " : "",
                strcmp(eff, e->def) != 0 ? eff : "",
                strcmp(eff, e->def) != 0 ? "]" : "");
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
