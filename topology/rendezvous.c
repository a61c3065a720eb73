/*
 * rendezvous.c - ranks that bind an ephemeral port (port 0) publish the
 * address they got in a directory every rank can read (a shared
 * filesystem for Slurm, any directory for a local run), then read every
 * other rank's:
 *
 *   DIR/rank-R    "deltacast-rendezvous 1 KEY HOST:PORT\n"
 *
 * written to a temporary name and renamed, so a reader sees a whole file
 * or none.  KEY names the job (the launcher's job id, see
 * dc_rendezvous_key); a file with another key is left from an earlier job
 * and counts as not yet published.  Every file is read as hostile: at most
 * DC_RDV_MAX bytes, one line, an address of host characters and a port.
 */
#include "topology/topo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DC_RDV_MAX 512
#define DC_RDV_MAGIC "deltacast-rendezvous 1 "

const char *dc_rendezvous_key(char *buf, size_t cap)
{
    static const char *const vars[][2] = {
        {"SLURM_JOB_ID", "SLURM_STEP_ID"},
        {"OMPI_MCA_ess_base_jobid", NULL},
        {"PMIX_NAMESPACE", NULL},
    };
    for (size_t i = 0; i < DC_ARRAY_SIZE(vars); i++) {
        const char *a = getenv(vars[i][0]), *b = vars[i][1] ? getenv(vars[i][1]) : NULL;
        if (!a || !*a)
            continue;
        snprintf(buf, cap, "%s%s%s", a, b ? "." : "", b ? b : "");
        /* a key is one word of printable characters */
        for (char *p = buf; *p; p++)
            if (*p <= ' ' || *p > '~')
                *p = '_';
        return buf;
    }
    snprintf(buf, cap, "-");
    return buf;
}

static bool addr_ok(const char *a)
{
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a || !colon[1] || strlen(colon + 1) > 5)
        return false;
    long port = 0;
    for (const char *c = colon + 1; *c; c++) {
        if (*c < '0' || *c > '9')
            return false;
        port = port * 10 + (*c - '0');
    }
    if (port < 1 || port > 65535)
        return false;
    for (const char *c = a; c < colon; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_' || *c == '.' || *c == ':' || *c == '[' || *c == ']'))
            return false;
    return true;
}

dc_status_t dc_rendezvous_publish(const char *dir, const char *key, uint32_t rank,
                                  const char *addr)
{
    if (!addr_ok(addr))
        return dc_error(DC_ERR_INVALID, "rendezvous: address '%s' is not HOST:PORT", addr);
    dc_status_t st = dc_mkdirs(dir);
    if (st != DC_OK) {
        dc_error_prefix("rendezvous directory %s", dir);
        return st;
    }
    char tmp[4096], path[4096], line[DC_RDV_MAX];
    int n = snprintf(line, sizeof(line), DC_RDV_MAGIC "%s %s\n", key, addr);
    if (n < 0 || (size_t)n >= sizeof(line) ||
        snprintf(path, sizeof(path), "%s/rank-%u", dir, rank) >= (int)sizeof(path) ||
        snprintf(tmp, sizeof(tmp), "%s/.rank-%u.%ld", dir, rank, (long)getpid()) >= (int)sizeof(tmp))
        return dc_error(DC_ERR_INVALID, "rendezvous %s: path or key too long", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "rendezvous: cannot create %s", tmp);
    ssize_t w = write(fd, line, (size_t)n);
    int e = errno;
    if (close(fd) != 0 && w == n)
        w = -1, e = errno;
    if (w != n) {
        unlink(tmp);
        return dc_error_errno(DC_ERR_IO, e, "rendezvous: cannot write %s", tmp);
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return dc_error_errno(DC_ERR_IO, e, "rendezvous: cannot rename %s to %s", tmp, path);
    }
    return DC_OK;
}

int dc_rendezvous_parse(const char *data, size_t n, const char *path, const char *key,
                        char **addr, bool *stale)
{
    char buf[DC_RDV_MAX + 1];
    size_t ml = strlen(DC_RDV_MAGIC), kl = strlen(key);
    *addr = NULL;
    if (n >= DC_RDV_MAX || n < ml || memcmp(data, DC_RDV_MAGIC, ml) != 0 || data[n - 1] != '\n' ||
        memchr(data, 0, n) || memchr(data, '\n', n) != data + n - 1) {
        dc_error(DC_ERR_FORMAT, "rendezvous: %s is not a rendezvous entry (\"%s" "KEY HOST:PORT\")",
                 path, DC_RDV_MAGIC);
        return -1;
    }
    memcpy(buf, data, n - 1);
    buf[n - 1] = 0;
    char *k = buf + ml, *sp = strchr(k, ' ');
    if (!sp) {
        dc_error(DC_ERR_FORMAT, "rendezvous: %s has no address", path);
        return -1;
    }
    if ((size_t)(sp - k) != kl || memcmp(k, key, kl) != 0) {
        *stale = true;
        return 0;
    }
    if (!addr_ok(sp + 1)) {
        dc_error(DC_ERR_FORMAT, "rendezvous: %s: address '%.64s' is not HOST:PORT", path, sp + 1);
        return -1;
    }
    if (!(*addr = strdup(sp + 1))) {
        dc_error(DC_ERR_NOMEM, "rendezvous: out of memory");
        return -1;
    }
    return 1;
}

/* 1: *addr read; 0: absent or another job's (*stale set); <0: error. */
static int read_one(const char *dir, const char *key, uint32_t rank, char **addr, bool *stale)
{
    char path[4096], buf[DC_RDV_MAX];
    snprintf(path, sizeof(path), "%s/rank-%u", dir, rank);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        dc_error_errno(DC_ERR_IO, errno, "rendezvous: cannot open %s", path);
        return -1;
    }
    size_t n = 0; /* DC_RDV_MAX bytes read: too long (the parser says so) */
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == sizeof(buf))
            break;
    }
    close(fd);
    return dc_rendezvous_parse(buf, n, path, key, addr, stale);
}

void dc_rendezvous_free(char **addrs, uint32_t n)
{
    for (uint32_t i = 0; addrs && i < n; i++)
        free(addrs[i]);
    free(addrs);
}

dc_status_t dc_rendezvous_wait(const char *dir, const char *key, uint32_t n, uint32_t timeout_ms,
                               char ***out)
{
    char **a = calloc(n ? n : 1, sizeof(*a));
    bool *stale = calloc(n ? n : 1, sizeof(*stale));
    if (!a || !stale) {
        free(a), free(stale);
        return dc_error(DC_ERR_NOMEM, "rendezvous: out of memory");
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint32_t got = 0;
    dc_status_t st = DC_OK;
    for (;;) {
        for (uint32_t r = 0; r < n; r++) {
            if (a[r])
                continue;
            int k = read_one(dir, key, r, &a[r], &stale[r]);
            if (k < 0) {
                st = dc_last_status();
                goto out;
            }
            got += (uint32_t)k;
        }
        if (got == n)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) / 1e6;
        if (ms >= timeout_ms) {
            char list[512] = "";
            size_t len = 0, shown = 0;
            for (uint32_t r = 0; r < n && len < sizeof(list) - 40; r++) {
                if (a[r])
                    continue;
                int w = snprintf(list + len, sizeof(list) - len, "%s%u%s", shown ? ", " : "", r,
                                 stale[r] ? " (a file of another job)" : "");
                if (w > 0)
                    len += (size_t)w;
                shown++;
            }
            if (shown < n - got)
                snprintf(list + len, sizeof(list) - len, ", ...");
            st = dc_error(DC_ERR_TIMEOUT, "rendezvous %s (job key %s): after %.1f s, %u of %u ranks "
                          "never published their address: rank%s %s", dir, key, ms / 1e3, n - got,
                          n, n - got > 1 ? "s" : "", list);
            goto out;
        }
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
out:
    free(stale);
    if (st != DC_OK) {
        dc_rendezvous_free(a, n);
        return st;
    }
    *out = a;
    return DC_OK;
}
