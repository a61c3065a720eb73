/*
 * deltacast.h - the public C API of libdeltacast.
 *
 * deltacast moves a new policy version from a trainer to every rollout node
 * of a disaggregated RL job by sending only what changed, bit-exactly, over a
 * topology-aware relay tree.  This header is the whole public API and its
 * manual: every function has a contract block saying what it does, who owns
 * what, and how to test for an error.
 *
 * Conventions (apply to every function unless its block says otherwise):
 *   - Functions return dc_status_t: DC_OK (0) on success, a negative code on
 *     failure.  dc_last_error() then holds a human-readable detail line for
 *     the calling thread.
 *   - Output parameters are written only on success.
 *   - Public structs are plain data.  Structs that may grow begin with a
 *     `size` field the caller sets to sizeof(struct).
 *   - Strings passed in are borrowed for the call; strings returned are owned
 *     by the library and live as long as the object they came from.
 *   - The library is thread-safe across objects; one object is not used by
 *     two threads at once unless its block says so.
 */
#ifndef DELTACAST_H
#define DELTACAST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DC_BUILDING_LIBRARY) && defined(__GNUC__)
#define DC_API __attribute__((visibility("default")))
#else
#define DC_API
#endif

#if defined(__GNUC__)
#define DC_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define DC_PRINTF(fmt, args)
#endif

/* ======================================================================== */
/*  Version                                                                 */
/* ======================================================================== */

#define DC_VERSION_MAJOR 0
#define DC_VERSION_MINOR 1
#define DC_VERSION_PATCH 0
#define DC_VERSION_NUMBER \
    (DC_VERSION_MAJOR * 10000 + DC_VERSION_MINOR * 100 + DC_VERSION_PATCH)

/** The library's version string, e.g. "0.1.0". Static storage. */
DC_API const char *dc_version_string(void);

/** A one-line description of the optional features compiled in, e.g.
 *  "verbs=yes ucx=yes cuda=no tls=yes hwloc=yes isal=yes". Static storage. */
DC_API const char *dc_build_features(void);

/* ======================================================================== */
/*  Status codes                                                            */
/* ======================================================================== */

/*
 * One status type for the whole library.  0 is success; errors are negative
 * and grouped by what the caller can do about them:
 *
 *   -1   .. -99   transient: retry the hop / operation (the data may have
 *                 been damaged in flight, the peer reset, a timer fired).
 *   -100 .. -199  permanent: give up on this operation (bad input, failed
 *                 authentication, an unsupported request, a local fault).
 *
 * dc_status_is_retryable() tells the two groups apart.
 */
typedef enum dc_status {
    DC_OK = 0,

    /* transient: retry */
    DC_ERR_AGAIN = -1,       /**< would block / try again later */
    DC_ERR_CORRUPT = -2,     /**< checksum mismatch on data in flight */
    DC_ERR_RESET = -3,       /**< connection reset or closed by the peer */
    DC_ERR_TIMEOUT = -4,     /**< a deadline passed */
    DC_ERR_BUSY = -5,        /**< resource temporarily exhausted */
    DC_ERR_CANCELED = -6,    /**< operation canceled (shutdown, abort) */

    /* permanent: give up */
    DC_ERR_INVALID = -100,   /**< invalid argument from the caller */
    DC_ERR_FORMAT = -101,    /**< malformed file or frame (hostile input) */
    DC_ERR_AUTH = -102,      /**< peer failed authentication */
    DC_ERR_UNSUPPORTED = -103, /**< feature not built in or not available */
    DC_ERR_NOMEM = -104,     /**< out of memory */
    DC_ERR_IO = -105,        /**< local file-system or OS error */
    DC_ERR_WRONG_BASE = -106, /**< delta does not apply to this baseline */
    DC_ERR_NOT_FOUND = -107, /**< named object does not exist */
    DC_ERR_VERIFY = -108,    /**< end-to-end digest mismatch after apply */
    DC_ERR_CONFLICT = -109,  /**< compare-and-set lost / version conflict */
    DC_ERR_NOT_IMPLEMENTED = -110, /**< not implemented in this version */
    DC_ERR_INTERNAL = -199,  /**< invariant violated: a bug, please report */
} dc_status_t;

/** Short constant name of a status, e.g. "DC_ERR_CORRUPT".  Never NULL. */
DC_API const char *dc_status_name(dc_status_t st);

/** Human description of a status, e.g. "checksum mismatch".  Never NULL. */
DC_API const char *dc_status_str(dc_status_t st);

/** 1 when the status is in the transient group (retry may succeed). */
DC_API int dc_status_is_retryable(dc_status_t st);

/**
 * The detail message of the last error recorded by the calling thread,
 * e.g. "base.safetensors: header length 9e18 exceeds file size 1024".
 * Thread-local storage owned by the library, valid until the thread's next
 * failing call.  Returns "" when no error was recorded.
 */
DC_API const char *dc_last_error(void);

/** Status of the last error recorded by the calling thread (DC_OK if none). */
DC_API dc_status_t dc_last_status(void);

/** Forget the calling thread's last error. */
DC_API void dc_clear_error(void);

/* ======================================================================== */
/*  Logging                                                                 */
/* ======================================================================== */

typedef enum dc_log_level {
    DC_LOG_LEVEL_ERROR = 0,
    DC_LOG_LEVEL_WARN = 1,
    DC_LOG_LEVEL_INFO = 2,
    DC_LOG_LEVEL_DEBUG = 3,
} dc_log_level_t;

/**
 * Messages at or below the current level go to the log sink (stderr by
 * default).  The initial level is read once from the environment variable
 * DELTACAST_LOG ("error", "warn", "info", "debug"; default "warn").
 */
DC_API void dc_log_set_level(dc_log_level_t level);
DC_API dc_log_level_t dc_log_get_level(void);

/** Parse "error" / "warn" / "info" / "debug" (case-insensitive).
 *  Returns DC_ERR_INVALID for anything else. */
DC_API dc_status_t dc_log_level_parse(const char *s, dc_log_level_t *out);

/** Redirect log lines to `fp` (NULL restores stderr).  `fp` is borrowed and
 *  must outlive its use. */
DC_API void dc_log_set_file(FILE *fp);

/** Emit one log line "deltacast[pid] LEVEL: message" if `level` is enabled. */
DC_API void dc_log(dc_log_level_t level, const char *fmt, ...) DC_PRINTF(2, 3);

/* ======================================================================== */
/*  Configuration                                                           */
/* ======================================================================== */

/*
 * Tunables live in one table: name, default, documentation.  Each can be
 * overridden by an environment variable DELTACAST_<NAME> (upper case) and by
 * dc_config_set().  The CLI's --help prints the table.
 */
typedef struct dc_config_entry {
    const char *name;     /**< e.g. "chunk_size" */
    const char *def;      /**< default value as text, e.g. "4MiB" */
    const char *doc;      /**< one line of documentation */
} dc_config_entry_t;

/** The table, terminated by an entry whose name is NULL.  Static storage. */
DC_API const dc_config_entry_t *dc_config_table(void);

/**
 * The effective value of `name`: dc_config_set() value if set, else the
 * environment variable DELTACAST_<NAME>, else the default.  Returns NULL if
 * `name` is not in the table.  The string is owned by the library and valid
 * until the next dc_config_set() of the same name.
 */
DC_API const char *dc_config_get(const char *name);

/** Override `name` for this process (copies `value`; NULL resets).
 *  Returns DC_ERR_NOT_FOUND for an unknown name. */
DC_API dc_status_t dc_config_set(const char *name, const char *value);

/** Effective value of `name` parsed as a byte size (see dc_parse_size). */
DC_API dc_status_t dc_config_get_size(const char *name, uint64_t *out);

/** Print the table (name, effective value, default, doc) to `fp`. */
DC_API void dc_config_print(FILE *fp);

/**
 * Parse a byte size: a decimal or floating number with an optional unit,
 * "4096", "4k", "4KiB", "4MB", "1.5GiB", "2e9".  k/M/G/T are powers of 1000,
 * Ki/Mi/Gi/Ti powers of 1024; a trailing "B" is accepted.  Rejects negative
 * numbers, overflow and trailing garbage with DC_ERR_INVALID.
 */
DC_API dc_status_t dc_parse_size(const char *s, uint64_t *out);

/**
 * Parse a link rate in bits per second: "100mbit", "5gbit", "400gbit",
 * "1.5Gbps", "800kbit", "1e9".  Units are powers of 1000.  DC_ERR_INVALID
 * on anything else.
 */
DC_API dc_status_t dc_parse_rate(const char *s, double *bits_per_second);

/* ======================================================================== */
/*  Checkpoints (safetensors) and the delta codec            [kernels/]     */
/* ======================================================================== */

/* (codec API: added by the codec work) */

/* ======================================================================== */
/*  Transports                                                 [verbs/]     */
/* ======================================================================== */

/* (transport API: added by the transport work) */

/* ======================================================================== */
/*  Topology and relay tree                         [topology/, tree/]      */
/* ======================================================================== */

/* (topology/tree API: added by the tree work) */

/* ======================================================================== */
/*  Refit engine                                              [engine/]     */
/* ======================================================================== */

/* (engine API: added by the engine work) */

#ifdef __cplusplus
}
#endif

#endif /* DELTACAST_H */
