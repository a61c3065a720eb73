/* journal.c - per-chunk receiver journal (see journal.h). */
#include "engine/journal.h"
#include "engine/commit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char dc_journal_magic[8] = {'D', 'C', 'J', 'O', 'U', 'R', 'N', 'L'};

struct dc_journal {
    int fd;
    int flags;
    size_t window;
    dc_journal_info_t info;
    uint8_t *states;
    dc_digest_t *digests;
    uint64_t counts[3];
    uint64_t syncs;
    char path[PATH_MAX];
};

static void dc_journal_encode_header(const dc_journal_info_t *in, uint8_t h[64])
{
    memset(h, 0, 64);
    memcpy(h, dc_journal_magic, 8);
    dc_store_le32(h + 8, DC_JOURNAL_FORMAT);
    dc_store_le64(h + 16, in->target);
    dc_store_le64(h + 24, in->baseline);
    dc_store_le64(h + 32, in->nchunks);
    dc_store_le64(h + 40, in->layout_id);
    dc_store_le64(h + 56, XXH3_64bits(h, 56));
}

static dc_status_t dc_journal_decode_header(const uint8_t h[64], const char *path,
                                            dc_journal_info_t *out)
{
    if (memcmp(h, dc_journal_magic, 8) != 0)
        return dc_error(DC_ERR_FORMAT, "%s: not a journal (bad magic)", path);
    if (dc_load_le32(h + 8) != DC_JOURNAL_FORMAT)
        return dc_error(DC_ERR_FORMAT, "%s: unknown journal format %u", path,
                        dc_load_le32(h + 8));
    if (dc_load_le64(h + 56) != XXH3_64bits(h, 56))
        return dc_error(DC_ERR_FORMAT, "%s: journal header checksum mismatch", path);
    dc_journal_info_t i;
    i.target = dc_load_le64(h + 16);
    i.baseline = dc_load_le64(h + 24);
    i.nchunks = dc_load_le64(h + 32);
    i.layout_id = dc_load_le64(h + 40);
    if (i.nchunks > DC_JOURNAL_MAX_CHUNKS)
        return dc_error(DC_ERR_FORMAT, "%s: %llu chunks is more than allowed", path,
                        (unsigned long long)i.nchunks);
    *out = i;
    return DC_OK;
}

static dc_status_t dc_journal_read_fd(int fd, const char *path, dc_journal_info_t *info,
                                      uint8_t **states, dc_digest_t **digests)
{
    uint8_t h[DC_JOURNAL_HEADER_SIZE];
    struct stat sb;
    if (dc_fstat(fd, &sb) != 0)
        return dc_error_errno(DC_ERR_IO, errno, "%s: stat", path);
    if (sb.st_size < DC_JOURNAL_HEADER_SIZE)
        return dc_error(DC_ERR_FORMAT, "%s: journal truncated (%lld bytes)", path,
                        (long long)sb.st_size);
    if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h))
        return dc_error(DC_ERR_IO, "%s: short read of the journal header", path);
    dc_journal_info_t in;
    dc_status_t st = dc_journal_decode_header(h, path, &in);
    if (st != DC_OK)
        return st;
    if ((uint64_t)sb.st_size != DC_JOURNAL_HEADER_SIZE + in.nchunks * DC_JOURNAL_PER_CHUNK)
        return dc_error(DC_ERR_FORMAT, "%s: journal is %lld bytes, header says %llu chunks",
                        path, (long long)sb.st_size, (unsigned long long)in.nchunks);
    uint8_t *s = malloc(in.nchunks ? in.nchunks : 1);
    uint8_t *raw = malloc(in.nchunks ? in.nchunks * 16 : 1);
    dc_digest_t *d = calloc(in.nchunks ? in.nchunks : 1, sizeof(*d));
    if (!s || !raw || !d) {
        free(s), free(raw), free(d);
        return dc_error(DC_ERR_NOMEM, "%s: out of memory", path);
    }
    if (dc_pread_full(fd, s, in.nchunks, DC_JOURNAL_HEADER_SIZE) != DC_OK)
        st = dc_error(DC_ERR_IO, "%s: short read of journal states", path);
    else if (dc_pread_full(fd, raw, in.nchunks * 16, DC_JOURNAL_HEADER_SIZE + in.nchunks) != DC_OK)
        st = dc_error(DC_ERR_IO, "%s: short read of journal digests", path);
    for (uint64_t i = 0; st == DC_OK && i < in.nchunks; i++) {
        d[i].lo = dc_load_le64(raw + 16 * i);
        d[i].hi = dc_load_le64(raw + 16 * i + 8);
        if (s[i] > DC_JSTATE_APPLIED)
            st = dc_error(DC_ERR_FORMAT, "%s: chunk %llu has unknown state %u", path,
                          (unsigned long long)i, (unsigned)s[i]);
        else if (s[i] == DC_JSTATE_APPLIED && dc_digest_zero(d[i]))
            st = dc_error(DC_ERR_FORMAT, "%s: chunk %llu is applied but has no digest", path,
                          (unsigned long long)i);
    }
    free(raw);
    if (st != DC_OK) {
        free(s), free(d);
        return st;
    }
    *info = in;
    *states = s;
    if (digests)
        *digests = d;
    else
        free(d);
    return DC_OK;
}

dc_digest_t dc_journal_content(const uint8_t *states, const dc_digest_t *digests,
                               uint64_t nchunks, int (*need)(const void *arg, uint64_t c),
                               const void *arg)
{
    XXH3_state_t *hs = XXH3_createState();
    dc_digest_t out = {0, 0};
    if (!hs)
        return out;
    XXH3_128bits_reset(hs);
    for (uint64_t c = 0; c < nchunks; c++) {
        if (need && !need(arg, c))
            continue;
        if (states && states[c] != DC_JSTATE_APPLIED) {
            XXH3_freeState(hs);
            return out;
        }
        uint8_t b[16];
        dc_store_le64(b, digests[c].lo);
        dc_store_le64(b + 8, digests[c].hi);
        XXH3_128bits_update(hs, b, sizeof(b));
    }
    XXH128_hash_t h = XXH3_128bits_digest(hs);
    XXH3_freeState(hs);
    out.lo = h.low64;
    out.hi = h.high64;
    if (dc_digest_zero(out))
        out.lo = 1; /* {0, 0} means "not complete" */
    return out;
}

dc_status_t dc_journal_load(const char *dir, dc_journal_info_t *info, uint8_t **states,
                            dc_digest_t **digests)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, DC_JOURNAL_FILE);
    if (n < 0 || (size_t)n >= sizeof(path))
        return dc_error(DC_ERR_INVALID, "%s: path too long", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return dc_error(DC_ERR_NOT_FOUND, "%s: no journal", path);
        return dc_error_errno(DC_ERR_IO, errno, "%s: open", path);
    }
    dc_status_t st = dc_journal_read_fd(fd, path, info, states, digests);
    close(fd);
    return st;
}

/* Create a fresh all-PENDING journal atomically (tmp + fsync + rename). */
static dc_status_t dc_journal_create(const char *dir, const char *path,
                                     const dc_journal_info_t *info)
{
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof(tmp), "%s/.journal.tmp.%ld", dir, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return dc_error(DC_ERR_INVALID, "%s: path too long", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "%s: create", tmp);
    uint8_t h[DC_JOURNAL_HEADER_SIZE];
    dc_journal_encode_header(info, h);
    uint64_t size = DC_JOURNAL_HEADER_SIZE + info->nchunks * DC_JOURNAL_PER_CHUNK;
    dc_status_t st = dc_write_full(fd, h, sizeof(h));
    if (st != DC_OK)
        dc_error_prefix("%s", tmp);
    if (st == DC_OK && ftruncate(fd, (off_t)size) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "%s: ftruncate", tmp);
    /* every block now: the state and digest writes of the version in flight
     * cannot then fail for want of space half way through it */
    if (st == DC_OK)
        st = dc_file_reserve(fd, tmp, size);
    if (st == DC_OK && fsync(fd) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "%s: fsync", tmp);
    close(fd);
    if (st == DC_OK && rename(tmp, path) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "rename %s -> %s", tmp, path);
    if (st != DC_OK) {
        unlink(tmp);
        return st;
    }
    return dc_engine_fsync_dir(dir);
}

dc_status_t dc_journal_open(const char *dir, const dc_journal_info_t *info, int flags,
                            size_t window, dc_journal_t **out, int *resumed)
{
    if (!dir || !info || !out)
        return dc_error(DC_ERR_INVALID, "journal: NULL argument");
    if (info->nchunks > DC_JOURNAL_MAX_CHUNKS)
        return dc_error(DC_ERR_INVALID, "journal: too many chunks");
    dc_journal_t *j = calloc(1, sizeof(*j));
    if (!j)
        return dc_error(DC_ERR_NOMEM, "journal: out of memory");
    j->fd = -1;
    j->flags = flags;
    j->window = window ? window : 1;
    int n = snprintf(j->path, sizeof(j->path), "%s/%s", dir, DC_JOURNAL_FILE);
    dc_status_t st;
    if (n < 0 || (size_t)n >= sizeof(j->path)) {
        st = dc_error(DC_ERR_INVALID, "%s: path too long", dir);
        goto fail;
    }
    int res = 0;
    dc_journal_info_t old;
    uint8_t *states = NULL;
    dc_digest_t *digests = NULL;
    st = dc_journal_load(dir, &old, &states, &digests);
    if (st == DC_OK && old.target == info->target && old.baseline == info->baseline &&
        old.nchunks == info->nchunks && old.layout_id == info->layout_id) {
        res = 1;
    } else {
        if (st == DC_ERR_FORMAT)
            DC_LOG_WARN("%s; starting a fresh journal", dc_last_error());
        free(states);
        free(digests);
        states = NULL;
        digests = NULL;
        st = dc_journal_create(dir, j->path, info);
        if (st != DC_OK)
            goto fail;
        states = calloc(info->nchunks ? info->nchunks : 1, 1);
        digests = calloc(info->nchunks ? info->nchunks : 1, sizeof(*digests));
        if (!states || !digests) {
            free(states);
            free(digests);
            st = dc_error(DC_ERR_NOMEM, "journal: out of memory");
            goto fail;
        }
    }
    j->states = states;
    j->digests = digests;
    j->info = *info;
    for (uint64_t i = 0; i < info->nchunks; i++)
        j->counts[states[i]]++;
    j->fd = open(j->path, O_RDWR | O_CLOEXEC);
    if (j->fd < 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "%s: open", j->path);
        goto fail;
    }
    *out = j;
    if (resumed)
        *resumed = res;
    return DC_OK;

fail:
    free(j->states);
    free(j->digests);
    free(j);
    return st;
}

void dc_journal_close(dc_journal_t *j)
{
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    free(j->states);
    free(j->digests);
    free(j);
}

dc_status_t dc_journal_remove(const char *dir)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, DC_JOURNAL_FILE);
    if (n < 0 || (size_t)n >= sizeof(path))
        return dc_error(DC_ERR_INVALID, "%s: path too long", dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return dc_error_errno(DC_ERR_IO, errno, "%s: unlink", path);
    return dc_engine_fsync_dir(dir);
}

const dc_journal_info_t *dc_journal_info(const dc_journal_t *j)
{
    return &j->info;
}

int dc_journal_state(const dc_journal_t *j, uint64_t i)
{
    return i < j->info.nchunks ? j->states[i] : -1;
}

uint64_t dc_journal_count(const dc_journal_t *j, int state)
{
    return state >= 0 && state <= DC_JSTATE_APPLIED ? j->counts[state] : 0;
}

uint64_t dc_journal_syncs(const dc_journal_t *j)
{
    return j->syncs;
}

static dc_status_t dc_journal_put(dc_journal_t *j, uint64_t i, uint8_t s)
{
    if (i >= j->info.nchunks)
        return dc_error(DC_ERR_INVALID, "%s: chunk %llu out of range (%llu chunks)", j->path,
                        (unsigned long long)i, (unsigned long long)j->info.nchunks);
    if (j->states[i] == s)
        return DC_OK;
    for (;;) {
        ssize_t r = pwrite(j->fd, &s, 1, (off_t)(DC_JOURNAL_HEADER_SIZE + i));
        if (r == 1)
            break;
        if (r < 0 && errno == EINTR)
            continue;
        return dc_error_errno(DC_ERR_IO, r < 0 ? errno : EIO, "%s: write state", j->path);
    }
    j->counts[j->states[i]]--;
    j->counts[s]++;
    j->states[i] = s;
    return DC_OK;
}

dc_status_t dc_journal_sync(dc_journal_t *j)
{
    if (!(j->flags & DC_JOURNAL_DURABLE))
        return DC_OK;
    if (fdatasync(j->fd) != 0)
        return dc_error_errno(DC_ERR_IO, errno, "%s: fdatasync", j->path);
    j->syncs++;
    return DC_OK;
}

dc_status_t dc_journal_begin(dc_journal_t *j, uint64_t i)
{
    if (i >= j->info.nchunks)
        return dc_error(DC_ERR_INVALID, "%s: chunk %llu out of range", j->path,
                        (unsigned long long)i);
    if (j->states[i] == DC_JSTATE_APPLYING)
        return DC_OK; /* already durably marked by an earlier window */
    dc_status_t st = dc_journal_put(j, i, DC_JSTATE_APPLYING);
    if (st != DC_OK || !(j->flags & DC_JOURNAL_DURABLE))
        return st;
    /* Extend the window over following PENDING chunks: one sync for many. */
    for (uint64_t k = i + 1; k < j->info.nchunks && k < i + j->window; k++) {
        if (j->states[k] != DC_JSTATE_PENDING)
            continue;
        st = dc_journal_put(j, k, DC_JSTATE_APPLYING);
        if (st != DC_OK)
            return st;
    }
    return dc_journal_sync(j);
}

dc_status_t dc_journal_applied(dc_journal_t *j, uint64_t i, dc_digest_t digest)
{
    if (i >= j->info.nchunks)
        return dc_error(DC_ERR_INVALID, "%s: chunk %llu out of range", j->path,
                        (unsigned long long)i);
    if (dc_digest_zero(digest))
        return dc_error(DC_ERR_INVALID, "%s: chunk %llu: applied without a digest", j->path,
                        (unsigned long long)i);
    /* the digest first: an APPLIED byte always has the digest it names */
    uint8_t b[16];
    dc_store_le64(b, digest.lo);
    dc_store_le64(b + 8, digest.hi);
    off_t off = (off_t)(DC_JOURNAL_HEADER_SIZE + j->info.nchunks + 16 * i);
    for (;;) {
        ssize_t r = pwrite(j->fd, b, sizeof(b), off);
        if (r == (ssize_t)sizeof(b))
            break;
        if (r < 0 && errno == EINTR)
            continue;
        return dc_error_errno(DC_ERR_IO, r < 0 ? errno : EIO, "%s: write digest", j->path);
    }
    j->digests[i] = digest;
    return dc_journal_put(j, i, DC_JSTATE_APPLIED);
}

dc_digest_t dc_journal_content_of(const dc_journal_t *j,
                                  int (*need)(const void *arg, uint64_t c), const void *arg)
{
    return dc_journal_content(j->states, j->digests, j->info.nchunks, need, arg);
}

dc_digest_t dc_journal_digest(const dc_journal_t *j, uint64_t i)
{
    dc_digest_t z = {0, 0};
    return i < j->info.nchunks && j->states[i] == DC_JSTATE_APPLIED ? j->digests[i] : z;
}

dc_status_t dc_journal_reset(dc_journal_t *j, uint64_t i)
{
    return dc_journal_put(j, i, DC_JSTATE_PENDING);
}
