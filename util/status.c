/* status.c - status codes, their names, and the per-thread error detail. */
#include "dc_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define DC_ERRBUF_LEN 512

static _Thread_local char dc_errbuf[DC_ERRBUF_LEN];
static _Thread_local dc_status_t dc_errstatus = DC_OK;

struct dc_status_info {
    dc_status_t st;
    const char *name;
    const char *text;
};

static const struct dc_status_info dc_status_infos[] = {
    {DC_OK, "DC_OK", "success"},
    {DC_ERR_AGAIN, "DC_ERR_AGAIN", "try again"},
    {DC_ERR_CORRUPT, "DC_ERR_CORRUPT", "checksum mismatch (data corrupted in flight)"},
    {DC_ERR_RESET, "DC_ERR_RESET", "connection reset or closed by peer"},
    {DC_ERR_TIMEOUT, "DC_ERR_TIMEOUT", "timed out"},
    {DC_ERR_BUSY, "DC_ERR_BUSY", "resource temporarily busy"},
    {DC_ERR_CANCELED, "DC_ERR_CANCELED", "operation canceled"},
    {DC_ERR_INVALID, "DC_ERR_INVALID", "invalid argument"},
    {DC_ERR_FORMAT, "DC_ERR_FORMAT", "malformed input"},
    {DC_ERR_AUTH, "DC_ERR_AUTH", "authentication failed"},
    {DC_ERR_UNSUPPORTED, "DC_ERR_UNSUPPORTED", "not supported"},
    {DC_ERR_NOMEM, "DC_ERR_NOMEM", "out of memory"},
    {DC_ERR_IO, "DC_ERR_IO", "I/O error"},
    {DC_ERR_WRONG_BASE, "DC_ERR_WRONG_BASE", "delta does not apply to this baseline"},
    {DC_ERR_NOT_FOUND, "DC_ERR_NOT_FOUND", "not found"},
    {DC_ERR_VERIFY, "DC_ERR_VERIFY", "verification failed (digest mismatch)"},
    {DC_ERR_CONFLICT, "DC_ERR_CONFLICT", "version conflict"},
    {DC_ERR_INTERNAL, "DC_ERR_INTERNAL", "internal error"},
};

static const struct dc_status_info *dc_status_lookup(dc_status_t st)
{
    for (size_t i = 0; i < DC_ARRAY_SIZE(dc_status_infos); i++)
        if (dc_status_infos[i].st == st)
            return &dc_status_infos[i];
    return NULL;
}

const char *dc_status_name(dc_status_t st)
{
    const struct dc_status_info *info = dc_status_lookup(st);
    return info ? info->name : "DC_ERR_UNKNOWN";
}

const char *dc_status_str(dc_status_t st)
{
    const struct dc_status_info *info = dc_status_lookup(st);
    return info ? info->text : "unknown status";
}

int dc_status_is_retryable(dc_status_t st)
{
    return st < 0 && st > -100;
}

const char *dc_last_error(void)
{
    return dc_errbuf;
}

dc_status_t dc_last_status(void)
{
    return dc_errstatus;
}

void dc_clear_error(void)
{
    dc_errbuf[0] = '\0';
    dc_errstatus = DC_OK;
}

static void dc_error_vset(dc_status_t st, const char *fmt, va_list ap)
{
    dc_errstatus = st;
    vsnprintf(dc_errbuf, sizeof(dc_errbuf), fmt, ap);
}

dc_status_t dc_error(dc_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dc_error_vset(st, fmt, ap);
    va_end(ap);
    DC_LOG_DEBUG("%s: %s", dc_status_name(st), dc_errbuf);
    return st;
}

dc_status_t dc_error_errno(dc_status_t st, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dc_error_vset(st, fmt, ap);
    va_end(ap);
    size_t n = strlen(dc_errbuf);
    if (n < sizeof(dc_errbuf))
        snprintf(dc_errbuf + n, sizeof(dc_errbuf) - n, ": %s", strerror(errnum));
    DC_LOG_DEBUG("%s: %s", dc_status_name(st), dc_errbuf);
    return st;
}

void dc_error_prefix(const char *fmt, ...)
{
    char prefix[DC_ERRBUF_LEN];
    char old[DC_ERRBUF_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, dc_errbuf, sizeof(old));
    size_t n = strlen(prefix);
    if (n > sizeof(dc_errbuf) - 3)
        n = sizeof(dc_errbuf) - 3;
    memcpy(dc_errbuf, prefix, n);
    dc_errbuf[n++] = ':';
    dc_errbuf[n++] = ' ';
    size_t rest = sizeof(dc_errbuf) - n - 1;
    size_t olen = strnlen(old, rest);
    memcpy(dc_errbuf + n, old, olen);
    dc_errbuf[n + olen] = '\0';
}

dc_status_t dc_status_from_errno(int errnum)
{
    switch (errnum) {
    case 0: return DC_OK;
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EINTR:
    case EINPROGRESS: return DC_ERR_AGAIN;
    case ECONNRESET:
    case ECONNABORTED:
    case ECONNREFUSED:
    case EPIPE:
    case ENOTCONN:
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETRESET: return DC_ERR_RESET;
    case ETIMEDOUT: return DC_ERR_TIMEOUT;
    case ENOMEM:
    case ENOBUFS: return DC_ERR_NOMEM;
    case EINVAL: return DC_ERR_INVALID;
    case ENOENT: return DC_ERR_NOT_FOUND;
    case EACCES:
    case EPERM: return DC_ERR_IO;
    case ENOSYS:
    case EOPNOTSUPP: return DC_ERR_UNSUPPORTED;
    default: return DC_ERR_IO;
    }
}
