/*
 * journal.h - a receiver's per-chunk journal for the version in flight
 * (engine-internal).
 *
 * File DIR/journal: a 64-byte little-endian header
 *
 *     off  size  field
 *       0     8  magic "DCJOURNL"
 *       8     4  format (2)
 *      12     4  reserved (0)
 *      16     8  target version
 *      24     8  baseline version (what the receiver held before)
 *      32     8  number of chunks
 *      40     8  layout id (identifies the chunking of the checkpoint)
 *      48     8  reserved (0)
 *      56     8  XXH3-64 of bytes 0..55
 *
 * followed by one state byte per chunk, then one 16-byte digest per chunk
 * (lo, hi little-endian): for an APPLIED chunk, the target digest its bytes
 * were verified against (zero otherwise).  A version is named by its
 * content, not by its number alone: a chunk APPLIED for version v holds v's
 * bytes only when its digest equals the target digest of the frame the
 * coordinator sends for it now (a trainer that re-runs a step after a crash
 * writes a different v).  A state is changed by a one-byte pwrite (never
 * torn); the digest is written before the APPLIED byte.  The states and the
 * recovery rule:
 *
 *   PENDING   never touched: the chunk still holds the baseline bytes, an
 *             XOR frame may be applied.
 *   APPLYING  the chunk may have been partly written: its bytes are
 *             unknown, it is repaired with an OVERWRITE (never re-XORed).
 *   APPLIED   applied and its target digest verified.
 *
 * Ordering: APPLYING is written before the first byte of the chunk is
 * touched and APPLIED only after the digest matched.  Against a process
 * crash (kill -9) the page cache orders this; against power loss, the
 * durable mode (dc_journal_open flag DC_JOURNAL_DURABLE) makes each
 * transition durable with batched fsyncs: dc_journal_begin() marks a window
 * of up to `window` upcoming chunks APPLYING with one fdatasync (so the cost
 * is one fsync per window, not per chunk; a chunk marked but not yet
 * touched is merely repaired by an overwrite), and dc_journal_sync() makes
 * the APPLIED marks durable after the caller has flushed its data.
 */
#ifndef DC_ENGINE_JOURNAL_H
#define DC_ENGINE_JOURNAL_H

#include "kernels/kern.h"
#include "util/dc_util.h"

#define DC_JOURNAL_FILE "journal"
#define DC_JOURNAL_HEADER_SIZE 64
#define DC_JOURNAL_FORMAT 2
/* bytes per chunk after the header: its state, its digest */
#define DC_JOURNAL_PER_CHUNK 17u
#define DC_JOURNAL_MAX_CHUNKS (1ull << 32)

enum {
    DC_JSTATE_PENDING = 0,
    DC_JSTATE_APPLYING = 1,
    DC_JSTATE_APPLIED = 2,
};

enum {
    DC_JOURNAL_DURABLE = 1, /* fsync transitions (power-loss safe) */
};

typedef struct dc_journal_info {
    uint64_t target;
    uint64_t baseline;
    uint64_t nchunks;
    uint64_t layout_id;
} dc_journal_info_t;

typedef struct dc_journal dc_journal_t;

/**
 * Open DIR/journal for `info`.  When a journal for the same target,
 * baseline, chunk count and layout exists, its states are loaded (resume
 * after a crash: *resumed = 1); otherwise a fresh journal with every chunk
 * PENDING replaces whatever was there (*resumed = 0).
 */
dc_status_t dc_journal_open(const char *dir, const dc_journal_info_t *info, int flags,
                            size_t window, dc_journal_t **out, int *resumed);

/**
 * Read DIR/journal without opening it for writing: its header, a malloc'd
 * copy of the states and, when `digests` is not NULL, of the per-chunk
 * digests (caller frees both).  DC_ERR_NOT_FOUND when none; DC_ERR_FORMAT
 * when damaged (header checksum, size, unknown state, an APPLIED chunk
 * without a digest).
 */
dc_status_t dc_journal_load(const char *dir, dc_journal_info_t *info, uint8_t **states,
                            dc_digest_t **digests);

/**
 * The content hash of a journal over the chunks a node needs: XXH3-128 of
 * the digests of the chunks c < nchunks with need(c) != 0 (need NULL: all),
 * in order; a chunk that is not APPLIED makes it {0, 0} (not complete).
 * The coordinator computes the same over its target digests to check that
 * a node's complete journal holds the version it committed.
 */
dc_digest_t dc_journal_content(const uint8_t *states, const dc_digest_t *digests,
                               uint64_t nchunks, int (*need)(const void *arg, uint64_t c),
                               const void *arg);

void dc_journal_close(dc_journal_t *j);
/** Close and delete the journal (after commit or abort). */
dc_status_t dc_journal_remove(const char *dir);

const dc_journal_info_t *dc_journal_info(const dc_journal_t *j);
/** Current state of chunk i (i < nchunks). */
int dc_journal_state(const dc_journal_t *j, uint64_t i);
/** Number of chunks in `state`. */
uint64_t dc_journal_count(const dc_journal_t *j, int state);

/**
 * Chunk i is about to be written: ensures it is durably APPLYING (in durable
 * mode extends the window of APPLYING chunks by up to `window` PENDING
 * chunks after i with one fdatasync).
 */
dc_status_t dc_journal_begin(dc_journal_t *j, uint64_t i);

/** dc_journal_content() of an open journal. */
dc_digest_t dc_journal_content_of(const dc_journal_t *j,
                                  int (*need)(const void *arg, uint64_t c), const void *arg);

/** Chunk i was applied and its bytes verified against `digest` (durable
 *  after the next sync). */
dc_status_t dc_journal_applied(dc_journal_t *j, uint64_t i, dc_digest_t digest);

/** The digest chunk i was verified against ({0, 0} unless APPLIED). */
dc_digest_t dc_journal_digest(const dc_journal_t *j, uint64_t i);

/** Chunk i returned to PENDING (it was restored to its baseline bytes). */
dc_status_t dc_journal_reset(dc_journal_t *j, uint64_t i);

/** Make all marks so far durable (fdatasync; no-op unless durable). */
dc_status_t dc_journal_sync(dc_journal_t *j);

/** Number of fdatasync calls made (to check the bounded cost in tests). */
uint64_t dc_journal_syncs(const dc_journal_t *j);

/* What a chunk needs to reach the target, from its journal state. */
typedef enum dc_chunk_need {
    DC_NEED_XOR = 0,       /* untouched baseline bytes: an XOR frame applies */
    DC_NEED_OVERWRITE = 1, /* bytes unknown or wrong baseline: overwrite */
    DC_NEED_VERIFY = 2,    /* applied: only verify the target digest */
} dc_chunk_need_t;

/**
 * The recovery rule.  `state` is the chunk's journal state (or -1 when the
 * receiver has no journal for this version); `on_baseline` is 1 when the
 * receiver's committed version equals the delta's baseline.  APPLYING
 * always yields OVERWRITE: an XOR is never applied twice.
 */
static inline dc_chunk_need_t dc_journal_need(int state, int on_baseline)
{
    if (state == DC_JSTATE_APPLIED)
        return DC_NEED_VERIFY;
    if (state == DC_JSTATE_APPLYING || !on_baseline)
        return DC_NEED_OVERWRITE;
    return DC_NEED_XOR;
}

#endif /* DC_ENGINE_JOURNAL_H */
