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
 *   - Inputs first, outputs last; output parameters are written only on
 *     success.
 *   - Public structs are plain data.  Structs that may grow begin with a
 *     `size_t size` the caller sets to sizeof(the struct), and every entry
 *     point honours it the same way:
 *       size < the struct's first version     DC_ERR_INVALID (size not set)
 *       size < this library's sizeof          accepted: a caller built
 *                                             against an older header; the
 *                                             fields it lacks default (0)
 *       size > this library's sizeof          a newer caller: accepted when
 *                                             the bytes past ours are all
 *                                             zero, else DC_ERR_UNSUPPORTED
 *     An output struct is filled as far as the caller's size reaches, and
 *     its size is then set to the bytes the library filled.  Fields added
 *     after a struct's first version are marked "(added in X.Y)".
 *   - Arrays the library hands out (tables, a topology's or tree's nodes,
 *     edges, links, NIC names, dc_refit_segment_t ranges) and arrays a
 *     caller passes in (dc_refit_tensor_t, dc_refit_segment_t) are frozen: their element type never grows
 *     (a new field means a new type and a new accessor), and they live as
 *     long as the object they came from (dc_config_table(): the process).
 *     The one exception, dc_config_entry_t, grew in 0.2 and the soname
 *     changed with it (libdeltacast.so.0.2).
 *   - Strings passed in are borrowed for the call; strings returned are owned
 *     by the library and live as long as the object they came from.
 *   - The library is thread-safe across objects; one object is not used by
 *     two threads at once unless its block says so.
 *
 * Names: functions dc_<object>_<verb> (the process-level basics are the
 * exceptions: dc_last_error, dc_last_status, dc_clear_error, dc_log,
 * dc_free, dc_version_string, dc_build_features, dc_parse_size,
 * dc_parse_rate); types dc_<object>_t; a call's
 * options struct dc_<thing>_opts_t ("config" means only the tunables table
 * below); enum values DC_<ENUM NAME>_<VALUE>, e.g. dc_tree_format_t ->
 * DC_TREE_FORMAT_JSON (status codes keep their short DC_OK / DC_ERR_*).
 * A caller's buffer and its capacity count as one output (buffer, cap,
 * then the count written).  A digest is always uint8_t[16], the 128-bit value
 * little-endian (low 64 bits first).  Names of 0.1 that broke these rules
 * remain as deprecated aliases at the end of this header, for 0.2 only.
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
#define DC_VERSION_MINOR 2
#define DC_VERSION_PATCH 1
#define DC_VERSION_NUMBER \
    (DC_VERSION_MAJOR * 10000 + DC_VERSION_MINOR * 100 + DC_VERSION_PATCH)

/** The library's version string, "0.2.1" for this header (it matches
 *  DC_VERSION_MAJOR.MINOR.PATCH of the header the library was built with;
 *  a caller may compare them).  Static storage. */
DC_API const char *dc_version_string(void);

/** A one-line description of the optional features compiled in, e.g.
 *  "verbs=yes ucx=yes cuda=no tls=no hwloc=yes isal=yes". Static storage. */
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
 * default).  The initial level is read once, at the first log call, from
 * the config key `log` (DELTACAST_LOG: "error", "warn", "info", "debug";
 * default "warn"; an invalid value warns once and uses warn).
 * dc_log_set_level() sets it for the whole process (out of range values
 * are clamped); dc_log_get_level() returns it.  Thread-safe.
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
 * Tunables live in one typed table: name, type, default, documentation and
 * where the value is read.  Each can be overridden by an environment
 * variable DELTACAST_<NAME> (upper case) and, above that, by
 * dc_config_set().  `deltacast --help` prints the table.  Nothing outside
 * the table reads a DELTACAST_* variable of its own.
 *
 * When a value takes effect:
 *   - process-wide: read once, at the first use in the process (log,
 *     kern_isa, fault, rdma_device); dc_config_set() must come before that
 *     use (log is the exception: dc_config_set("log", ...) also sets the
 *     level at once).
 *   - everything else is read each time it is used: when a node starts
 *     (per node: transport, timeout_ms, threads, inflight_bytes,
 *     engine_* test hooks...), when a connection is made (tcp_*, ucx_*,
 *     secret*) or at each call (chunk_size, codec_layout).
 *
 * The typed getters (dc_config_get_size/_int/_bool/_enum/_ms) parse the
 * effective value against the entry's type and fail with DC_ERR_INVALID and
 * a detail naming the key and the bad value ("config timeout_ms='soon': not
 * a number of milliseconds"); *out is then left unchanged.  Asking a getter
 * of one type for a key of another is DC_ERR_INVALID too.
 */
typedef enum dc_config_type {
    DC_CONFIG_TYPE_STRING = 0, /**< free text ("" = unset); paths, secrets, specs */
    DC_CONFIG_TYPE_SIZE = 1,   /**< byte size, see dc_parse_size() ("4MiB") */
    DC_CONFIG_TYPE_INT = 2,    /**< signed decimal integer; `choices` lists words
                                    also accepted (e.g. "auto", read as 0) */
    DC_CONFIG_TYPE_BOOL = 3,   /**< 1/0, yes/no, true/false, on/off ("" = 0) */
    DC_CONFIG_TYPE_ENUM = 4,   /**< one of `choices` */
    DC_CONFIG_TYPE_MS = 5,     /**< milliseconds, a non-negative integer */
} dc_config_type_t;

typedef struct dc_config_entry {
    const char *name;     /**< e.g. "chunk_size" */
    const char *def;      /**< default value as text, e.g. "4MiB" */
    const char *doc;      /**< one line of documentation */
    /* (added in 0.2) */
    dc_config_type_t type;
    const char *choices;  /**< ENUM: the values, '|'-separated ("" first when
                               an empty value is allowed); INT: words accepted
                               besides numbers; NULL otherwise */
    const char *where;    /**< who reads it and when, e.g. "engine, per node"
                               or "kernels/ ISA dispatch, process-wide" */
} dc_config_entry_t;

/** The table, terminated by an entry whose name is NULL.  Static storage,
 *  frozen: entries are only ever appended between releases. */
DC_API const dc_config_entry_t *dc_config_table(void);

/** The entry named `name`, or NULL.  Static storage. */
DC_API const dc_config_entry_t *dc_config_find(const char *name);

/**
 * The effective value of `name`: dc_config_set() value if set, else the
 * environment variable DELTACAST_<NAME>, else the default.  Returns NULL if
 * `name` is not in the table.  The string is owned by the library and valid
 * until the next dc_config_set() of the same name.  Never validated: the
 * typed getters below are.
 */
DC_API const char *dc_config_get(const char *name);

/**
 * Override `name` for this process (copies `value`; NULL resets to the
 * environment / default).  Works for every key of the table, including the
 * test hooks.  The value is not checked here (a typed getter reports a bad
 * one where it is read).  Returns DC_OK, DC_ERR_NOT_FOUND for an unknown
 * name, DC_ERR_NOMEM.
 */
DC_API dc_status_t dc_config_set(const char *name, const char *value);

/** Effective value of a SIZE key in bytes (see dc_parse_size; an INT or MS
 *  key is read the same way, as a count without unit).  Errors:
 *  DC_ERR_NOT_FOUND (unknown key), DC_ERR_INVALID (bad value, wrong type:
 *  the detail names the key and the value). */
DC_API dc_status_t dc_config_get_size(const char *name, uint64_t *out);

/** Effective value of an INT key (a word of its `choices`, e.g. "auto",
 *  reads as 0).  An empty value (the test hooks' default: off) gives
 *  DC_ERR_NOT_FOUND "not set".  Errors otherwise as dc_config_get_size(). */
DC_API dc_status_t dc_config_get_int(const char *name, int64_t *out);

/** Effective value of a BOOL key: 1 or 0.  Errors as dc_config_get_size(). */
DC_API dc_status_t dc_config_get_bool(const char *name, int *out);

/** Effective value of an ENUM key: the index of the value in the entry's
 *  `choices` (0 for the first).  Errors as dc_config_get_size(). */
DC_API dc_status_t dc_config_get_enum(const char *name, unsigned *out);

/** Effective value of an MS key in milliseconds.  Errors as
 *  dc_config_get_size(). */
DC_API dc_status_t dc_config_get_ms(const char *name, uint64_t *out);

/** Print the table (name, type, default, doc, where read, and the
 *  effective value when it differs) to `fp`. */
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

/*
 * A delta turns a BASE safetensors checkpoint into a TARGET one, bit-exactly.
 * Every tensor is cut into chunks (default 4 MiB of dense bytes, config key
 * chunk_size); each changed chunk becomes a frame whose payload is the
 * smallest exact encoding of the change (sparse XOR, sparse/dense overwrite,
 * dense XOR; positions and values entropy-coded separately).  The delta
 * names the base and target checkpoint digests: apply refuses a wrong base
 * (DC_ERR_WRONG_BASE) and verifies every chunk and the whole target
 * (DC_ERR_VERIFY).  Hostile or damaged deltas give DC_ERR_FORMAT (or
 * DC_ERR_CORRUPT for a payload checksum mismatch) and no output.
 *
 * The file format is described in kernels/delta.h; the frame header, shared
 * with the wire, in kernels/frame.h.
 */

/** Options for diff and apply.  Zero-initialize, set size = sizeof. */
typedef struct dc_delta_opts {
    size_t size;          /**< sizeof(dc_delta_opts_t) */
    uint64_t chunk_size;  /**< diff: dense bytes per chunk; 0 = config chunk_size */
    unsigned threads;     /**< worker threads; 0 = one per CPU */
    /* (added in 0.2: a 0.1 caller's size ends here) */
    int strict_base;      /**< apply: hash the whole base first and refuse any base
                               whose checkpoint digest is not the delta's, even one
                               whose differing bytes the delta never reads (one more
                               pass over the base; default: verify the target only) */
    unsigned layout;      /**< diff: a dc_delta_layout_t; 0 = config
                               codec_layout.  Every layout applies everywhere; SIMD
                               applies fastest with AVX2 / AVX-512, COMPACT without */
} dc_delta_opts_t;

/** dc_delta_opts_t.layout values (kernels/codec.h DC_CODEC_LAYOUT_*). */
typedef enum dc_delta_layout {
    DC_DELTA_LAYOUT_SIMD = 1,    /**< gap-quotient positions, 32-way rANS values */
    DC_DELTA_LAYOUT_COMPACT = 2, /**< Golomb positions, 4-way rANS values */
} dc_delta_layout_t;

/** Figures of one diff or apply.  Set size = sizeof before the call. */
typedef struct dc_delta_stats {
    size_t size;               /**< sizeof(dc_delta_stats_t) */
    uint64_t base_bytes;       /**< base checkpoint file size */
    uint64_t target_bytes;     /**< target checkpoint file size */
    uint64_t delta_bytes;      /**< delta file size */
    uint64_t tensors;          /**< tensors in the target */
    uint64_t elements;         /**< elements in the target */
    uint64_t changed;          /**< changed elements in matched tensors */
    uint64_t chunks;           /**< chunks in the target */
    uint64_t frames;           /**< frames in the delta (changed chunks) */
    uint64_t frames_by_kind[5]; /**< index: 1 xor-sparse, 2 put-sparse,
                                    3 xor-dense, 4 put-dense */
    uint64_t payload_bytes;    /**< sum of frame payloads */
    uint64_t pos_bytes;        /**< positions streams */
    uint64_t val_bytes;        /**< values streams */
    double bound_bytes;        /**< entropy bound of XOR-coded frames (diff) */
    uint64_t bounded_payload;  /**< payload bytes of the frames in bound_bytes */
    double seconds;            /**< wall time of the call */
    /* (added in 0.2.1: the codec's base-conditioned model) */
    uint64_t frames_ctx;       /**< ctx-sparse frames (positions by class of
                                    the base value's magnitude; not in
                                    frames_by_kind) */
    double bound_ctx_bytes;    /**< base-conditioned bound of the frames in
                                    bound_bytes: for ctx-sparse frames the
                                    entropy of the coded model (positions per
                                    class, values as coded), for the others
                                    their order-0 bound (diff) */
} dc_delta_stats_t;

/**
 * Write the delta turning checkpoint file `base_path` into `next_path` to
 * `delta_path` (via a temporary file renamed into place; on failure nothing
 * is left).  `opts` and `stats` may be NULL.  Frames are written in a
 * deterministic order whatever the thread count.
 */
DC_API dc_status_t dc_delta_diff_files(const char *base_path, const char *next_path,
                                       const char *delta_path, const dc_delta_opts_t *opts,
                                       dc_delta_stats_t *stats);

/**
 * Apply `delta_path` to `base_path`, writing the target to `out_path` via a
 * temporary file in the same directory, renamed into place only after every
 * chunk digest and the target checkpoint digest verified.  When they do not,
 * the base's checkpoint digest is checked against the one the delta names:
 * DC_ERR_WRONG_BASE ("made for a different base") or DC_ERR_VERIFY (the
 * delta is corrupt); a base that differs only in bytes the delta does not
 * use still yields the exact target (kernels/delta.h).  out_path == NULL
 * applies "in place": the target is built in a temporary file beside the
 * base and renamed over it, so an interrupted or failing apply leaves the
 * base file untouched (at base) and a successful one leaves it at target;
 * it needs free space for one more checkpoint.
 */
DC_API dc_status_t dc_delta_apply_files(const char *base_path, const char *delta_path,
                                        const char *out_path, const dc_delta_opts_t *opts,
                                        dc_delta_stats_t *stats);

/**
 * In-memory diff: base/next are whole safetensors file images (borrowed).
 * On success *delta is a malloc'd delta image of *delta_len bytes, owned by
 * the caller (release with dc_free()).
 */
DC_API dc_status_t dc_delta_diff_buffers(const void *base, size_t base_len, const void *next,
                                         size_t next_len, const dc_delta_opts_t *opts,
                                         void **delta, size_t *delta_len,
                                         dc_delta_stats_t *stats);

/** Size of the target checkpoint a delta image produces (validates the
 *  delta's file header). */
DC_API dc_status_t dc_delta_target_size(const void *delta, size_t delta_len, uint64_t *size);

/**
 * In-memory apply: writes the target image into `out` (out_cap >= the
 * target size).  `out` may be modified even on failure (it holds no valid
 * checkpoint then); *out_len is set only on success.  (0.2 moved `opts`
 * before the outputs; 0.1 took it after out_len.)
 */
DC_API dc_status_t dc_delta_apply_buffers(const void *base, size_t base_len, const void *delta,
                                          size_t delta_len, const dc_delta_opts_t *opts,
                                          void *out, size_t out_cap, size_t *out_len,
                                          dc_delta_stats_t *stats);

/** The 128-bit checkpoint digest a delta names, of a whole safetensors
 *  file image: XXH3-128 over the file size, the chunk size, the digest of
 *  the header bytes and the XXH3-128 of every chunk (kernels/delta.h has
 *  the exact definition).  chunk_size 0 = config chunk_size.  Written
 *  little-endian (lo, hi) to out[16].  threads: 0 = one per CPU. */
DC_API dc_status_t dc_checkpoint_digest(const void *buf, size_t len, uint64_t chunk_size,
                                        unsigned threads, uint8_t out[16]);

/** Free memory the library returned to the caller to own (a delta image
 *  from dc_delta_diff_buffers()).  NULL: no-op. */
DC_API void dc_free(void *p);

/* ======================================================================== */
/*  Transports                                                 [verbs/]     */
/* ======================================================================== */

/*
 * No transport function is public: the engine picks and drives them.  What
 * a caller controls is which one a node uses inside its region:
 *
 *   "rdma"  RDMA verbs (RC queue pairs; config rdma_device picks the NIC)
 *   "ucx"   UCX (UCP active messages; config ucx_*; the node listens on its
 *           topology port + lan_port_offset)
 *   "tcp"   TCP, tcp_streams parallel streams per connection
 *   "auto"  the first of rdma, ucx, tcp usable on the node (default)
 *
 * named by dc_refit_node_opts_t.transport, else the config key transport.
 * Between regions a node always uses tcp.  A transport named explicitly
 * and not usable is an error, never a silent fallback.  Every transport
 * authenticates its peers with the job secret and checks every message
 * with a CRC32C of its own.
 */

/* ======================================================================== */
/*  Topology and relay tree                         [topology/, tree/]      */
/* ======================================================================== */

/*
 * Where nodes are (a dc_topo_t) and who sends what to whom (a dc_tree_t).
 *
 * A topology holds regions, the nodes in them (host, address, NICs, GPUs),
 * link rates (per node inside a region "LAN", per node between regions
 * "WAN", optional aggregate region-pair links) and roles: senders (trainer
 * shards) and receivers (rollout nodes).  The model is split into
 * `n_shards` (<= 64) equal contiguous parts of the canonical byte space; a
 * sender owns some shards, a receiver needs some (all by default), both as
 * a bit mask.  Topologies come from a YAML file (topology/examples/), from a
 * Slurm node list, or from the synthetic helpers.
 *
 * The tree is a pure, deterministic function of the topology: one routing
 * *stream* per (shard, stripe); a stream's chunks are those of its shard
 * whose index within the shard is `stripe` modulo `n_stripes`.  Each stream
 * has its own tree spanning exactly the receivers that need its shard, so a
 * tree edge carries its whole stream and a relay forwards only what its
 * subtree needs.  Streams between the same two nodes share one connection
 * (a dc_tree_link_t).
 */
typedef struct dc_topo dc_topo_t;
typedef struct dc_tree dc_tree_t;

#define DC_TOPO_MAX_SHARDS 64

typedef enum dc_topo_role {
    DC_TOPO_ROLE_RECEIVER = 0, /**< rollout node: needs shards, may relay */
    DC_TOPO_ROLE_SENDER = 1,   /**< trainer node: owns shards, is a stream root */
} dc_topo_role_t;

/** A node as seen by callers.  Strings and arrays are owned by the topology
 *  and live as long as it. */
typedef struct dc_topo_node_info {
    size_t size;            /**< caller sets sizeof(dc_topo_node_info_t) */
    const char *name;       /**< host name, unique */
    const char *addr;       /**< address ("10.0.0.1", "127.0.0.1:7301"); "" if none */
    const char *region;     /**< region name */
    const char *cluster;    /**< cluster name; "" if none */
    uint32_t region_index;  /**< index into the topology's regions */
    uint32_t role;          /**< dc_topo_role_t */
    double lan_bps;         /**< effective NIC rate inside the region, bit/s */
    double wan_bps;         /**< effective per-node share between regions, bit/s */
    uint64_t shards;        /**< sender: owned shards; receiver: needed shards */
    uint32_t n_nics;        /**< NIC names, e.g. "mlx5_0" */
    const char *const *nics;
    uint32_t n_gpus;        /**< GPU names, e.g. "0" or "GPU-uuid" */
    const char *const *gpus;
} dc_topo_node_info_t;

/** Parse a YAML topology file.  Errors (DC_ERR_IO, DC_ERR_FORMAT,
 *  DC_ERR_INVALID) name the file and the line.  *out is freed with
 *  dc_topo_free(). */
DC_API dc_status_t dc_topo_load(const char *path, dc_topo_t **out);

/** Same from memory; `name` is used in error messages. */
DC_API dc_status_t dc_topo_parse(const char *text, size_t len, const char *name,
                                 dc_topo_t **out);

/** Synthetic topology: a trainer region "train" of `n` senders (one shard
 *  each) and `r` receiver regions "r0".."r{r-1}" of `n` receivers each;
 *  `wan_bps`/`lan_bps` per node (0 = 5 Gbit/s / 400 Gbit/s). */
DC_API dc_status_t dc_topo_synthetic(uint32_t r, uint32_t n, double wan_bps,
                                     double lan_bps, dc_topo_t **out);

/** Parse the CLI form "R:N[:WAN[:LAN]]", e.g. "2:8:5gbit:400gbit", and
 *  build it with dc_topo_synthetic(). */
DC_API dc_status_t dc_topo_synthetic_parse(const char *spec, dc_topo_t **out);

/** A topology for tests and demos on this machine: one sender "trainer" in
 *  region "train" and `r` regions of `n` receivers, every address
 *  "127.0.0.1:<port>" with ports base_port, base_port+1, ... in node order
 *  (the trainer is node 0).  One shard. */
DC_API dc_status_t dc_topo_synthetic_local(uint32_t r, uint32_t n, uint16_t base_port,
                                           dc_topo_t **out);

/** Build from a Slurm node list ("gpu-[001-004,010],cpu7") and a region map
 *  "PATTERN=REGION[,PATTERN=REGION...]" (fnmatch globs, first match wins; a
 *  host matching none goes to region "default"; NULL/"" puts all in it).
 *  The first `n_senders` hosts are senders, one shard each. */
DC_API dc_status_t dc_topo_from_slurm(const char *nodelist, const char *region_map,
                                      uint32_t n_senders, double wan_bps,
                                      double lan_bps, dc_topo_t **out);

/** Free a topology (NULL: no-op).  Everything borrowed from it (node
 *  infos, trees planned over it) must no longer be used. */
DC_API void dc_topo_free(dc_topo_t *topo);

/** Number of nodes, regions and shards of `topo` (0 when NULL).  Node
 *  indices run 0 .. count-1; node 0 is the coordinator. */
DC_API uint32_t dc_topo_node_count(const dc_topo_t *topo);
DC_API uint32_t dc_topo_region_count(const dc_topo_t *topo);
DC_API uint32_t dc_topo_shard_count(const dc_topo_t *topo);
/** Name of region `i` ("" if out of range). */
DC_API const char *dc_topo_region_name(const dc_topo_t *topo, uint32_t i);

/** Fill *out (out->size set by the caller) for node `i`.  DC_ERR_INVALID
 *  if `i` is out of range. */
DC_API dc_status_t dc_topo_node(const dc_topo_t *topo, uint32_t i, dc_topo_node_info_t *out);

/** Index of the node named `name`; DC_ERR_NOT_FOUND if none. */
DC_API dc_status_t dc_topo_find(const dc_topo_t *topo, const char *name, uint32_t *out);

/**
 * Replace nominal rates by measured ones from `path`: either JSON
 * {"links":[{"from":A,"to":B,"bits_per_second":X}, ...]} (also accepted:
 * "src"/"dst"/"peer", "gbps" (Gbit/s), or "rate":"5gbit"; a top-level
 * array, or a sequence of objects one per line, such as
 * `deltacast perf link --json` results with a "from" added), or text lines
 * "A B RATE" ('#' comments).  A and B are node names, node addresses
 * (":port" optional) or region names.
 * Two nodes of one region: the measured value becomes both nodes' LAN
 * rate; two nodes of different regions: both nodes' WAN share; two regions:
 * the aggregate region-pair link.  Errors name the file and entry.
 */
DC_API dc_status_t dc_topo_apply_link_rates(dc_topo_t *topo, const char *path);

/** Expand a Slurm compressed host list into *hosts (an array of *n
 *  strings, freed with dc_slurm_hosts_free()).  Handles "a,b", ranges with
 *  zero padding "gpu-[001-004,010]", several bracket groups "a[1-2]-b[3-4]".
 *  Malformed lists: DC_ERR_INVALID naming the column. */
DC_API dc_status_t dc_slurm_expand(const char *list, char ***hosts, size_t *n);
/** Free what dc_slurm_expand() returned (NULL: no-op). */
DC_API void dc_slurm_hosts_free(char **hosts, size_t n);

/** Region of `host` under a map "PATTERN=REGION,..." (see
 *  dc_topo_from_slurm).  Writes at most `cap` bytes (NUL included). */
DC_API dc_status_t dc_topo_region_for_host(const char *map, const char *host,
                                           char *region, size_t cap);

/** Process placement from the launcher's environment. */
typedef struct dc_launch_info {
    size_t size;         /**< caller sets sizeof(dc_launch_info_t) */
    int32_t rank;        /**< -1 when unknown */
    int32_t world_size;  /**< -1 when unknown */
    int32_t local_rank;  /**< -1 when unknown */
    const char *source;  /**< "ompi", "pmi", "pmix", "slurm" or "none" (static) */
} dc_launch_info_t;

/** Read OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}, PMI_RANK/PMI_SIZE,
 *  PMIX_RANK, SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (in that order).
 *  DC_ERR_INVALID if a variable holds a non-number. */
DC_API dc_status_t dc_launch_from_env(dc_launch_info_t *out);

/** Local hardware: GPUs, NICs and which NIC is closest to each GPU. */
typedef struct dc_hw_gpu {
    const char *name;      /**< OS device name, e.g. "cuda0", "card1" */
    const char *pci;       /**< PCI bus id "0000:17:00.0"; "" if unknown */
    int32_t nic;           /**< index of the closest NIC, -1 when none */
    int32_t distance;      /**< hops up the tree to the common ancestor */
} dc_hw_gpu_t;

typedef struct dc_hw_nic {
    const char *name;      /**< "mlx5_0" (OpenFabrics) or "eth0" (network) */
    const char *kind;      /**< "openfabrics" or "network" */
    const char *pci;       /**< PCI bus id; "" if virtual */
} dc_hw_nic_t;

typedef struct dc_hw_info {
    size_t size;
    uint32_t n_gpus;
    const dc_hw_gpu_t *gpus;
    uint32_t n_nics;
    const dc_hw_nic_t *nics;
    uint32_t n_numa;       /**< NUMA nodes */
    uint32_t n_cores;      /**< physical cores */
} dc_hw_info_t;

/** Discover with hwloc (DC_ERR_UNSUPPORTED when built without).  *out is
 *  owned by the library (its arrays frozen, living as long as it); free it
 *  with dc_hw_free() (NULL: no-op).  Its size is set by the library. */
DC_API dc_status_t dc_hw_discover(dc_hw_info_t **out);
DC_API void dc_hw_free(dc_hw_info_t *hw);

/* --- the relay tree --- */

typedef enum dc_tree_edge_kind {
    DC_TREE_EDGE_KIND_LAN = 0, /**< inside a region: the node's transport */
    DC_TREE_EDGE_KIND_WAN = 1, /**< between regions: TCP, parallel streams */
} dc_tree_edge_kind_t;

typedef struct dc_tree_opts {
    size_t size;            /**< caller sets sizeof(dc_tree_opts_t) */
    uint64_t payload_bytes; /**< expected bytes of one version (0: 1 GB); guides
                                 the choice of chain vs tree */
    uint64_t chunk_bytes;   /**< frame payload size (0: 4 MiB) */
    uint32_t max_degree;    /**< largest fan-out inside a region (0: 4) */
    uint32_t max_stripes;   /**< most gateways one shard is split over (0: 8) */
} dc_tree_opts_t;

typedef struct dc_tree_stream {
    uint32_t shard;     /**< shard index */
    uint32_t stripe;    /**< chunks whose index in the shard % n_stripes == stripe */
    uint32_t n_stripes;
    uint32_t source;    /**< sender node index (root of this stream) */
} dc_tree_stream_t;

typedef struct dc_tree_edge {
    uint32_t parent, child; /**< node indices */
    uint32_t stream;        /**< stream index */
    uint32_t kind;          /**< dc_tree_edge_kind_t */
    double rate_bps;        /**< nominal rate of the hop (min of both ends) */
} dc_tree_edge_t;

/** One connection of a node: a peer and the streams it carries. */
typedef struct dc_tree_link {
    uint32_t peer;           /**< node index */
    uint32_t kind;           /**< dc_tree_edge_kind_t */
    uint32_t n_streams;
    const uint32_t *streams; /**< stream indices; the chunk filter of the link */
} dc_tree_link_t;

/** What node `i` does.  Arrays are owned by the tree. */
typedef struct dc_tree_node_view {
    size_t size;                  /**< caller sets sizeof(dc_tree_node_view_t) */
    uint32_t n_parents;           /**< links it receives on (one per distinct parent) */
    const dc_tree_link_t *parents;
    uint32_t n_children;          /**< links it sends on */
    const dc_tree_link_t *children;
    uint64_t need_shards;         /**< shards it applies locally */
} dc_tree_node_view_t;

/** Plan the tree of `topo` (borrowed; must outlive the tree).  `opts` may
 *  be NULL.  Deterministic: the same inputs give the same tree. */
DC_API dc_status_t dc_tree_plan(const dc_topo_t *topo, const dc_tree_opts_t *opts,
                                dc_tree_t **out);

/** A new tree without node `dead` (a receiver): the orphans of each of its
 *  streams attach to the dead node's parent in that stream (or, for a
 *  gateway, the first orphan takes its place); every other edge is kept.
 *  *changed (optional) gets the number of edges added plus removed.
 *  DC_ERR_INVALID if `dead` is a sender or already dead. */
DC_API dc_status_t dc_tree_replan(const dc_tree_t *tree, uint32_t dead, dc_tree_t **out,
                                  uint32_t *changed);
/** Free a tree (NULL: no-op); its arrays and views go with it. */
DC_API void dc_tree_free(dc_tree_t *tree);

/** The tree's streams and edges: counts, and frozen arrays owned by the
 *  tree (valid until dc_tree_free; NULL/0 for a NULL tree). */
DC_API uint32_t dc_tree_stream_count(const dc_tree_t *tree);
DC_API const dc_tree_stream_t *dc_tree_streams(const dc_tree_t *tree);
DC_API uint32_t dc_tree_edge_count(const dc_tree_t *tree);
DC_API const dc_tree_edge_t *dc_tree_edges(const dc_tree_t *tree);
/** 1 when node `i` was removed by dc_tree_replan(). */
DC_API int dc_tree_node_dead(const dc_tree_t *tree, uint32_t i);
/** Fill *out (out->size set by the caller) with what node `i` does: its
 *  links (frozen arrays owned by the tree) and the shards it applies.
 *  DC_ERR_INVALID if `i` is out of range or an argument is NULL. */
DC_API dc_status_t dc_tree_node(const dc_tree_t *tree, uint32_t i, dc_tree_node_view_t *out);

/** Stream carrying chunk `chunk` (index within its shard) of `shard`;
 *  UINT32_MAX if the shard has no receivers. */
DC_API uint32_t dc_tree_stream_of(const dc_tree_t *tree, uint32_t shard, uint64_t chunk);

/** dc_tree_print() formats. */
typedef enum dc_tree_format {
    DC_TREE_FORMAT_TEXT = 0, /**< per edge: parent -> child, stream, kind, rate,
                                  load, transport; then the expected bottleneck */
    DC_TREE_FORMAT_JSON = 1,
    DC_TREE_FORMAT_DOT = 2,  /**< graphviz */
} dc_tree_format_t;

/** Print the plan of `tree` to `fp` (borrowed) in format `fmt`.
 *  `payload_bytes` (0: omit loads) is the size of one version.  The LAN
 *  transport shown is the config key transport's.  DC_ERR_INVALID for a
 *  NULL argument or an unknown format; JSON only: DC_ERR_IO when writing
 *  fails, DC_ERR_NOMEM (text and DOT do not check the stream). */
DC_API dc_status_t dc_tree_print(const dc_tree_t *tree, uint64_t payload_bytes,
                                 dc_tree_format_t fmt, FILE *fp);

/* --- the flow-level simulator --- */

typedef struct dc_sim_opts {
    size_t size;            /**< caller sets sizeof(dc_sim_opts_t) */
    uint64_t params;        /**< parameters of the model (BF16: 2 bytes each) */
    double payload_ratio;   /**< encoded bytes / dense bytes (0: 0.0235) */
    double encode_GBps;     /**< dense GB/s one sender encodes (0: unlimited) */
    double apply_GBps;      /**< dense GB/s one receiver applies (0: unlimited) */
    uint64_t chunk_bytes;   /**< payload frame size for pipelining (0: 4 MiB) */
    /* (added in 0.2: a 0.1 caller's size ends here) */
    double cpu_cores;       /**< > 0: every node shares one pool of this many
                                 cores (e.g. a test machine running all nodes);
                                 encode_GBps and apply_GBps are then per core,
                                 a sender encodes on up to cpu_cores cores, a
                                 receiver applies on one.  0: each node has
                                 its own CPUs (encode/apply rates per node) */
} dc_sim_opts_t;

typedef struct dc_sim_result {
    size_t size;               /**< caller sets sizeof(dc_sim_result_t) */
    double predicted_seconds;  /**< last receiver done */
    uint64_t payload_bytes;    /**< encoded bytes of one version */
    uint64_t dense_bytes;      /**< params * 2 */
    uint32_t nodes;
    uint32_t events;           /**< simulation events processed */
    char bottleneck[128];      /**< e.g. "wan-out trn-003 (5 Gbit/s)" */
    char bottleneck_kind[16];  /**< "wan", "lan", "region-link", "encode", "apply", "cpu", "latency" */
    double lower_bound_seconds;/**< simple analytical lower bound, for sanity */
} dc_sim_result_t;

/** Flow-level discrete-event simulation of one refit over `tree`: max-min
 *  fair sharing of every node's LAN in/out, WAN in/out and region-pair
 *  links; chunk pipelining through relays (a child lags its parent by one
 *  chunk plus the hop latency); per-node encode and apply throughput. */
DC_API dc_status_t dc_sim_run(const dc_tree_t *tree, const dc_sim_opts_t *opts,
                              dc_sim_result_t *out);

/* ======================================================================== */
/*  Refit engine                                              [engine/]     */
/* ======================================================================== */

/*
 * One process of a refit job: the root (node 0 of the topology: the trainer,
 * which encodes each version chunk by chunk against the last committed one,
 * sends while it encodes, and runs the joint commit) or a receiver (a
 * rollout node: applies each chunk in place, verifies its digest, relays to
 * its children in the tree, acknowledges).  A version is committed only
 * when every receiver has applied and verified every chunk; the root's
 * commit record (state_dir/commit: version, baseline, checkpoint digest) is
 * then written durably with compare-and-set semantics, and only then does
 * the version become the baseline of the next.  Consecutive versions run
 * back to back.
 *
 * Recovery: a receiver keeps a per-chunk journal in its state directory; a
 * receiver restarted mid-version resumes, and chunks it may have half
 * applied are repaired with overwrites (an XOR is never applied twice).  A
 * receiver on an older baseline, or joining late, gets overwrites.  The
 * children of a relay that dies re-plan the tree without it and re-attach.
 * A receiver silent for abort_ms aborts the version: every receiver returns
 * to the baseline (XOR again, or restore its undo copy) or marks itself
 * for a dense refit; dc_refit_node_run() then returns DC_ERR_CANCELED on
 * the root.
 *
 * Several senders (a topology with trainer shards): every sender runs
 * dc_refit_node_run() with versions_dir (it may be the whole directory:
 * each reads and sends only the chunks of the shards it owns; a chunk
 * belongs to the shard holding its first canonical byte, floor(offset *
 * n_shards / total_bytes)).  Node 0 must be a sender: it coordinates
 * (joint commit, repairs, stats).  A receiver that needs some shards only
 * applies and acknowledges only their chunks; its other bytes are left
 * alone.
 *
 * Connections authenticate with the job secret (DELTACAST_SECRET_FILE /
 * DELTACAST_SECRET); the transport inside a region is
 * dc_refit_node_opts_t.transport, else the config key `transport`.
 */

/** A tensor of a receiver's model, in the checkpoint's canonical order
 *  (the order of the root's safetensors files by data offset). */
typedef struct dc_refit_tensor {
    const char *name;     /**< borrowed for the run */
    const char *dtype;    /**< safetensors spelling, e.g. "BF16" */
    uint64_t nelems;
} dc_refit_tensor_t;

/** Where a receiver keeps bytes [offset, offset + length) of a tensor's
 *  canonical bytes.  The segments of a tensor must cover it exactly once. */
typedef struct dc_refit_segment {
    const char *tensor;   /**< tensor name */
    uint64_t offset;      /**< canonical byte offset within the tensor */
    uint64_t length;      /**< bytes */
    void *ptr;            /**< host memory, borrowed for the run, written in place */
} dc_refit_segment_t;

typedef struct dc_refit_node_opts {
    size_t size;                /**< sizeof(dc_refit_node_opts_t) */
    const dc_topo_t *topo;      /**< borrowed; node 0 is the root */
    uint32_t rank;              /**< this process's node index */
    const char *state_dir;      /**< commit record and journal (created if absent) */
    /* senders (stats_path, last_version, dense, wait_ms: node 0 only) */
    const char *versions_dir;   /**< DIR/v0.safetensors .. DIR/vK.safetensors */
    uint32_t last_version;      /**< refit up to this version (0: every vN present) */
    int dense;                  /**< send whole checkpoints (overwrites), not deltas */
    const char *stats_path;     /**< per-version figures as JSON (NULL: none) */
    uint32_t wait_ms;           /**< wait for receivers to join (0: 60 s) */
    /* receiver: a checkpoint file updated in place, or memory */
    const char *weights_path;   /**< safetensors file (NULL: use tensors/segments) */
    const dc_refit_tensor_t *tensors;
    size_t n_tensors;
    const dc_refit_segment_t *segments;
    size_t n_segments;
    uint64_t initial_version;   /**< version held when state_dir has no record;
                                     DC_REFIT_VERSION_NONE: none (a cold
                                     start: the first version comes dense) */
    int durable;                /**< fsync journal transitions (files only) */
    /* both */
    uint32_t abort_ms;          /**< silent receiver aborts a version (0: 4 x timeout_ms) */
    uint64_t chunk_size;        /**< 0: config chunk_size; must match the root's */
    /* (added in 0.2: callers built against 0.1 pass the smaller size) */
    uint32_t memory;            /**< where segments point: DC_REFIT_MEM_HOST, or
                                     DC_REFIT_MEM_CUDA (device memory of a GPU:
                                     a receiver decodes and applies frames on
                                     the device, a sender diffs and models its
                                     chunks there and entropy-codes the lists
                                     on the host; what cannot go that way is
                                     staged through the host, logged; config
                                     device_encode, device_baseline).  Device
                                     work runs on CUDA's legacy default stream
                                     and is finished when a call returns:
                                     work on these buffers on other streams
                                     must be finished (synchronize them, e.g.
                                     torch.cuda.synchronize()) before a push
                                     reads them or a receiver writes them */
    const char *transport;      /**< this node's transport inside its region:
                                     "auto", "rdma", "ucx" or "tcp" (between
                                     regions: always tcp); NULL or "": config
                                     key transport.  Anything else:
                                     DC_ERR_INVALID.  Copied by sender_open */
} dc_refit_node_opts_t;

/** dc_refit_node_opts_t.initial_version of a receiver that holds no
 *  version yet (a rollout node started empty, or on random weights): when
 *  its state directory has no commit record, it marks itself for a dense
 *  refit, so every chunk of the first version it takes comes whole (an
 *  overwrite, never an XOR onto bytes it does not have); its log and its
 *  BEGIN event say "cold start: dense".  (added in 0.2.1) */
#define DC_REFIT_VERSION_NONE UINT64_MAX

/** dc_refit_node_opts_t.memory */
typedef enum dc_refit_mem { DC_REFIT_MEM_HOST = 0, DC_REFIT_MEM_CUDA = 1 } dc_refit_mem_t;

/**
 * Run one node until the job ends: on the root, until every version up to
 * last_version is committed (and BYE sent); on a receiver, until the root
 * says BYE.  Blocks the calling thread.  `opts` and what it points to are
 * borrowed for the run.  Returns DC_OK when the job ended; DC_ERR_CANCELED
 * when a version was aborted; DC_ERR_TIMEOUT when receivers did not join
 * in time; DC_ERR_INVALID for bad options (size not set, no topology or
 * state_dir, a rank not in the topology, an unknown memory or transport,
 * a sender without versions_dir, a receiver without weights);
 * DC_ERR_UNSUPPORTED for a config from a newer header with fields set, or
 * CUDA memory without a usable GPU; else the failure of the job (I/O,
 * authentication, a peer...).
 */
DC_API dc_status_t dc_refit_node_run(const dc_refit_node_opts_t *opts);

/** What one version of a refit took (dc_refit_sender_push). */
typedef struct dc_refit_version_stats {
    size_t size;                /**< sizeof(dc_refit_version_stats_t), set by the caller */
    uint64_t version;
    double seconds;             /**< push to joint commit */
    double encode_s;            /**< encoder thread time (all threads) */
    double transfer_s;          /**< first frame sent to last receiver's ack */
    double apply_s;             /**< the slowest receiver's apply time */
    double commit_s;            /**< last ack to the commit record written */
    uint64_t payload_bytes;     /**< frame payloads sent (each once per tree edge) */
    uint64_t repair_bytes;      /**< of which repairs (NEED, stalls, re-joins) */
    uint64_t dense_bytes;       /**< the checkpoint's size */
    uint64_t frames;
} dc_refit_version_stats_t;

/**
 * A sender whose weights live in the caller's memory (a trainer embedding
 * deltacast).  dc_refit_sender_open() takes opts with topo, rank (a sender of
 * the topology: node 0, the coordinator, or a trainer shard), state_dir,
 * tensors (every tensor of the model, in canonical order) and segments
 * that place the weights of the committed version: the version the
 * receivers hold (the state directory's commit record, else
 * initial_version).  A shard's segments need cover only the bytes it sends
 * (dc_refit_sender_ranges); the coordinator asks a chunk's owner for its
 * repairs.  The sender copies them: it keeps its own baseline (host memory
 * of the bytes it sends).  A shard (not node 0) writes its own commit
 * record in state_dir at each COMMIT, and refuses a BEGIN whose baseline
 * is not the version it holds (it would send wrong deltas).  Every shard pushes each version; a version
 * starts on a shard when both its push and the coordinator's BEGIN are
 * there, and its push returns at the joint commit.  The node runs on a thread of its own from then on:
 * receivers join while the trainer trains (wait_ms bounds the wait,
 * counted from open).  opts->topo is borrowed until close (the rest is
 * copied).  versions_dir, last_version and weights_path must be unset; dense, stats_path, abort_ms, chunk_size apply as for
 * dc_refit_node_run().
 */
typedef struct dc_refit_sender dc_refit_sender_t;
DC_API dc_status_t dc_refit_sender_open(const dc_refit_node_opts_t *opts,
                                        dc_refit_sender_t **out);

/**
 * Refit the next version (committed + 1) from the weights placed by
 * segments (host memory; NULL: the segments given to open, updated in
 * place by the trainer).  The segments must cover what the sender sends exactly
 * once and stay unchanged until the call returns.  Blocks until every
 * receiver applied and verified the version (a receiver holding it,
 * dc_refit_receiver_hold, delays that up to the root's config
 * hold_timeout_ms) and the commit record was
 * written (DC_OK; it is then the baseline of the next push), or the
 * version was aborted (DC_ERR_CANCELED: receivers are back at the
 * baseline or marked for a dense refit) or the job failed; after a
 * failure every later push fails the same way.  A shard's close() waits
 * for the coordinator's BYE (close node 0 first or alongside) for up to
 * twice timeout_ms.  stats (may be NULL; set
 * its size) receives the version's figures.
 */
DC_API dc_status_t dc_refit_sender_push(dc_refit_sender_t *s, const dc_refit_segment_t *segments,
                                        size_t n_segments, dc_refit_version_stats_t *stats);

/**
 * The canonical byte ranges sender opts->rank sends (its chunks in the
 * job's plan, adjacent ones merged): what its segments must cover when it
 * is one of several senders (a trainer shard).  Needs opts's topo, rank,
 * tensors and chunk_size (0: the config key chunk_size).  Writes up to cap ranges as
 * segments with ptr NULL (tensor names borrowed from opts->tensors) and
 * their count to *n; DC_ERR_NOMEM (with *n set) when cap is too small.
 */
DC_API dc_status_t dc_refit_sender_ranges(const dc_refit_node_opts_t *opts,
                                          dc_refit_segment_t *out, size_t cap, size_t *n);

/** End the job (BYE to every receiver), wait for the node's thread, free.
 *  Returns the job's failure, if any. */
DC_API dc_status_t dc_refit_sender_close(dc_refit_sender_t *s);

/**
 * A receiver whose weights live in the caller's memory (a rollout engine
 * embedding deltacast), or in a checkpoint file: dc_refit_receiver_open()
 * takes opts with topo, rank (a receiver of the topology), state_dir, and
 * either tensors + segments (host memory, or memory = DC_REFIT_MEM_CUDA
 * for device memory) or weights_path, as dc_refit_node_run() does.  The
 * node runs on a thread of its own from then on (open returns once the
 * weights are open and it serves: joining the job, relaying to its
 * children, applying versions in place as they come); opts->topo and the
 * segments' memory are borrowed until close (the rest is copied).
 * versions_dir, last_version, dense and stats_path must be unset.
 *
 * Events (dc_refit_event_t) tell the caller what happens to its weights:
 * a version begins, is committed (the weights are now that version,
 * byte-exact, its checkpoint digest given), is aborted (the weights are
 * back at the baseline, or marked for a dense refit), and the job ended.
 * They are queued (dc_refit_receiver_wait), and handed to a callback
 * first once one is set (dc_refit_receiver_on_event).
 *
 * Hold (staged apply, for asynchronous RL): a rollout engine that is
 * generating must not have its weights written under it.  After
 * dc_refit_receiver_hold() returns, a version that arrives is received,
 * relayed to the children, CRC-checked and staged (its frames' compact
 * payloads kept in memory: sparse, never a dense copy) but not applied:
 * the weights stay byte-for-byte as they are, the root's joint commit (and
 * so the trainer's dc_refit_sender_push) waits.  The node tells the root
 * it is alive and holding (the root logs "receiver N holds version V
 * staged"), so it is not aborted as silent; after the root's config
 * hold_timeout_ms (default 10 min) the version is aborted, and the root's
 * push fails with a reason naming the holding receiver.  An abort while
 * staged has nothing to undo (staged frames are dropped); a process that
 * dies while holding restarts without a hold and takes the version as a
 * restarted receiver does (its journal: nothing of the staged chunks was
 * applied).  dc_refit_receiver_release() applies what is staged, checks
 * every chunk's digest, acknowledges, and the commit proceeds.
 *
 * Thread-safety: every call but close may come from any thread, also
 * while another thread waits in dc_refit_receiver_wait.
 */
typedef struct dc_refit_receiver dc_refit_receiver_t;

/** dc_refit_event_t.type */
typedef enum dc_refit_event_type {
    DC_REFIT_EVENT_BEGIN = 1,     /**< version `version` begins from `baseline` */
    DC_REFIT_EVENT_COMMITTED = 2, /**< the weights are `version` (checkpoint `digest`) */
    DC_REFIT_EVENT_ABORTED = 3,   /**< `version` aborted: back at `baseline` (or, with
                                       DC_REFIT_EVENT_F_DENSE, marked for a dense refit) */
    DC_REFIT_EVENT_ENDED = 4      /**< the job ended with `status` (the last event) */
} dc_refit_event_type_t;

/** dc_refit_event_t.flags */
enum {
    DC_REFIT_EVENT_F_DENSE = 1, /**< BEGIN: every chunk comes whole (a cold start, a node
                                     marked for a dense refit, a dense job); ABORTED:
                                     bytes unknown, marked for a dense refit */
    DC_REFIT_EVENT_F_HELD = 2,  /**< BEGIN: arrives while held: staged until release */
    DC_REFIT_EVENT_F_COLD = 4   /**< BEGIN: cold start (DC_REFIT_VERSION_NONE) */
};

/** One thing that happened to a receiver's weights. */
typedef struct dc_refit_event {
    size_t size;          /**< sizeof(dc_refit_event_t), set by the caller of wait */
    uint32_t type;        /**< dc_refit_event_type_t */
    uint32_t flags;       /**< DC_REFIT_EVENT_F_* */
    uint64_t version;     /**< the version begun, committed or aborted; ENDED: the
                               committed version */
    uint64_t baseline;    /**< BEGIN: its baseline; ABORTED: the version held again */
    uint8_t digest[16];   /**< COMMITTED: checkpoint digest (as dc_refit_committed) */
    dc_status_t status;   /**< ENDED: the job's result (DC_OK after the root's BYE,
                               DC_ERR_CANCELED after cancel, else the failure) */
    char message[256];    /**< one line, e.g. "cold start: dense", the failure */
} dc_refit_event_t;

/** Called on the node's thread, one event at a time: it must return soon
 *  (the node relays and applies nothing meanwhile) and must not call
 *  close or wait; hold, release, cancel, version and stats are fine, and
 *  a hold or cancel it asks for takes effect before the node takes
 *  anything more (hold on COMMITTED: the weights stay exactly that
 *  version, with no race against the next one).  Returns nonzero to have
 *  the event queued for dc_refit_receiver_wait as well, 0 when it took
 *  it. */
typedef int (*dc_refit_event_fn)(const dc_refit_event_t *ev, void *user);

/** Start a receiver (above).  Returns DC_OK and *out; DC_ERR_INVALID for
 *  bad options (as dc_refit_node_run, or a sender's rank); the failure
 *  when the node could not start (weights, listening address). */
DC_API dc_status_t dc_refit_receiver_open(const dc_refit_node_opts_t *opts,
                                          dc_refit_receiver_t **out);

/** Events from now on go to fn (on the node's thread), and to the queue
 *  only when fn returns nonzero; the events queued before stay queued.
 *  fn NULL: back to the queue alone. */
DC_API dc_status_t dc_refit_receiver_on_event(dc_refit_receiver_t *r, dc_refit_event_fn fn,
                                              void *user);

/** The next event (set ev->size), waiting up to timeout_ms (< 0: no
 *  limit).  DC_OK; DC_ERR_TIMEOUT when none came; DC_ERR_NOT_FOUND once
 *  ENDED was taken and nothing more will come. */
DC_API dc_status_t dc_refit_receiver_wait(dc_refit_receiver_t *r, int timeout_ms,
                                          dc_refit_event_t *ev);

/** Which version the weights are: *version and digest (may be NULL) the
 *  committed one and its checkpoint digest (zero when the state directory
 *  has no record: initial_version), *in_flight (may be NULL) the version
 *  being received (0: none).  DC_ERR_NOT_FOUND (in_flight still set) while
 *  it holds none yet (a cold start before its first commit). */
DC_API dc_status_t dc_refit_receiver_version(dc_refit_receiver_t *r, uint64_t *version,
                                             uint8_t digest[16], uint64_t *in_flight);

/** Hold (above): returns once the node writes nothing more into the
 *  weights (a chunk being applied is finished first), or the node ended.
 *  Holding twice is holding. */
DC_API dc_status_t dc_refit_receiver_hold(dc_refit_receiver_t *r);

/** Release a hold: returns once what was staged is applied and checked
 *  (the acks are on their way; COMMITTED follows from the root). */
DC_API dc_status_t dc_refit_receiver_release(dc_refit_receiver_t *r);

/** Leave the job now (the root sees the node gone, as a kill: the version
 *  in flight, if any, is aborted for everyone or re-joined later).  A
 *  chunk being applied is finished first, and the journal in state_dir
 *  records what was applied: a receiver opened later on it resumes.
 *  Returns once the node stopped; its ENDED says DC_ERR_CANCELED. */
DC_API dc_status_t dc_refit_receiver_cancel(dc_refit_receiver_t *r);

/** Free the receiver: after the job ended (ENDED: the root's BYE), or
 *  canceling it first.  Returns the job's result (DC_ERR_CANCELED when it
 *  was canceled).  Wait for ENDED first to let the job end by itself. */
DC_API dc_status_t dc_refit_receiver_close(dc_refit_receiver_t *r);

/** What a receiver did so far (dc_refit_receiver_stats). */
typedef struct dc_refit_receiver_stats {
    size_t size;                /**< sizeof(dc_refit_receiver_stats_t), set by the caller */
    uint64_t versions_committed;/**< versions committed here */
    uint64_t versions_aborted;
    uint64_t bytes_received;    /**< from the parents (frames and control), all versions */
    double apply_s;             /**< applying frames in place (and their digests) */
    uint64_t repairs;           /**< chunks asked for again (overwrites) */
    uint64_t staged_bytes;      /**< frame bytes staged now (held) */
    int held;                   /**< a hold is in effect */
    dc_status_t last_status;    /**< the job's result once ENDED, else DC_OK */
} dc_refit_receiver_stats_t;

DC_API dc_status_t dc_refit_receiver_stats(dc_refit_receiver_t *r,
                                           dc_refit_receiver_stats_t *stats);

/**
 * The commit record of a state directory: the committed version, its
 * baseline and the checkpoint digest (XXH3-128 over the chunk digests,
 * written as 16 bytes little-endian (lo, hi): the form of
 * dc_checkpoint_digest(), so the two compare with memcmp).  version,
 * baseline and digest may each be NULL.  Returns DC_OK, DC_ERR_NOT_FOUND
 * when nothing was committed yet, DC_ERR_FORMAT for a damaged record,
 * DC_ERR_IO, DC_ERR_INVALID (state_dir NULL).  Outputs are written only on
 * success.
 */
DC_API dc_status_t dc_refit_committed(const char *state_dir, uint64_t *version,
                                      uint64_t *baseline, uint8_t digest[16]);

/* ======================================================================== */
/*  Deprecated names of 0.1 (kept for 0.2 only; removed in 0.3)             */
/* ======================================================================== */

/* Define DC_NO_DEPRECATED to hide them (the library's own build does). */
#ifndef DC_NO_DEPRECATED
typedef dc_tree_opts_t dc_tree_options_t;             /**< use dc_tree_opts_t */
typedef dc_sim_opts_t dc_sim_params_t;                /**< use dc_sim_opts_t */
typedef dc_refit_node_opts_t dc_refit_node_config_t;  /**< use dc_refit_node_opts_t */
#define DC_LAYOUT_SIMD DC_DELTA_LAYOUT_SIMD
#define DC_LAYOUT_COMPACT DC_DELTA_LAYOUT_COMPACT
#define DC_TOPO_RECEIVER DC_TOPO_ROLE_RECEIVER
#define DC_TOPO_SENDER DC_TOPO_ROLE_SENDER
#define DC_EDGE_LAN DC_TREE_EDGE_KIND_LAN
#define DC_EDGE_WAN DC_TREE_EDGE_KIND_WAN
#define DC_TREE_TEXT DC_TREE_FORMAT_TEXT
#define DC_TREE_JSON DC_TREE_FORMAT_JSON
#define DC_TREE_DOT DC_TREE_FORMAT_DOT
#endif /* DC_NO_DEPRECATED */

#ifdef __cplusplus
}
#endif

#endif /* DELTACAST_H */
