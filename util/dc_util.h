/*
 * dc_util.h - internal helpers shared by every layer (lowest layer).
 *
 * Not installed.  May include only the public header, libc and dc_config.h.
 */
#ifndef DC_UTIL_H
#define DC_UTIL_H

#include "dc_config.h"
#include "deltacast.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* --- errors ------------------------------------------------------------- */

/** Record `st` and a formatted detail for the calling thread; returns `st`
 *  so that callers can write `return dc_error(DC_ERR_FORMAT, "...")`. */
dc_status_t dc_error(dc_status_t st, const char *fmt, ...) DC_PRINTF(2, 3);

/** Like dc_error(), appending ": strerror(errnum)". */
dc_status_t dc_error_errno(dc_status_t st, int errnum, const char *fmt, ...)
    DC_PRINTF(3, 4);

/** Prefix the current thread's detail with "prefix: " (keeps its status). */
void dc_error_prefix(const char *fmt, ...) DC_PRINTF(1, 2);

/** Map an errno value to the closest status (ECONNRESET -> DC_ERR_RESET...). */
dc_status_t dc_status_from_errno(int errnum);

/* --- logging macros ------------------------------------------------------ */

#define DC_LOG_ERROR(...) dc_log(DC_LOG_LEVEL_ERROR, __VA_ARGS__)
#define DC_LOG_WARN(...)  dc_log(DC_LOG_LEVEL_WARN, __VA_ARGS__)
#define DC_LOG_INFO(...)                                                      \
    do {                                                                      \
        if (dc_log_get_level() >= DC_LOG_LEVEL_INFO)                          \
            dc_log(DC_LOG_LEVEL_INFO, __VA_ARGS__);                           \
    } while (0)
#define DC_LOG_DEBUG(...)                                                     \
    do {                                                                      \
        if (dc_log_get_level() >= DC_LOG_LEVEL_DEBUG)                         \
            dc_log(DC_LOG_LEVEL_DEBUG, __VA_ARGS__);                          \
    } while (0)

/* --- public structs that grow (util/struct.c) ------------------------------ */

/** The `size` rule of include/deltacast.h for the public struct at `p`
 *  (first field `size_t size`): DC_OK when min <= size, and any bytes
 *  beyond `cur` (this library's sizeof) are zero; else DC_ERR_INVALID
 *  (size too small: not set) or DC_ERR_UNSUPPORTED (a newer caller set
 *  fields this library does not know).  `what` names the struct in the
 *  error ("refit: config"). */
dc_status_t dc_struct_check(const void *p, size_t min, size_t cur, const char *what);

/** An input struct: dc_struct_check(), then copy it into `local` (`cur`
 *  bytes): the fields an older caller lacks are zero (their default), and
 *  local's size is `cur`. */
dc_status_t dc_struct_in(void *local, size_t cur, const void *in, size_t min, const char *what);

/** An output struct (checked with dc_struct_check() first): copy the
 *  fields of `local` the caller has room for (min(out->size, cur) bytes)
 *  into `out`, and set out->size to that count. */
void dc_struct_out(void *out, const void *local, size_t cur);

/* --- environment (env.c) --------------------------------------------------- */

/** A DELTACAST_* variable read outside the config table. */
typedef struct dc_env_var {
    const char *name;
    const char *doc; /* who reads it, for what */
} dc_env_var_t;
/** The variables read outside the config table ({NULL, NULL} ends it). */
const dc_env_var_t *dc_env_extra_table(void);
/** 1 when `name` is DELTACAST_<config key> or in dc_env_extra_table(). */
int dc_env_known(const char *name);
/** The known variable nearest to `name` by edit distance into out, or
 *  NULL (out "") when none is near enough to be a typo of it. */
const char *dc_env_closest(const char *name, char *out, size_t len);
/** Once per process: a warning for each DELTACAST_* variable of the
 *  environment that no code reads, naming the closest known one. */
void dc_env_check(void);

/* --- small helpers ------------------------------------------------------- */

#define DC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define DC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DC_LIKELY(x) __builtin_expect(!!(x), 1)

/** Monotonic clock in nanoseconds / seconds. */
uint64_t dc_now_ns(void);
double dc_now_s(void);

/** Overflow-checked arithmetic: return false on overflow. */
static inline bool dc_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool dc_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* Little-endian loads and stores (the wire and file formats are LE). */
static inline uint16_t dc_load_le16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v; /* x86-64 and aarch64 Linux are little-endian */
}
static inline uint32_t dc_load_le32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t dc_load_le64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void dc_store_le16(void *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void dc_store_le32(void *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void dc_store_le64(void *p, uint64_t v) { memcpy(p, &v, 8); }

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "deltacast assumes a little-endian host"
#endif

/** Read/write exactly `len` bytes (retrying short transfers and EINTR).
 *  Return DC_OK, DC_ERR_RESET on EOF before `len`, or the errno status. */
dc_status_t dc_read_full(int fd, void *buf, size_t len);
dc_status_t dc_write_full(int fd, const void *buf, size_t len);
/** pread(2) of exactly `len` bytes at `off` (retrying short reads and
 *  EINTR); DC_ERR_RESET at end of file before `len`. */
dc_status_t dc_pread_full(int fd, void *buf, size_t len, uint64_t off);

/** fstat(2) / stat(2), whose struct stat MemorySanitizer builds see as
 *  written (clang 14's runtime intercepts neither on glibc >= 2.33, where
 *  they are functions of their own: without this, every read of the result
 *  would be reported). */
struct stat;
int dc_fstat(int fd, struct stat *sb);
int dc_stat(const char *path, struct stat *sb);

/** Allocate every block of [0, len) of the open, writable file `fd`
 *  without changing a byte of it (fallocate(2) mode 0; where the file
 *  system has no fallocate, every hole lseek(SEEK_HOLE) finds is written
 *  with the zeros it reads as).  Call it before a shared writable map of the
 *  file is written: a store into a hole the file system cannot back is
 *  SIGBUS, this is DC_ERR_IO naming `path` ("the file system is full").
 *  A copy-on-write file system (btrfs, reflinked XFS) may still need new
 *  blocks for each write: this cannot reserve those. */
dc_status_t dc_file_reserve(int fd, const char *path, uint64_t len);

/** dc_file_reserve's way where the file system has no fallocate (called
 *  directly by its test): write zeros into every hole of [0, len) that
 *  lseek(SEEK_HOLE) reports, each write checked. */
dc_status_t dc_file_fill_holes(int fd, const char *path, uint64_t len);

/** 1 when lseek(SEEK_HOLE) finds a hole in [0, len) of `fd` (on tmpfs,
 *  pages fallocate reserved but nobody wrote yet still read as holes). */
int dc_file_has_holes(int fd, uint64_t len);

/** Map `len` bytes of `fd` read-only (MAP_PRIVATE, MAP_POPULATE when
 *  `populate`); munmap() the result.  A sparse file on tmpfs is read into
 *  anonymous memory instead (a load from a hole of a tmpfs file allocates a
 *  page: SIGBUS on a full file system; pread returns zeros).  *out is set
 *  only on success; errors name `path`. */
dc_status_t dc_file_map_read(int fd, const char *path, size_t len, int populate, void **out);

/** The last line where reservation cannot help (a copy-on-write file
 *  system; a file truncated or rewritten under its map): maps noted here
 *  (dc_file_map_note, up to 64 at a time; dc_file_map_forget before
 *  munmap) are named by a SIGBUS handler that dc_file_sigbus_install()
 *  sets (the command does, at start; the library never touches signals):
 *  one line on stderr, "deltacast: SIGBUS at byte N of 'PATH' (mapped):
 *  ...", then the previous action runs as before (the process ends). */
void dc_file_map_note(const void *p, size_t len, const char *path);
void dc_file_map_forget(const void *p);
dc_status_t dc_file_sigbus_install(void);

/** mkdir -p: `path` and every missing parent, mode 0755; DC_OK when it
 *  exists as a directory. */
dc_status_t dc_mkdirs(const char *path);

/** Number of online CPUs (>= 1). */
int dc_cpu_count(void);

/** Format a byte count as "1.50 GiB" into buf (returns buf). */
const char *dc_fmt_bytes(uint64_t bytes, char *buf, size_t len);

#endif /* DC_UTIL_H */
