/* misc.c - clocks, full reads/writes, version and feature strings. */
#include "dc_util.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

uint64_t dc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double dc_now_s(void)
{
    return (double)dc_now_ns() * 1e-9;
}

dc_status_t dc_read_full(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return dc_error_errno(dc_status_from_errno(errno), errno, "read");
        }
        if (n == 0)
            return dc_error(DC_ERR_RESET, "read: unexpected end of stream");
        p += n;
        len -= (size_t)n;
    }
    return DC_OK;
}

dc_status_t dc_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return dc_error_errno(dc_status_from_errno(errno), errno, "pread");
        }
        if (n == 0)
            return dc_error(DC_ERR_RESET, "pread: unexpected end of file");
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return DC_OK;
}

dc_status_t dc_write_full(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return dc_error_errno(dc_status_from_errno(errno), errno, "write");
        }
        p += n;
        len -= (size_t)n;
    }
    return DC_OK;
}

int dc_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *dc_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

const char *dc_version_string(void)
{
    return DC_VERSION_STRING;
}

#define DC_YN_STR(x) DC_YN_STR_(x)
#define DC_YN_STR_(x) DC_YN_##x
#define DC_YN_0 "no"
#define DC_YN_1 "yes"

const char *dc_build_features(void)
{
    /* a constant: safe to call from any thread at any time */
    return "verbs=" DC_YN_STR(DC_HAVE_VERBS) " ucx=" DC_YN_STR(DC_HAVE_UCX)
           " cuda=" DC_YN_STR(DC_HAVE_CUDA) " tls=" DC_YN_STR(DC_HAVE_TLS)
           " hwloc=" DC_YN_STR(DC_HAVE_HWLOC) " isal=" DC_YN_STR(DC_HAVE_ISAL);
}

#if defined(__has_feature)
#if __has_feature(memory_sanitizer)
#include <sanitizer/msan_interface.h>
#define DC_MSAN_WRITTEN(p, n) __msan_unpoison((p), (n))
#endif
#endif
#ifndef DC_MSAN_WRITTEN
#define DC_MSAN_WRITTEN(p, n) ((void)0)
#endif

int dc_fstat(int fd, struct stat *sb)
{
    int r = fstat(fd, sb);
    if (r == 0)
        DC_MSAN_WRITTEN(sb, sizeof(*sb));
    return r;
}

int dc_stat(const char *path, struct stat *sb)
{
    int r = stat(path, sb);
    if (r == 0)
        DC_MSAN_WRITTEN(sb, sizeof(*sb));
    return r;
}

dc_status_t dc_mkdirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return dc_error(DC_ERR_INVALID, "directory path of %zu bytes", n);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0)
            continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dc_error_errno(DC_ERR_IO, errno, "cannot create directory %s (at %s)", path,
                                  buf);
        buf[i] = c;
    }
    struct stat sb;
    if (dc_stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dc_error(DC_ERR_IO, "cannot create directory %s: it is not a directory", path);
    return DC_OK;
}
