/* commit.c - durable commit record with compare-and-set (see commit.h). */
#include "engine/commit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static const char dc_commit_magic[8] = {'D', 'C', 'C', 'O', 'M', 'M', 'I', 'T'};

void dc_commit_encode(const dc_commit_rec_t *r, uint8_t out[DC_COMMIT_RECORD_SIZE])
{
    memset(out, 0, DC_COMMIT_RECORD_SIZE);
    memcpy(out, dc_commit_magic, 8);
    dc_store_le32(out + 8, 1);
    dc_store_le64(out + 16, r->version);
    dc_store_le64(out + 24, r->baseline);
    dc_store_le64(out + 32, r->digest_lo);
    dc_store_le64(out + 40, r->digest_hi);
    dc_store_le64(out + 48, r->time_ns);
    dc_store_le64(out + 56, XXH3_64bits(out, 56));
}

dc_status_t dc_commit_decode(const uint8_t *buf, size_t len, const char *what,
                             dc_commit_rec_t *out)
{
    if (len != DC_COMMIT_RECORD_SIZE)
        return dc_error(DC_ERR_FORMAT, "%s: commit record is %zu bytes, expected %d", what,
                        len, DC_COMMIT_RECORD_SIZE);
    if (memcmp(buf, dc_commit_magic, 8) != 0)
        return dc_error(DC_ERR_FORMAT, "%s: not a commit record (bad magic)", what);
    if (dc_load_le32(buf + 8) != 1)
        return dc_error(DC_ERR_FORMAT, "%s: unknown commit record format %u", what,
                        dc_load_le32(buf + 8));
    if (dc_load_le64(buf + 56) != XXH3_64bits(buf, 56))
        return dc_error(DC_ERR_FORMAT, "%s: commit record checksum mismatch", what);
    dc_commit_rec_t r;
    r.version = dc_load_le64(buf + 16);
    r.baseline = dc_load_le64(buf + 24);
    r.digest_lo = dc_load_le64(buf + 32);
    r.digest_hi = dc_load_le64(buf + 40);
    r.time_ns = dc_load_le64(buf + 48);
    if (r.version != 0 && r.baseline >= r.version)
        return dc_error(DC_ERR_FORMAT, "%s: baseline %llu not below version %llu", what,
                        (unsigned long long)r.baseline, (unsigned long long)r.version);
    *out = r;
    return DC_OK;
}

static dc_status_t dc_commit_path(const char *dir, const char *name, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len)
        return dc_error(DC_ERR_INVALID, "%s: path too long", dir);
    return DC_OK;
}

dc_status_t dc_engine_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "%s: open directory", dir);
    dc_status_t st = DC_OK;
    if (fsync(fd) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "%s: fsync directory", dir);
    close(fd);
    return st;
}

dc_status_t dc_commit_read(const char *dir, dc_commit_rec_t *out)
{
    char path[PATH_MAX];
    dc_status_t st = dc_commit_path(dir, DC_COMMIT_FILE, path, sizeof(path));
    if (st != DC_OK)
        return st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return dc_error(DC_ERR_NOT_FOUND, "%s: no commit record yet", path);
        return dc_error_errno(DC_ERR_IO, errno, "%s: open", path);
    }
    uint8_t buf[DC_COMMIT_RECORD_SIZE + 1];
    ssize_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - (size_t)n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return dc_error_errno(DC_ERR_IO, e, "%s: read", path);
        }
        if (r == 0)
            break;
        n += r;
        if ((size_t)n == sizeof(buf))
            break;
    }
    close(fd);
    return dc_commit_decode(buf, (size_t)n, path, out);
}

/* Write `len` bytes durably to DIR/name (tmp + fsync + rename + dir fsync):
 * a crash leaves the old file or the new one. */
static dc_status_t dc_commit_put_file(const char *dir, const char *name, const void *buf,
                                      size_t len)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    char tname[80];
    snprintf(tname, sizeof(tname), ".%s.tmp.%ld", name, (long)getpid());
    dc_status_t st = dc_commit_path(dir, tname, tmp, sizeof(tmp));
    if (st == DC_OK)
        st = dc_commit_path(dir, name, path, sizeof(path));
    if (st != DC_OK)
        return st;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "%s: create", tmp);
    st = dc_write_full(fd, buf, len);
    if (st != DC_OK) {
        dc_error_prefix("%s", tmp);
        goto fail_unlink;
    }
    if (fsync(fd) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "%s: fsync", tmp);
        goto fail_unlink;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, path) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "rename %s -> %s", tmp, path);
        goto fail_unlink;
    }
    return dc_engine_fsync_dir(dir);

fail_unlink:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return st;
}

/* Write `rec` durably to DIR/commit. */
static dc_status_t dc_commit_write(const char *dir, const dc_commit_rec_t *rec)
{
    uint8_t buf[DC_COMMIT_RECORD_SIZE];
    dc_commit_encode(rec, buf);
    return dc_commit_put_file(dir, DC_COMMIT_FILE, buf, sizeof(buf));
}

static const char dc_digests_magic[8] = {'D', 'C', 'D', 'I', 'G', 'E', 'S', 'T'};
#define DC_DIGESTS_HEADER 64

static uint64_t dc_digests_sum(const uint8_t *h, const uint8_t *body, size_t blen)
{
    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return 0;
    XXH3_64bits_reset(s);
    XXH3_64bits_update(s, h, 56);
    XXH3_64bits_update(s, body, blen);
    uint64_t r = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return r;
}

dc_status_t dc_commit_digests_write(const char *dir, uint64_t version, uint64_t layout_id,
                                    const dc_digest_t *d, uint64_t nchunks)
{
    if (!dir || (!d && nchunks))
        return dc_error(DC_ERR_INVALID, "digests: NULL argument");
    if (nchunks > (SIZE_MAX - DC_DIGESTS_HEADER) / 16)
        return dc_error(DC_ERR_INVALID, "digests: %llu chunks", (unsigned long long)nchunks);
    size_t len = DC_DIGESTS_HEADER + (size_t)nchunks * 16;
    uint8_t *buf = calloc(1, len);
    if (!buf)
        return dc_error(DC_ERR_NOMEM, "digests: out of memory");
    memcpy(buf, dc_digests_magic, 8);
    dc_store_le32(buf + 8, 1);
    dc_store_le64(buf + 16, version);
    dc_store_le64(buf + 24, layout_id);
    dc_store_le64(buf + 32, nchunks);
    for (uint64_t c = 0; c < nchunks; c++) {
        dc_store_le64(buf + DC_DIGESTS_HEADER + 16 * c, d[c].lo);
        dc_store_le64(buf + DC_DIGESTS_HEADER + 16 * c + 8, d[c].hi);
    }
    dc_store_le64(buf + 56, dc_digests_sum(buf, buf + DC_DIGESTS_HEADER, len - DC_DIGESTS_HEADER));
    dc_status_t st = dc_commit_put_file(dir, DC_DIGESTS_FILE, buf, len);
    free(buf);
    return st;
}

dc_status_t dc_commit_digests_read(const char *dir, uint64_t version, uint64_t layout_id,
                                   dc_digest_t *d, uint64_t nchunks)
{
    char path[PATH_MAX];
    dc_status_t st = dc_commit_path(dir, DC_DIGESTS_FILE, path, sizeof(path));
    if (st != DC_OK)
        return st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return dc_error(DC_ERR_NOT_FOUND, "%s: no digests", path);
        return dc_error_errno(DC_ERR_IO, errno, "%s: open", path);
    }
    struct stat sb;
    uint8_t h[DC_DIGESTS_HEADER];
    if (dc_fstat(fd, &sb) != 0 || sb.st_size < DC_DIGESTS_HEADER ||
        pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        close(fd);
        return dc_error(DC_ERR_FORMAT, "%s: truncated", path);
    }
    uint64_t n = dc_load_le64(h + 32);
    if (memcmp(h, dc_digests_magic, 8) != 0 || dc_load_le32(h + 8) != 1 ||
        n > ((uint64_t)sb.st_size - DC_DIGESTS_HEADER) / 16 ||
        (uint64_t)sb.st_size != DC_DIGESTS_HEADER + n * 16) {
        close(fd);
        return dc_error(DC_ERR_FORMAT, "%s: not a digests file of %lld bytes", path,
                        (long long)sb.st_size);
    }
    if (dc_load_le64(h + 16) != version || dc_load_le64(h + 24) != layout_id || n != nchunks) {
        close(fd);
        return dc_error(DC_ERR_CONFLICT, "%s: digests of version %llu, not %llu", path,
                        (unsigned long long)dc_load_le64(h + 16), (unsigned long long)version);
    }
    size_t blen = (size_t)n * 16;
    uint8_t *body = malloc(blen ? blen : 1);
    if (!body) {
        close(fd);
        return dc_error(DC_ERR_NOMEM, "%s: out of memory", path);
    }
    dc_status_t rs = dc_pread_full(fd, body, blen, DC_DIGESTS_HEADER);
    close(fd);
    if (rs != DC_OK || dc_load_le64(h + 56) != dc_digests_sum(h, body, blen)) {
        free(body);
        return dc_error(DC_ERR_FORMAT, "%s: checksum mismatch", path);
    }
    for (uint64_t c = 0; c < n; c++) {
        d[c].lo = dc_load_le64(body + 16 * c);
        d[c].hi = dc_load_le64(body + 16 * c + 8);
    }
    free(body);
    return DC_OK;
}

static dc_status_t dc_commit_swap(const char *dir, uint64_t expected,
                                  const dc_commit_rec_t *next, dc_commit_rec_t *current);

/* Who holds DIR/commit.lock, as its holder recorded it in the file ("pid
 * N on HOST since T"), into buf ("an unknown process" when unreadable). */
static void dc_commit_lock_holder(int lfd, char *buf, size_t len)
{
    ssize_t n = pread(lfd, buf, len - 1, 0);
    if (n <= 0) {
        snprintf(buf, len, "an unknown process (no holder recorded)");
        return;
    }
    while (n > 0 && buf[n - 1] == '\n')
        n--;
    buf[n] = 0;
    for (ssize_t i = 0; i < n; i++) /* the file is anyone's to write: printable only */
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] > 0x7e)
            buf[i] = '?';
    if (n == 0)
        snprintf(buf, len, "an unknown process (no holder recorded)");
}

dc_status_t dc_commit_lock(const char *dir, int *lfd_out)
{
    char lpath[PATH_MAX];
    dc_status_t st = dc_commit_path(dir, DC_COMMIT_LOCK, lpath, sizeof(lpath));
    if (st != DC_OK)
        return st;
    int lfd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "%s: open lock file", lpath);
    double t0 = 0, next_log = 0;
    for (;;) {
        if (flock(lfd, LOCK_EX | LOCK_NB) == 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK) {
            st = dc_error_errno(DC_ERR_IO, errno, "%s: flock", lpath);
            close(lfd);
            return st;
        }
        /* another process holds it: say who, and that we wait (every 10 s) */
        double now = dc_now_s();
        if (t0 == 0)
            t0 = now;
        if (now >= next_log) {
            char who[160];
            dc_commit_lock_holder(lfd, who, sizeof(who));
            DC_LOG_WARN("commit: %s is held by %s; waiting for it (%.0f s so far)", lpath, who,
                        now - t0);
            next_log = now + 10;
        }
        usleep(2000);
    }
    if (t0 != 0)
        DC_LOG_WARN("commit: got %s after waiting %.1f s", lpath, dc_now_s() - t0);
    /* record the holder for whoever waits next */
    char me[160], host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(me, sizeof(me), "pid %d on %s since %s\n", (int)getpid(), host, when);
    if (ftruncate(lfd, 0) == 0 && n > 0)
        (void)!pwrite(lfd, me, (size_t)n, 0);
    *lfd_out = lfd;
    return DC_OK;
}

void dc_commit_unlock(int lfd)
{
    if (lfd < 0)
        return;
    flock(lfd, LOCK_UN);
    close(lfd);
}

dc_status_t dc_commit_cas(const char *dir, uint64_t expected, const dc_commit_rec_t *next,
                          dc_commit_rec_t *current)
{
    if (!dir || !next)
        return dc_error(DC_ERR_INVALID, "commit: NULL argument");
    if (next->version <= expected)
        return dc_error(DC_ERR_INVALID, "commit: version %llu does not advance %llu",
                        (unsigned long long)next->version, (unsigned long long)expected);
    return dc_commit_swap(dir, expected, next, current);
}

dc_status_t dc_commit_replace(const char *dir, uint64_t expected, const dc_commit_rec_t *next,
                              dc_commit_rec_t *current)
{
    if (!dir || !next)
        return dc_error(DC_ERR_INVALID, "commit: NULL argument");
    return dc_commit_swap(dir, expected, next, current);
}

static dc_status_t dc_commit_swap(const char *dir, uint64_t expected,
                                  const dc_commit_rec_t *next, dc_commit_rec_t *current)
{
    if (next->baseline >= next->version)
        return dc_error(DC_ERR_INVALID, "commit: baseline %llu not below version %llu",
                        (unsigned long long)next->baseline,
                        (unsigned long long)next->version);
    int lfd = -1;
    dc_status_t st = dc_commit_lock(dir, &lfd);
    if (st != DC_OK)
        return st;
    /* Under the lock: re-read and compare. */
    dc_commit_rec_t cur;
    memset(&cur, 0, sizeof(cur));
    st = dc_commit_read(dir, &cur);
    if (st == DC_ERR_NOT_FOUND) {
        memset(&cur, 0, sizeof(cur));
        st = DC_OK;
    }
    if (st != DC_OK)
        goto out_unlock;
    if (cur.version != expected) {
        if (current)
            *current = cur;
        st = dc_error(DC_ERR_CONFLICT,
                      "%s: commit of version %llu lost: expected committed version %llu, "
                      "found %llu",
                      dir, (unsigned long long)next->version, (unsigned long long)expected,
                      (unsigned long long)cur.version);
        goto out_unlock;
    }
    dc_commit_rec_t rec = *next;
    if (rec.time_ns == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rec.time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    st = dc_commit_write(dir, &rec);
    if (st == DC_OK && current)
        *current = rec;

out_unlock:
    dc_commit_unlock(lfd);
    return st;
}
