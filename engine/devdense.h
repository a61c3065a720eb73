/*
 * devdense.h - a device receiver's dense and put kinds (engine-internal;
 * engine/devdense.c, called by engine/devpath.c).
 *
 *   XOR_DENSE   the values stream crosses PCIe as it is (raw, rANS or byte
 *               planes) and is decoded on the device
 *               (dc_kern_cuda_values_decode: the CPU's verdicts), then
 *               dc_kern_cuda_xor_dense
 *   PUT_DENSE   the same, then the words copied into place on the device;
 *               in delta mode the undo copy of the old bytes is made first,
 *               device to device, into a device undo record (an abort
 *               copies it back on the device)
 *   PUT_SPARSE  (positions and values decoded on the device by
 *               devpath.c's sparse path) the new words made XOR words
 *               against the chunk on the device (gather, xor), so that it
 *               is applied, and undone, as an xor-sparse list; in delta
 *               mode those positions and XOR words are its device undo
 *               record (the layout of a ctx chunk's record)
 *
 * zstd values have no device decoder: they are decoded on the host
 * (counted: host_zstd); the words are then coded again as the smallest
 * stream the device decodes (dc_codec_values_recode: raw, rANS or byte
 * planes), which crosses and is decoded there (counted: recoded), for the
 * dense kinds and (devpath.c) the sparse ones.  A refused payload leaves the
 * chunk untouched (everything is decoded into scratch first).
 */
#ifndef DC_ENGINE_DEVDENSE_H
#define DC_ENGINE_DEVDENSE_H

#include "engine/node_internal.h"

/** The dense kinds' device scratch and figures (one per device receiver). */
typedef struct dc_devdense {
    void *buf; /* device scratch: the stream, then the decoded words */
    size_t cap;
    uint64_t dense_dev;  /* dense chunks whose values were decoded on the device */
    uint64_t host_zstd;  /* chunks (not ctx) whose zstd values were decoded on the host */
    uint64_t recoded;    /* ... whose words were recoded to a smaller device stream */
    uint8_t *hbuf;       /* host scratch: the recoded stream */
    size_t hcap;
    uint64_t copies;     /* put-dense undo copies made on the device */
    uint64_t put_sparse; /* put-sparse chunks applied on the device */
} dc_devdense_t;

/** Where a device undo record of count positions keeps its XOR words. */
static inline size_t dc_devdense_undo_wofs(size_t count)
{
    return (count * sizeof(uint32_t) + 15) & ~(size_t)15;
}

/**
 * An XOR_DENSE or PUT_DENSE payload (host memory) of chunk c applied to its
 * device bytes dchunk (elems x w): the values decoded on the device (zstd:
 * on the host, *host_values = 1), the chunk changed only once they were
 * accepted (journal: dc_journal_begin first).  copy (PUT_DENSE in delta
 * mode; NULL otherwise): *copy = a new device buffer with the chunk's old
 * bytes (DC_DEV_STAGE, nothing changed, when there is no device memory for
 * it).  *sent += the bytes sent to the device.  Returns DC_DEV_*
 * (devpath.h); DC_DEV_BAD with the CPU decoder's verdict (dc_last_error).
 */
int dc_devdense_apply(dc_node_t *n, dc_devdense_t *dd, uint32_t c, uint16_t enc,
                      const uint8_t *payload, size_t len, int journal, uint8_t *dchunk,
                      size_t elems, unsigned w, void **copy, uint64_t *sent);

/**
 * PUT_SPARSE: the count new words at dwords (device) for the positions
 * dpos (device, accepted by a positions decoder: increasing, < elems)
 * made XOR words in place against dchunk (gather, xor).  rec (may be
 * NULL): *rec = a new device undo record (positions, then the XOR words at
 * dc_devdense_undo_wofs(count)); DC_ERR_NOMEM, nothing allocated, when
 * there is no memory for it.  The chunk is not written.
 */
dc_status_t dc_devdense_put_to_xor(dc_devdense_t *dd, const uint8_t *dchunk, unsigned w,
                                   const uint32_t *dpos, uint8_t *dwords, size_t count,
                                   void **rec);

/**
 * count words of w bytes (host; zstd values decoded on the host) coded
 * again as the smallest stream the device decodes (dc_codec_values_recode:
 * raw, rANS or byte planes) into dd's host buffer: *out, *len bytes,
 * method *method (DC_ENT_RAW and the words themselves when nothing is
 * smaller).  Counts dd->host_zstd.
 */
dc_status_t dc_devdense_recode(dc_node_t *n, dc_devdense_t *dd, const uint8_t *words,
                               size_t count, unsigned w, const uint8_t **out, size_t *len,
                               unsigned *method);

/** A PUT_DENSE undo copy (copy, bytes) back into dchunk, on the device. */
dc_status_t dc_devdense_restore(uint8_t *dchunk, const void *copy, size_t bytes);

/** Free the scratch. */
void dc_devdense_close(dc_devdense_t *dd);

#endif /* DC_ENGINE_DEVDENSE_H */
