/*
 * safetensors.h - reading and writing the safetensors checkpoint format.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON header
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {"k": "v", ...}} padded with spaces to a multiple of 8,
 * then the contiguous data region; offsets are relative to the data start.
 *
 * Every byte of a file is hostile: dc_st_open() validates the whole header
 * (size limit, JSON syntax, known dtypes, shape x dtype size == byte range,
 * ranges in bounds, non-overlapping, covering the data region) before any
 * pointer is handed out.  Files are mmap'd; nothing large is read to the heap.
 */
#ifndef DC_SAFETENSORS_H
#define DC_SAFETENSORS_H

#include "util/dc_util.h"

/* Largest header accepted (safetensors itself uses 100 MB). */
#define DC_ST_MAX_HEADER (100u * 1024u * 1024u)
#define DC_ST_MAX_NDIM 8

typedef enum dc_dtype {
    DC_DTYPE_BOOL = 0,
    DC_DTYPE_U8,
    DC_DTYPE_I8,
    DC_DTYPE_F8_E4M3,   /* "F8_E4M3" */
    DC_DTYPE_F8_E5M2,   /* "F8_E5M2" */
    DC_DTYPE_I16,
    DC_DTYPE_U16,
    DC_DTYPE_F16,
    DC_DTYPE_BF16,
    DC_DTYPE_I32,
    DC_DTYPE_U32,
    DC_DTYPE_F32,
    DC_DTYPE_I64,
    DC_DTYPE_U64,
    DC_DTYPE_F64,
    DC_DTYPE_COUNT
} dc_dtype_t;

/** Bytes per element (1, 2, 4 or 8). */
size_t dc_dtype_size(dc_dtype_t dt);
/** The safetensors spelling, e.g. "BF16". */
const char *dc_dtype_name(dc_dtype_t dt);
/** Parse a safetensors dtype string; DC_ERR_FORMAT if unknown. Accepts
 *  lower case for CLI use ("bf16"). */
dc_status_t dc_dtype_parse(const char *name, dc_dtype_t *out);

/** One tensor as described by a header.  Owned by its file/writer. */
typedef struct dc_st_tensor {
    const char *name;
    dc_dtype_t dtype;
    int ndim;                      /* 0 for a scalar */
    uint64_t shape[DC_ST_MAX_NDIM];
    uint64_t nelems;               /* product of shape (1 for a scalar) */
    uint64_t begin, end;           /* byte range relative to the data region */
} dc_st_tensor_t;

typedef struct dc_st_file dc_st_file_t;

enum {
    DC_ST_READ = 0,
    DC_ST_WRITABLE = 1, /* map MAP_SHARED read-write (in-place apply); populated */
    DC_ST_POPULATE = 2, /* fill the page tables at open (MAP_POPULATE) */
};

/** Open, mmap and validate `path`.  On failure *out is untouched and
 *  dc_last_error() names the file and the first problem found. */
dc_status_t dc_st_open(const char *path, int flags, dc_st_file_t **out);
void dc_st_close(dc_st_file_t *f);

/** Validate a whole file image held in memory (borrowed: `buf` must outlive
 *  the handle; nothing is copied or unmapped).  `name` is used in messages
 *  (NULL: "<memory>").  For fuzzing and for headers received over the wire.
 *  dc_st_sync() is refused on such a handle. */
dc_status_t dc_st_open_mem(const void *buf, size_t len, const char *name, dc_st_file_t **out);
/** The path given to dc_st_open (or the name given to dc_st_open_mem). */
const char *dc_st_path(const dc_st_file_t *f);

/** Tensors, ordered by data offset. i < dc_st_count(). */
size_t dc_st_count(const dc_st_file_t *f);
const dc_st_tensor_t *dc_st_tensor(const dc_st_file_t *f, size_t i);
/** NULL when absent. */
const dc_st_tensor_t *dc_st_find(const dc_st_file_t *f, const char *name);

/** Pointer to a tensor's bytes in the mapping (writable only with
 *  DC_ST_WRITABLE; valid until dc_st_close). */
uint8_t *dc_st_data(const dc_st_file_t *f, const dc_st_tensor_t *t);

/** The raw header: the 8 length bytes + JSON + padding, exactly as in the
 *  file (so a writer can reproduce a file byte for byte). */
const uint8_t *dc_st_header_raw(const dc_st_file_t *f, size_t *len);
/** "__metadata__" as compact JSON text, or NULL when absent. */
const char *dc_st_metadata(const dc_st_file_t *f);
/** Whole file: size, base of the mapping, start of the data region. */
uint64_t dc_st_file_size(const dc_st_file_t *f);
const uint8_t *dc_st_map(const dc_st_file_t *f);
uint64_t dc_st_data_offset(const dc_st_file_t *f);
/** msync a writable mapping (in-place apply durability). */
dc_status_t dc_st_sync(dc_st_file_t *f);

/* --- writing ------------------------------------------------------------- */

/** A tensor to write: name, dtype, shape.  Borrowed for the call. */
typedef struct dc_st_desc {
    const char *name;
    dc_dtype_t dtype;
    int ndim;
    uint64_t shape[DC_ST_MAX_NDIM];
} dc_st_desc_t;

typedef struct dc_st_writer dc_st_writer_t;

/**
 * Build the raw header (8 length bytes + JSON + space padding) that
 * dc_st_writer_create() writes, byte-identical to the reference
 * implementation's serializer for the same tensor order: compact JSON,
 * "__metadata__" first, then {"dtype","shape","data_offsets"} per tensor.
 * *out is malloc'd (caller frees); *data_size (may be NULL) receives the
 * data region size.  DC_ERR_INVALID for bad descriptors (duplicate or
 * non-UTF-8 names, bad dtype/ndim, overflow) or metadata that is not a JSON
 * object of strings.
 */
dc_status_t dc_st_header_build(const dc_st_desc_t *descs, size_t n, const char *metadata_json,
                               uint8_t **out, size_t *out_len, uint64_t *data_size);

/**
 * Start writing `path` (created via a temporary file in the same directory,
 * renamed into place by dc_st_writer_finish, so a failure never leaves a
 * half-written file).  The header is computed from `descs` (tensors laid out
 * in the given order, contiguous) and `metadata_json` (a JSON object of
 * strings, or NULL).  Data is then appended in order with
 * dc_st_writer_write(); finish checks that exactly the right number of bytes
 * arrived, fsyncs and renames.
 */
dc_status_t dc_st_writer_create(const char *path, const dc_st_desc_t *descs, size_t n,
                                const char *metadata_json, dc_st_writer_t **out);
/** Like create, but writes `header_raw` verbatim (as from dc_st_header_raw of
 *  another file; validated) and expects `data_size` data bytes. */
dc_status_t dc_st_writer_create_raw(const char *path, const uint8_t *header_raw,
                                    size_t header_len, uint64_t data_size,
                                    dc_st_writer_t **out);
dc_status_t dc_st_writer_write(dc_st_writer_t *w, const void *buf, size_t len);
/** Complete and rename into place; frees w in all cases. */
dc_status_t dc_st_writer_finish(dc_st_writer_t *w);
/** Discard the temporary file; frees w. */
void dc_st_writer_abort(dc_st_writer_t *w);

#endif /* DC_SAFETENSORS_H */
