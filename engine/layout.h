/*
 * layout.h - chunk plan of a checkpoint and placement maps (engine-internal).
 *
 * A layout cuts every tensor of a checkpoint (in data-offset order) into
 * chunks of at most `chunk_size` dense bytes (a multiple of the element
 * size); chunk numbers are global, tensor after tensor:
 *
 *     tensor 0: [c0 | c1 | c2 ]  tensor 1: [c3]  tensor 2: [c4 | c5]
 *
 * The layout id (XXH3-64 of names, dtypes, shapes and the chunk size) names
 * the plan: a receiver whose layout id differs cannot take this job's chunks.
 *
 * A placement map says where a receiver keeps each tensor's canonical bytes:
 * a list of segments (tensor, canonical byte offset, length) -> local
 * pointer.  Chunks are read and written through it; a chunk that spans
 * several segments is gathered into / scattered from a scratch buffer.
 */
#ifndef DC_ENGINE_LAYOUT_H
#define DC_ENGINE_LAYOUT_H

#include "kernels/kern.h"
#include "kernels/safetensors.h"
#include "util/dc_util.h"

typedef struct dc_layout_tensor {
    char *name;
    dc_dtype_t dtype;
    uint32_t esize;        /* bytes per element */
    uint64_t nbytes;
    uint64_t nelems;
    uint32_t first_chunk;  /* global index of its first chunk */
    uint32_t nchunks;      /* 0 for an empty tensor */
} dc_layout_tensor_t;

typedef struct dc_layout_chunk {
    uint32_t tensor;
    uint32_t index;        /* chunk number within the tensor */
    uint64_t offset;       /* canonical byte offset within the tensor */
    uint64_t len;          /* bytes */
} dc_layout_chunk_t;

typedef struct dc_layout {
    uint32_t ntensors;
    uint32_t nchunks;
    uint64_t chunk_size;
    uint64_t total_bytes;
    uint64_t max_chunk;    /* largest chunk in bytes */
    uint64_t id;
    dc_layout_tensor_t *tensors;
    dc_layout_chunk_t *chunks;
} dc_layout_t;

/** Plan the chunks of a checkpoint's tensors. */
dc_status_t dc_layout_from_st(const dc_st_file_t *f, uint64_t chunk_size, dc_layout_t **out);

/** Plan from a list (name, dtype, nelems); for library users. */
typedef struct dc_layout_desc {
    const char *name;
    dc_dtype_t dtype;
    uint64_t nelems;
} dc_layout_desc_t;
dc_status_t dc_layout_from_list(const dc_layout_desc_t *d, size_t n, uint64_t chunk_size,
                                dc_layout_t **out);
void dc_layout_free(dc_layout_t *l);

/* --- placement ------------------------------------------------------------- */

typedef struct dc_place_seg {
    uint32_t tensor;
    uint64_t offset;       /* canonical byte offset within the tensor */
    uint64_t len;
    uint8_t *ptr;          /* local bytes (borrowed) */
} dc_place_seg_t;

typedef struct dc_place {
    const dc_layout_t *layout; /* borrowed */
    dc_place_seg_t *segs;      /* sorted by (tensor, offset) */
    size_t nsegs, cap;
    int dev;                   /* segments are CUDA device memory (set after init):
                                  no chunk pointer, reads and writes are copies
                                  across PCIe (kernels/kern_cuda.h) */
} dc_place_t;

dc_status_t dc_place_init(dc_place_t *p, const dc_layout_t *l);
void dc_place_fini(dc_place_t *p);
/** Add a segment; checks it is inside the tensor.  Overlaps are refused by
 *  dc_place_finish(). */
dc_status_t dc_place_add(dc_place_t *p, uint32_t tensor, uint64_t offset, uint64_t len,
                         void *ptr);
/** Sort and check that the segments cover every tensor exactly once. */
dc_status_t dc_place_finish(dc_place_t *p);
/** Sort and check that no two segments overlap and that every chunk c with
 *  want[c] set is covered (a shard's placement: other bytes may be absent;
 *  only wanted chunks may then be read or written). */
dc_status_t dc_place_finish_chunks(dc_place_t *p, const uint8_t *want);
/** Placement of a whole safetensors mapping (one segment per tensor). */
dc_status_t dc_place_from_st(dc_place_t *p, const dc_layout_t *l, const dc_st_file_t *f);

/** Pointer to the chunk's bytes when they are contiguous in one segment of
 *  host memory, else NULL (use dc_place_read/write through a scratch
 *  buffer). */
uint8_t *dc_place_chunk_ptr(const dc_place_t *p, uint32_t chunk);
/** The device pointer of the chunk's bytes when the placement is device
 *  memory and the chunk lies in one segment, else NULL (engine/devpath.c:
 *  device kernels take it; the CPU must never dereference it). */
uint8_t *dc_place_chunk_dev_ptr(const dc_place_t *p, uint32_t chunk);
/** Copy chunk bytes out of / into the placement (len = chunk length).
 *  Fails only for device memory (a CUDA error). */
dc_status_t dc_place_read(const dc_place_t *p, uint32_t chunk, uint8_t *dst);
dc_status_t dc_place_write(const dc_place_t *p, uint32_t chunk, const uint8_t *src);
/** A device placement's chunk gathered into device memory at dst (device
 *  to device, segment by segment: nothing crosses PCIe). */
dc_status_t dc_place_read_dev(const dc_place_t *p, uint32_t chunk, uint8_t *dst);
/** XXH3-128 of the chunk's current bytes (scratch: >= max_chunk bytes, used
 *  when the chunk spans segments or is in device memory). */
dc_status_t dc_place_digest(const dc_place_t *p, uint32_t chunk, uint8_t *scratch,
                            dc_digest_t *out);

/* --- chunks -> shards -> streams -> senders ------------------------------ */

/**
 * Which shard, stream and sender each chunk belongs to (the same on every
 * node: a function of the layout and the plan).  The rule: a chunk belongs
 * to the shard holding its first canonical byte (the tensors' bytes one
 * after the other in the layout's order), shard = floor(offset * nshards /
 * total_bytes); its index within the shard picks the stream
 * (dc_tree_stream_of), whose source is the sender that broadcasts it.  A
 * chunk of a shard no receiver needs has no stream and no sender
 * (UINT32_MAX).  Arrays have l->nchunks entries.
 */
void dc_layout_chunk_map(const dc_layout_t *l, const dc_tree_t *tree, uint32_t nshards,
                         uint8_t *shard, uint32_t *stream, uint32_t *src);

#endif /* DC_ENGINE_LAYOUT_H */
