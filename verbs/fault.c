/* fault.c - fault injection hooks (see fault.h). */
#include "verbs/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t dc_fault_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t dc_fault_once = PTHREAD_ONCE_INIT;
static bool dc_fault_on;
static dc_fault_cfg_t dc_fault_cfg;
static struct {
    uint64_t sent;          /* bytes written since install */
    uint64_t next_drop;     /* absolute sent count at which to drop; 0 off */
    uint64_t drops_left;    /* 0 with drop_count 0: unlimited */
    bool drop_pending;
    bool stall_done;
    uint64_t recv;          /* payload bytes seen */
    uint64_t rng;
    dc_fault_stats_t st;
} dc_fault_s;

static void dc_fault_reset_locked(void)
{
    memset(&dc_fault_s, 0, sizeof(dc_fault_s));
    dc_fault_s.rng = dc_fault_cfg.seed ? dc_fault_cfg.seed : 1;
    if (dc_fault_cfg.drop_after) {
        dc_fault_s.next_drop = dc_fault_cfg.drop_after;
        dc_fault_s.drops_left = dc_fault_cfg.drop_count;
    }
}

static bool dc_fault_parse_u64(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || *v == '-')
        return false;
    *out = x;
    return true;
}

dc_status_t dc_fault_parse(const char *spec, dc_fault_cfg_t *out)
{
    dc_fault_cfg_t c = {.corrupt_at = -1, .drop_count = 1, .seed = 1};
    if (!spec || !*spec) {
        *out = c;
        return DC_OK;
    }
    char buf[512];
    if (strlen(spec) >= sizeof(buf))
        return dc_error(DC_ERR_INVALID, "DELTACAST_FAULT: too long");
    strcpy(buf, spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return dc_error(DC_ERR_INVALID, "DELTACAST_FAULT: '%s' is not key=value", tok);
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        uint64_t u = 0;
        if (strcmp(k, "corrupt") == 0) {
            char *end;
            double p = strtod(v, &end);
            if (end == v || *end || !(p >= 0 && p <= 1))
                return dc_error(DC_ERR_INVALID, "DELTACAST_FAULT: corrupt=%s is not in [0,1]", v);
            c.corrupt_p = p;
            continue;
        }
        if (!dc_fault_parse_u64(v, &u))
            return dc_error(DC_ERR_INVALID, "DELTACAST_FAULT: %s=%s is not a number", k, v);
        if (strcmp(k, "corrupt_at") == 0) {
            if (u > INT64_MAX)
                return dc_error(DC_ERR_INVALID, "DELTACAST_FAULT: corrupt_at too large");
            c.corrupt_at = (int64_t)u;
        } else if (strcmp(k, "drop_after") == 0) {
            c.drop_after = u;
        } else if (strcmp(k, "drop_count") == 0) {
            c.drop_count = u;
        } else if (strcmp(k, "stall_ms") == 0) {
            c.stall_ms = u;
        } else if (strcmp(k, "stall_after") == 0) {
            c.stall_after = u;
        } else if (strcmp(k, "seed") == 0) {
            c.seed = u;
        } else {
            return dc_error(DC_ERR_INVALID, "DELTACAST_FAULT: unknown key '%s'", k);
        }
    }
    *out = c;
    return DC_OK;
}

static bool dc_fault_cfg_any(const dc_fault_cfg_t *c)
{
    return c->corrupt_p > 0 || c->corrupt_at >= 0 || c->drop_after > 0 || c->stall_ms > 0;
}

void dc_fault_install(const dc_fault_cfg_t *cfg)
{
    pthread_mutex_lock(&dc_fault_mu);
    if (cfg) {
        dc_fault_cfg = *cfg;
        dc_fault_on = dc_fault_cfg_any(cfg);
    } else {
        memset(&dc_fault_cfg, 0, sizeof(dc_fault_cfg));
        dc_fault_cfg.corrupt_at = -1;
        dc_fault_on = false;
    }
    dc_fault_reset_locked();
    pthread_mutex_unlock(&dc_fault_mu);
}

static void dc_fault_init_env(void)
{
    const char *spec = dc_config_get("fault");
    if (!spec || !*spec)
        return;
    dc_fault_cfg_t c;
    if (dc_fault_parse(spec, &c) != DC_OK) {
        DC_LOG_ERROR("%s (fault injection disabled)", dc_last_error());
        return;
    }
    DC_LOG_WARN("fault injection active: DELTACAST_FAULT=%s", spec);
    dc_fault_install(&c);
}

bool dc_fault_active(void)
{
    pthread_once(&dc_fault_once, dc_fault_init_env);
    return __atomic_load_n(&dc_fault_on, __ATOMIC_ACQUIRE);
}

size_t dc_fault_send_limit(size_t want)
{
    if (!dc_fault_active())
        return want;
    pthread_mutex_lock(&dc_fault_mu);
    size_t r = want;
    if (dc_fault_s.next_drop) {
        uint64_t room = dc_fault_s.next_drop > dc_fault_s.sent
                            ? dc_fault_s.next_drop - dc_fault_s.sent
                            : 0;
        if (room <= want) {
            r = (size_t)room;
            dc_fault_s.drop_pending = true;
        }
    }
    pthread_mutex_unlock(&dc_fault_mu);
    return r;
}

void dc_fault_sent(size_t n)
{
    if (!dc_fault_active())
        return;
    uint64_t stall = 0;
    pthread_mutex_lock(&dc_fault_mu);
    dc_fault_s.sent += n;
    if (dc_fault_cfg.stall_ms && !dc_fault_s.stall_done &&
        dc_fault_s.sent >= dc_fault_cfg.stall_after) {
        dc_fault_s.stall_done = true;
        dc_fault_s.st.stalled++;
        stall = dc_fault_cfg.stall_ms;
    }
    pthread_mutex_unlock(&dc_fault_mu);
    if (stall) {
        DC_LOG_WARN("fault injection: stalling %llu ms", (unsigned long long)stall);
        struct timespec ts = {(time_t)(stall / 1000), (long)(stall % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

bool dc_fault_drop_due(void)
{
    if (!dc_fault_active())
        return false;
    bool due = false;
    pthread_mutex_lock(&dc_fault_mu);
    if (dc_fault_s.drop_pending && dc_fault_s.sent >= dc_fault_s.next_drop) {
        due = true;
        dc_fault_s.drop_pending = false;
        dc_fault_s.st.dropped++;
        if (dc_fault_cfg.drop_count == 0) {
            dc_fault_s.next_drop = dc_fault_s.sent + dc_fault_cfg.drop_after;
        } else if (--dc_fault_s.drops_left > 0) {
            dc_fault_s.next_drop = dc_fault_s.sent + dc_fault_cfg.drop_after;
        } else {
            dc_fault_s.next_drop = 0;
        }
    }
    pthread_mutex_unlock(&dc_fault_mu);
    if (due)
        DC_LOG_WARN("fault injection: dropping the connection");
    return due;
}

static uint64_t dc_fault_rand(void)
{
    /* splitmix64 */
    uint64_t z = (dc_fault_s.rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool dc_fault_on_recv(uint8_t *buf, size_t len)
{
    if (!dc_fault_active() || len == 0)
        return false;
    bool hit = false;
    pthread_mutex_lock(&dc_fault_mu);
    uint64_t start = dc_fault_s.recv;
    dc_fault_s.recv += len;
    if (dc_fault_cfg.corrupt_at >= 0 && (uint64_t)dc_fault_cfg.corrupt_at >= start &&
        (uint64_t)dc_fault_cfg.corrupt_at < start + len) {
        buf[(uint64_t)dc_fault_cfg.corrupt_at - start] ^= 0x5a;
        hit = true;
    }
    if (dc_fault_cfg.corrupt_p > 0) {
        double u = (double)(dc_fault_rand() >> 11) / 9007199254740992.0;
        if (u < dc_fault_cfg.corrupt_p) {
            buf[dc_fault_rand() % len] ^= 0x01;
            hit = true;
        }
    }
    if (hit)
        dc_fault_s.st.corrupted++;
    pthread_mutex_unlock(&dc_fault_mu);
    return hit;
}

void dc_fault_get_stats(dc_fault_stats_t *out)
{
    pthread_mutex_lock(&dc_fault_mu);
    *out = dc_fault_s.st;
    pthread_mutex_unlock(&dc_fault_mu);
}
