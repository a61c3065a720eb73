/*
 * devpath.h - a receiver whose weights are in device (CUDA) memory applies
 * frames on the device (engine-internal; engine/devpath.c).
 *
 * Today's staging path (engine/layout.c dc_place_copy) copies the whole
 * chunk to the host, runs the CPU codec and copies the whole chunk back:
 * 2 x chunk bytes across PCIe per chunk.  The device path moves only what
 * the payload holds:
 *
 *   XOR_SPARSE  the positions stream (Golomb or rANS gaps) and the values
 *               stream go as they are in the payload and are decoded
 *               there (dc_kern_cuda_golomb_decode, dc_kern_cuda_gaps_decode
 *               with the gaps header and escapes read on the host,
 *               dc_kern_cuda_values_decode: the CPU's verdicts); zstd
 *               values are decoded on the host and their words go (count x
 *               w); when that is less
 *               than staging (2 x chunk); dc_kern_cuda_xor_scatter applies them (validating
 *               the positions on the device: hostile lists leave the
 *               chunk untouched)
 *   CTX         (the default model) the header parsed on the host; the
 *               class streams (Golomb or gaps) and the values stream go as
 *               they are and are decoded on the device, zstd words decoded
 *               on the host go; the baseline's classes,
 *               the ranks' elements, the XOR words (from XOR words, steps
 *               or new words) and the patch on the device
 *               (dc_kern_cuda_ctx_run: the CPU's verdicts, the chunk
 *               untouched on a refused payload).  Its undo record (its
 *               positions and XOR words) stays in device memory: a ctx
 *               frame does not undo itself
 *   XOR_DENSE   (engine/devdense.c) the values stream goes as it is
 *               (raw, rANS or byte planes) and is decoded there
 *               (dc_kern_cuda_values_decode: the CPU's verdicts), then
 *               dc_kern_cuda_xor_dense; zstd values are decoded on the
 *               host and coded again as the smallest stream the device
 *               decodes (dc_codec_values_recode), which goes
 *   PUT_DENSE   the same, then copied into place on the device; in delta
 *               mode the undo copy of the old bytes is made first, device
 *               to device, into a device undo record (abort copies it
 *               back there)
 *   PUT_SPARSE  as XOR_SPARSE (positions and values decoded on the
 *               device), the new words made XOR words against the chunk
 *               there (devdense.c: gather, xor), then
 *               dc_kern_cuda_xor_scatter; in delta mode those positions
 *               and XOR words are its device undo record (a ctx chunk's
 *               layout)
 *
 * then the chunk's XXH3-128 is computed on the device
 * (dc_kern_cuda_digest128_dev; 16 bytes come back).  Undo on abort applies
 * the retained XOR frame the same way (an XOR is self-inverse; the journal
 * keeps it from being applied twice), or a ctx / put-sparse chunk's device
 * record, or a put-dense chunk's device undo copy.
 *
 * Staged through the host, each reason said once per node (WARN), and
 * counted: chunks that span placement segments, lists not smaller than
 * staging, a CTX or PUT_SPARSE chunk without device memory for its undo
 * record, a PUT_DENSE chunk without device memory for its undo copy.
 */
#ifndef DC_ENGINE_DEVPATH_H
#define DC_ENGINE_DEVPATH_H

#include "engine/node_internal.h"

enum {
    DC_DEV_STAGE = 0, /* not taken here: use the staging path */
    DC_DEV_DONE = 1,  /* applied on the device, *d = the chunk's digest */
    DC_DEV_BAD = 2,   /* payload refused (dc_last_error); the chunk is untouched */
    DC_DEV_FAIL = 3,  /* device memory failed (dc_last_error), or the journal */
};

/** Staging instead of the device apply for receivers opened on this
 *  thread (tests: the baseline beside the device path in one process);
 *  config device_apply=stage (DELTACAST_DEVICE_APPLY) does it for the
 *  process. */
extern _Thread_local int dc_devpath_force_stage;

/** Set up n->rx.dev for a receiver with weights in device memory (logs the
 *  per-kind plan). */
dc_status_t dc_devpath_open(dc_node_t *n);
/** Log what went where, free the device scratch. */
void dc_devpath_close(dc_node_t *n);

/** Apply frame fh (payload checked: CRC) to chunk c on the device.  state:
 *  the chunk's journal state before; the journal is set APPLYING before the
 *  chunk's bytes change. */
int dc_devpath_frame(dc_node_t *n, uint32_t c, const dc_frame_hdr_t *fh, const uint8_t *payload,
                     int state, dc_digest_t *d);
/** Undo chunk c: its device undo record (a ctx chunk applied on the
 *  device), else its retained frame (n->rx.retained[c]). */
int dc_devpath_undo(dc_node_t *n, uint32_t c);
/** 1 when chunk c's undo record is on the device (a ctx or put-sparse
 *  chunk applied there in delta mode, its digest checked; a put-dense
 *  chunk's undo copy): the host keeps none. */
int dc_devpath_has_undo(const dc_node_t *n, uint32_t c);
/** 1 when that record is a put-dense chunk's copy of its old bytes (it
 *  undoes the chunk whatever the journal says of it since). */
int dc_devpath_has_copy(const dc_node_t *n, uint32_t c);
/** Drop chunk c's device undo record (its bytes are being overwritten:
 *  the record no longer undoes them); a put-dense chunk's undo copy (the
 *  baseline's bytes, as the host's n->rx.undo[c]) still holds and stays. */
void dc_devpath_drop_undo(dc_node_t *n, uint32_t c);
/** Drop the device undo records (the version ended). */
void dc_devpath_forget(dc_node_t *n);

/** Tests (tests/emu/test_emu_dense.c): payload (encoding enc) applied to
 *  chunk c on the device as a frame's would be, without the journal or the
 *  digest; delta: delta mode's undo copy / record, kept when the chunk
 *  changed (dc_devpath_undo then undoes it).  Returns DC_DEV_*. */
int dc_devpath_apply_test(dc_node_t *n, uint32_t c, uint16_t enc, const uint8_t *payload,
                          size_t len, int delta);

/** Process-wide totals of the device path (tests, perf/gpu-check.sh). */
typedef struct dc_devpath_totals {
    uint64_t frames, payload_bytes; /* frames given to the device path, their payloads */
    uint64_t dev_ctx;               /* ctx-sparse chunks applied on the device */
    uint64_t staged_ctx;            /* ... staged for want of device memory for the undo record */
    uint64_t undone_ctx;            /* ctx (and put-sparse) chunks undone from their device
                                       XOR record */
    uint64_t dev_gaps;              /* rANS gaps streams (xor-sparse positions, ctx classes)
                                       decoded on the device */
    uint64_t dev_dense;             /* xor-dense / put-dense chunks decoded on the device */
    uint64_t dev_put_sparse;        /* put-sparse chunks applied on the device */
    uint64_t host_zstd;             /* sparse and dense chunks (not ctx) whose zstd values
                                       were decoded on the host */
    uint64_t dev_copies;            /* put-dense undo copies made device to device */
    uint64_t undone_rec;            /* chunks undone from a device record or copy */
    uint64_t staged;                /* chunks staged through the host (any reason) */
} dc_devpath_totals_t;
void dc_devpath_totals(dc_devpath_totals_t *t);
/** The digest of chunk c as it is now, computed on the device. */
int dc_devpath_digest(dc_node_t *n, uint32_t c, dc_digest_t *d);

#endif /* DC_ENGINE_DEVPATH_H */
