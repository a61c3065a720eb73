/* log.c - leveled logging, level from DELTACAST_LOG. */
#include "dc_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static atomic_int dc_log_level_v = -1; /* -1: not yet read from env */
static FILE *_Atomic dc_log_fp = NULL;
static pthread_mutex_t dc_log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const dc_log_names[] = {"error", "warn", "info", "debug"};

/* Parse without touching the error state (dc_error() logs, which would
 * recurse into the level lookup). -1 when unknown. */
static int dc_log_parse_raw(const char *s)
{
    if (!s)
        return -1;
    for (int i = 0; i < (int)DC_ARRAY_SIZE(dc_log_names); i++)
        if (strcasecmp(s, dc_log_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return DC_LOG_LEVEL_WARN;
    return -1;
}

dc_status_t dc_log_level_parse(const char *s, dc_log_level_t *out)
{
    if (!s)
        return dc_error(DC_ERR_INVALID, "log level: missing value");
    int l = dc_log_parse_raw(s);
    if (l >= 0) {
        *out = (dc_log_level_t)l;
        return DC_OK;
    }
    return dc_error(DC_ERR_INVALID,
                    "log level '%s' is not one of error, warn, info, debug", s);
}

dc_log_level_t dc_log_get_level(void)
{
    int lvl = atomic_load_explicit(&dc_log_level_v, memory_order_relaxed);
    if (DC_LIKELY(lvl >= 0))
        return (dc_log_level_t)lvl;
    dc_log_level_t parsed = DC_LOG_LEVEL_WARN;
    const char *env = dc_config_get("log"); /* DELTACAST_LOG, dc_config_set */
    if (env && *env) {
        int l = dc_log_parse_raw(env);
        if (l < 0)
            fprintf(stderr, "deltacast: DELTACAST_LOG='%s' is not one of error, "
                            "warn, info, debug; using warn\n", env);
        else
            parsed = (dc_log_level_t)l;
    }
    int expected = -1;
    atomic_compare_exchange_strong(&dc_log_level_v, &expected, (int)parsed);
    return (dc_log_level_t)atomic_load(&dc_log_level_v);
}

void dc_log_set_level(dc_log_level_t level)
{
    if ((int)level < 0)
        level = DC_LOG_LEVEL_ERROR;
    if (level > DC_LOG_LEVEL_DEBUG)
        level = DC_LOG_LEVEL_DEBUG;
    atomic_store(&dc_log_level_v, (int)level);
}

void dc_log_set_file(FILE *fp)
{
    atomic_store(&dc_log_fp, fp);
}

void dc_log(dc_log_level_t level, const char *fmt, ...)
{
    if ((int)level > (int)dc_log_get_level())
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    FILE *fp = atomic_load(&dc_log_fp);
    if (!fp)
        fp = stderr;
    const char *name = ((int)level >= 0 && (int)level < 4) ? dc_log_names[level] : "?";
    pthread_mutex_lock(&dc_log_lock);
    fprintf(fp, "%02d:%02d:%02d.%03ld deltacast[%d] %s: %s\n", tm.tm_hour,
            tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), name, msg);
    fflush(fp);
    pthread_mutex_unlock(&dc_log_lock);
}
