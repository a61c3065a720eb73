/*
 * commit.h - the durable commit record of a refit job (engine-internal).
 *
 * One record per job state directory: the version last committed, the
 * baseline it was computed from, and the digest of the whole checkpoint at
 * that version.  The record is a fixed 64-byte little-endian file
 *
 *     off  size  field
 *       0     8  magic "DCCOMMIT"
 *       8     4  format (1)
 *      12     4  reserved (0)
 *      16     8  version
 *      24     8  baseline
 *      32    16  checkpoint digest (lo, hi)
 *      48     8  unix time of the commit (nanoseconds; informational)
 *      56     8  XXH3-64 of bytes 0..55
 *
 * written to a temporary file, fsync'd, renamed over DIR/commit, and the
 * directory fsync'd, so a crash leaves either the old or the new record.
 *
 * Compare-and-set: dc_commit_cas() takes an exclusive flock on
 * DIR/commit.lock, re-reads the record, and writes the new one only if the
 * current version equals the caller's expectation.  Several coordinators
 * racing: exactly one wins each version; the others get DC_ERR_CONFLICT.
 * The holder writes "pid N on HOST since TIME" into the lock file; a
 * process that finds the lock taken logs that line and that it waits
 * (again every 10 s), and how long it waited once it has the lock.
 */
#ifndef DC_ENGINE_COMMIT_H
#define DC_ENGINE_COMMIT_H

#include "kernels/kern.h"
#include "util/dc_util.h"

#define DC_COMMIT_RECORD_SIZE 64
#define DC_COMMIT_FILE "commit"
#define DC_COMMIT_LOCK "commit.lock"

typedef struct dc_commit_rec {
    uint64_t version;       /* committed version (0: nothing committed yet) */
    uint64_t baseline;      /* version the committed delta was computed from */
    uint64_t digest_lo;     /* checkpoint digest at `version` */
    uint64_t digest_hi;
    uint64_t time_ns;       /* wall clock at commit (informational) */
} dc_commit_rec_t;

/** Serialize / parse one record (parse validates magic, format, checksum). */
void dc_commit_encode(const dc_commit_rec_t *r, uint8_t out[DC_COMMIT_RECORD_SIZE]);
dc_status_t dc_commit_decode(const uint8_t *buf, size_t len, const char *what,
                             dc_commit_rec_t *out);

/**
 * Read DIR/commit.  DC_ERR_NOT_FOUND when no record exists (a fresh job);
 * DC_ERR_FORMAT when the file is damaged.  *out written only on success.
 */
dc_status_t dc_commit_read(const char *dir, dc_commit_rec_t *out);

/**
 * Compare-and-set: replace the record with `next` only when the current
 * committed version equals `expected` (0 meaning "no record yet").  Requires
 * next->version > expected.  On success the new record is durable on return.
 * DC_ERR_CONFLICT (and *current, when non-NULL, set to what is there) when
 * another coordinator got there first.
 */
dc_status_t dc_commit_cas(const char *dir, uint64_t expected, const dc_commit_rec_t *next,
                          dc_commit_rec_t *current);

/** Take DIR/commit.lock (exclusive flock; waits for another holder, and
 *  says so, see above); *lfd_out: release it with dc_commit_unlock(). */
dc_status_t dc_commit_lock(const char *dir, int *lfd_out);
void dc_commit_unlock(int lfd);

/**
 * The same compare-and-set without requiring the version to advance: a
 * receiver's own record, when the coordinator brought it to a version
 * below the one the record named (the record was ahead of the job: its
 * bytes were verified or repaired to that version).
 */
dc_status_t dc_commit_replace(const char *dir, uint64_t expected, const dc_commit_rec_t *next,
                              dc_commit_rec_t *current);

/**
 * The coordinator's target digests of its committed version, beside the
 * record (DIR/digests): a 64-byte header (magic "DCDIGEST", format 1,
 * version, layout id, nchunks, XXH3-64 of the header and the digests) and
 * 16 bytes per chunk, written durably before the record names the
 * version.  With them a restarted coordinator can check that a node's
 * complete journal holds the committed version's content.
 */
#define DC_DIGESTS_FILE "digests"
dc_status_t dc_commit_digests_write(const char *dir, uint64_t version, uint64_t layout_id,
                                    const dc_digest_t *d, uint64_t nchunks);
/** DC_ERR_NOT_FOUND when none; DC_ERR_FORMAT when damaged; *d (nchunks
 *  entries, caller's) filled only when version, layout and count match,
 *  else DC_ERR_CONFLICT. */
dc_status_t dc_commit_digests_read(const char *dir, uint64_t version, uint64_t layout_id,
                                   dc_digest_t *d, uint64_t nchunks);

/** fsync a directory (after a rename inside it). */
dc_status_t dc_engine_fsync_dir(const char *dir);

#endif /* DC_ENGINE_COMMIT_H */
