/* devdense.c - a device receiver's dense and put kinds (devdense.h). */
#include "engine/devdense.h"

#include "engine/devpath.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

static dc_status_t dd_scratch(dc_devdense_t *dd, size_t bytes)
{
    if (dd->cap >= bytes)
        return DC_OK;
    dc_kern_cuda_free(dd->buf);
    dd->buf = NULL;
    dd->cap = 0;
    dc_status_t st = dc_kern_cuda_malloc(&dd->buf, bytes);
    if (st == DC_OK)
        dd->cap = bytes;
    return st;
}

void dc_devdense_close(dc_devdense_t *dd)
{
    dc_kern_cuda_free(dd->buf);
    dd->buf = NULL;
    dd->cap = 0;
    free(dd->hbuf);
    dd->hbuf = NULL;
    dd->hcap = 0;
}

dc_status_t dc_devdense_recode(dc_node_t *n, dc_devdense_t *dd, const uint8_t *words,
                               size_t count, unsigned w, const uint8_t **out, size_t *len,
                               unsigned *method)
{
    const size_t need = dc_ent_val_bound(count, w), bytes = count * w;
    if (dd->hcap < need) {
        uint8_t *nb = realloc(dd->hbuf, need);
        if (!nb)
            return dc_error(DC_ERR_NOMEM, "host buffer of %zu bytes", need);
        dd->hbuf = nb;
        dd->hcap = need;
    }
    dd->host_zstd++;
    if (dc_codec_values_recode(n->rx.codec, words, count, w, dd->hbuf, dd->hcap, len, method) ==
            DC_OK &&
        *len < bytes) {
        dd->recoded++;
    } else {
        /* the words as they are (a raw stream) */
        memcpy(dd->hbuf, words, bytes);
        *len = bytes;
        *method = DC_ENT_RAW;
    }
    *out = dd->hbuf;
    return DC_OK;
}

int dc_devdense_apply(dc_node_t *n, dc_devdense_t *dd, uint32_t c, uint16_t enc,
                      const uint8_t *payload, size_t len, int journal, uint8_t *dchunk,
                      size_t elems, unsigned w, void **copy, uint64_t *sent)
{
    const unsigned kind = dc_enc_kind(enc), vm = dc_enc_val_method(enc);
    const size_t bytes = elems * w;
    dc_status_t st;
    if (copy)
        *copy = NULL;
    /* the CPU codec's checks of the encoding field (dc_check_enc) */
    if ((kind != DC_ENC_XOR_DENSE && kind != DC_ENC_PUT_DENSE) || vm >= DC_ENT_GOLOMB) {
        (void)dc_error(DC_ERR_FORMAT, "bad chunk encoding 0x%04x", enc);
        return DC_DEV_BAD;
    }
    if (dc_enc_pos_method(enc) != 0) {
        (void)dc_error(DC_ERR_FORMAT, "%s chunk names a positions method",
                       dc_enc_kind_name(kind));
        return DC_DEV_BAD;
    }
    uint8_t *words;
    unsigned method = vm;
    if (vm == DC_ENT_ZSTD) {
        /* no device decoder: the host decodes (its verdict), codes the
         * words again as a stream the device decodes, and that goes */
        const uint32_t *pos;
        const uint8_t *hw;
        size_t count;
        if (dc_codec_decode_lists(n->rx.codec, enc, payload, len, elems, w, &pos, &hw, &count) !=
            DC_OK)
            return DC_DEV_BAD;
        if (dc_devdense_recode(n, dd, hw, elems, w, &payload, &len, &method) != DC_OK)
            return DC_DEV_FAIL;
    }
    {
        /* the stream as it is, decoded on the device into scratch */
        const size_t sofs = (len + 15) & ~(size_t)15;
        if ((st = dd_scratch(dd, sofs + bytes)) != DC_OK ||
            (len && (st = dc_kern_cuda_h2d(dd->buf, payload, len)) != DC_OK))
            return DC_DEV_FAIL;
        words = (uint8_t *)dd->buf + sofs;
        st = dc_kern_cuda_values_decode(method, dd->buf, len, elems, w, words, NULL);
        if (st == DC_ERR_FORMAT)
            return DC_DEV_BAD; /* only scratch was written */
        if (st != DC_OK)
            return DC_DEV_FAIL;
        *sent += len;
        if (vm != DC_ENT_ZSTD)
            dd->dense_dev++;
    }
    if (copy) {
        /* the undo copy of the old bytes, device to device */
        if (dc_kern_cuda_malloc(copy, bytes) != DC_OK) {
            *copy = NULL;
            return DC_DEV_STAGE;
        }
        if ((st = dc_kern_cuda_d2d(*copy, dchunk, bytes)) != DC_OK) {
            dc_kern_cuda_free(*copy);
            *copy = NULL;
            return DC_DEV_FAIL;
        }
        dd->copies++;
    }
    if (journal && dc_journal_begin(n->rx.j, c) != DC_OK)
        return DC_DEV_FAIL;
    st = kind == DC_ENC_XOR_DENSE ? dc_kern_cuda_xor_dense(dchunk, words, bytes, NULL)
                                  : dc_kern_cuda_d2d(dchunk, words, bytes);
    return st == DC_OK ? DC_DEV_DONE : DC_DEV_FAIL;
}

dc_status_t dc_devdense_put_to_xor(dc_devdense_t *dd, const uint8_t *dchunk, unsigned w,
                                   const uint32_t *dpos, uint8_t *dwords, size_t count,
                                   void **rec)
{
    dc_status_t st;
    if (rec)
        *rec = NULL;
    if (count == 0)
        return DC_OK;
    const size_t wofs = dc_devdense_undo_wofs(count), wb = count * w;
    uint8_t *old;
    if (rec) {
        /* the record's XOR words are made in place: the base words first */
        if (dc_kern_cuda_malloc(rec, wofs + wb) != DC_OK) {
            *rec = NULL;
            return dc_error(DC_ERR_NOMEM, "device undo record of %zu changes", count);
        }
        old = (uint8_t *)*rec + wofs;
    } else {
        if ((st = dd_scratch(dd, wb)) != DC_OK)
            return st;
        old = dd->buf;
    }
    if ((st = dc_kern_cuda_gather(dchunk, w, dpos, count, old, NULL)) != DC_OK ||
        (st = dc_kern_cuda_xor_dense(dwords, old, wb, NULL)) != DC_OK ||
        (rec && ((st = dc_kern_cuda_d2d(*rec, dpos, count * sizeof(uint32_t))) != DC_OK ||
                 (st = dc_kern_cuda_d2d(old, dwords, wb)) != DC_OK))) {
        if (rec) {
            dc_kern_cuda_free(*rec);
            *rec = NULL;
        }
        return st;
    }
    dd->put_sparse++;
    return DC_OK;
}

dc_status_t dc_devdense_restore(uint8_t *dchunk, const void *copy, size_t bytes)
{
    return dc_kern_cuda_d2d(dchunk, copy, bytes);
}
