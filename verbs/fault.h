/*
 * fault.h - fault injection for the transports (compiled in always, off by
 * default).
 *
 * DELTACAST_FAULT is a comma-separated list of key=value:
 *
 *   corrupt=P        flip one byte of a received message payload with
 *                    probability P (0..1) per message, before its CRC32C is
 *                    checked: exercises NACK + re-send.
 *   corrupt_at=OFF   flip the payload byte at offset OFF of this process's
 *                    received payload stream (once).
 *   drop_after=N     cut the connection after N more bytes written by this
 *                    process (mid-message: the stream is shut down with the
 *                    write truncated at exactly that byte); exercises
 *                    reconnect + resume.
 *   drop_count=C     how many times drop_after fires (default 1; 0: forever,
 *                    every N bytes).
 *   stall_ms=T       sleep T ms once the process has written stall_after
 *                    bytes (default 0): a stalled peer.
 *   stall_after=N    see stall_ms.
 *   seed=S           seed of the corrupt=P generator (default 1).
 *
 * Example: DELTACAST_FAULT=corrupt=0.01,drop_after=10000000,drop_count=3
 *
 * The state is per process; transports call the hooks below only when
 * dc_fault_active() (one predictable branch when off).
 */
#ifndef DC_VERBS_FAULT_H
#define DC_VERBS_FAULT_H

#include "util/dc_util.h"

#include <stdbool.h>

typedef struct dc_fault_cfg {
    double corrupt_p;
    int64_t corrupt_at;     /**< -1: off */
    uint64_t drop_after;    /**< 0: off */
    uint64_t drop_count;    /**< 0: unlimited */
    uint64_t stall_ms;
    uint64_t stall_after;
    uint64_t seed;
} dc_fault_cfg_t;

/** Parse a DELTACAST_FAULT string (NULL or "" gives "all off").
 *  DC_ERR_INVALID on an unknown key or a bad value. */
dc_status_t dc_fault_parse(const char *spec, dc_fault_cfg_t *out);

/** Install `cfg` as the process's faults (NULL: off), resetting counters.
 *  Called lazily from DELTACAST_FAULT on first use; tests may call it. */
void dc_fault_install(const dc_fault_cfg_t *cfg);

/** True when any fault is configured (reads DELTACAST_FAULT once; a bad
 *  spec is logged as an error and ignored). */
bool dc_fault_active(void);

/** Before writing `want` bytes: how many may be written now.  Returns
 *  `want` normally; less (maybe 0) when a drop is due after that many: the
 *  caller writes them, then calls dc_fault_drop_due() which is true once. */
size_t dc_fault_send_limit(size_t want);
/** Account `n` bytes written (also triggers stalls). */
void dc_fault_sent(size_t n);
/** True (once per drop) when the caller must cut its connection now. */
bool dc_fault_drop_due(void);

/** Maybe damage a received payload (corrupt=, corrupt_at=).  Returns true
 *  when a byte was flipped. */
bool dc_fault_on_recv(uint8_t *buf, size_t len);

/** Counters of what fired, for tests and logs. */
typedef struct dc_fault_stats {
    uint64_t corrupted, dropped, stalled;
} dc_fault_stats_t;
void dc_fault_get_stats(dc_fault_stats_t *out);

#endif /* DC_VERBS_FAULT_H */
