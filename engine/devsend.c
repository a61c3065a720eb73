/* devsend.c - a device sender's encode: diff and model on the device, the
 * entropy coding of the lists on the host (devsend.h). */
#include "engine/devsend.h"

#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"
#include "kernels/listpack.h"

#include <stdlib.h>
#include <string.h>

#define DC_DS_SYMS 65536 /* distinct words of at most 2 bytes */

struct dc_devsend {
    size_t max_bytes, max_count;
    void *stream; /* all of this sender's device work (kern_cuda.h) */
    /* device */
    uint32_t *d_pos, *d_rnk;
    uint8_t *d_xor, *d_bw, *d_cls, *d_base, *d_next, *d_pk, *d_steps, *d_new;
    /* host */
    uint32_t *h_pos, *h_cnt;
    /* the XOR (0) and step (1) words' histogram counts, in the order the
     * words first appear, when dc_ds_entropy fetched them (nsym[m] > 0);
     * a histogram's symbols and the rANS table's frequencies: at most
     * DC_DS_SYMS each (words of w <= 2) */
    uint32_t *h_hc[2];
    size_t nsym[2];
    uint32_t *h_sym32, *h_qs;
    uint16_t *h_sym;
    uint8_t *h_xor, *h_bw, *h_pk, *h_steps;
    uint8_t *h_pg;     /* the ctx model's Golomb positions streams */
    size_t pk_cap;     /* d_pk's and h_pg's bytes */
    size_t count, w;
    size_t cur; /* the changes of the chunk being encoded (dc_ds_words) */
    int want_lists; /* the caller reads the positions (dc_devsend_lists) */
    int have_pos;   /* h_pos holds this chunk's positions */
    int have_xor;   /* h_xor holds this chunk's XOR words */
    int have_steps; /* h_steps holds its step words */
    uint64_t h2d, d2h;
};

void dc_devsend_free(dc_devsend_t *d)
{
    if (!d)
        return;
    dc_kern_cuda_stream_destroy(d->stream);
    dc_kern_cuda_free(d->d_pos);
    dc_kern_cuda_free(d->d_rnk);
    dc_kern_cuda_free(d->d_xor);
    dc_kern_cuda_free(d->d_bw);
    dc_kern_cuda_free(d->d_cls);
    dc_kern_cuda_free(d->d_base);
    dc_kern_cuda_free(d->d_next);
    dc_kern_cuda_free(d->d_pk);
    dc_kern_cuda_free(d->d_steps);
    dc_kern_cuda_free(d->d_new);
    free(d->h_cnt);
    free(d->h_hc[0]);
    free(d->h_hc[1]);
    free(d->h_sym32);
    free(d->h_qs);
    free(d->h_sym);
    free(d->h_steps);
    free(d->h_pos);
    free(d->h_xor);
    free(d->h_bw);
    free(d->h_pk);
    free(d->h_pg);
    free(d);
}

dc_status_t dc_devsend_create(size_t max_bytes, int base_stream, dc_devsend_t **out)
{
    dc_devsend_t *d = calloc(1, sizeof(*d));
    if (!d)
        return dc_error(DC_ERR_NOMEM, "device sender: out of memory");
    d->max_bytes = max_bytes;
    /* at most n / 4 changes of n <= max_bytes elements; count * w <= max_bytes / 4 */
    size_t mc = max_bytes / 4 + 1, mw = max_bytes / 4 + 8;
    d->max_count = mc;
    /* packed lists, or the Golomb streams of up to 8 classes (entropy.h
     * dc_ent_pos_bound each) */
    size_t gl = 8 * 32 + (mc * 34 + 7) / 8 + max_bytes / 8;
    d->pk_cap = dc_listpack_bound(mc) > gl ? dc_listpack_bound(mc) : gl;
    dc_status_t st = DC_OK;
    if ((st = dc_kern_cuda_stream_create(&d->stream)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_pos, mc * 4)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_rnk, mc * 4)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_xor, mw)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_bw, mw)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_cls, mc)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_pk, d->pk_cap)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_steps, mw)) != DC_OK ||
        (st = dc_kern_cuda_malloc((void **)&d->d_new, mw)) != DC_OK ||
        (base_stream && (st = dc_kern_cuda_malloc((void **)&d->d_base, max_bytes)) != DC_OK)) {
        dc_error_prefix("device sender: scratch for %zu-byte chunks", max_bytes);
        dc_devsend_free(d);
        return st;
    }
    d->h_pos = malloc(mc * 4);
    d->h_xor = malloc(mw);
    d->h_bw = malloc(mw);
    d->h_pk = malloc(d->pk_cap);
    d->h_pg = malloc(d->pk_cap);
    d->h_cnt = malloc(mc * 4);
    d->h_hc[0] = malloc(DC_DS_SYMS * 4);
    d->h_hc[1] = malloc(DC_DS_SYMS * 4);
    d->h_sym32 = malloc(DC_DS_SYMS * 4);
    d->h_qs = malloc(DC_DS_SYMS * 4);
    d->h_sym = malloc(DC_DS_SYMS * 2);
    d->h_steps = malloc(mw);
    if (!d->h_pos || !d->h_xor || !d->h_bw || !d->h_pk || !d->h_pg || !d->h_cnt ||
        !d->h_hc[0] || !d->h_hc[1] || !d->h_sym32 || !d->h_qs || !d->h_sym ||
        !d->h_steps) {
        dc_devsend_free(d);
        return dc_error(DC_ERR_NOMEM, "device sender: host scratch for %zu-byte chunks",
                        max_bytes);
    }
    *out = d;
    return DC_OK;
}

size_t dc_devsend_list_bytes(size_t count, unsigned w, int ctx)
{
    return count * (4 + 2 * (size_t)w + (ctx ? 5 : 0));
}

static dc_status_t dc_ds_d2h(dc_devsend_t *d, void *dst, const void *src, size_t bytes)
{
    d->d2h += bytes;
    return dc_kern_cuda_copy(dst, src, bytes, DC_KCU_D2H, d->stream);
}

/* count words of w bytes from dev to host: packed on the device as byte
 * or nibble varints (XOR and step words are mostly small integers: half a
 * byte to a byte each) when that is smaller, else as they are */
static dc_status_t dc_ds_words_d2h(dc_devsend_t *d, uint8_t *host, const uint8_t *dev,
                                   size_t count, unsigned w)
{
    size_t len = 0;
    int nib = 0;
    dc_status_t st;
    if (w > 4 || count == 0)
        return dc_ds_d2h(d, host, dev, count * w);
    if ((st = dc_kern_cuda_pack_words(dev, count, w, d->d_pk, &len, &nib, d->stream)) != DC_OK)
        return st;
    d->d2h += 2 * sizeof(uint64_t); /* the lengths */
    if (len >= count * w)
        return dc_ds_d2h(d, host, dev, count * w);
    if ((st = dc_ds_d2h(d, d->h_pk, d->d_pk, len)) != DC_OK)
        return st;
    if (dc_listunpack_words(d->h_pk, len, count, w, nib, host) != DC_OK) {
        dc_error_prefix("device sender: the device's packed words");
        return DC_ERR_IO;
    }
    return DC_OK;
}

/* count ranks of classes cls (device; NULL: one increasing list, K 1) to
 * the host as out[0..count), grouped by class, ccnt[c] per class: packed
 * on the device (kernels/listpack.h), half a byte to a byte a change
 * across PCIe instead of 4 (rank) + 1 (class); the positions of the
 * order0 model and of a caller that reads them */
static dc_status_t dc_ds_ranks(dc_devsend_t *d, const uint8_t *cls, const uint32_t *rnk,
                               size_t count, unsigned K, uint32_t *out, uint64_t *ccnt)
{
    size_t len = 0;
    int nib = 0;
    dc_status_t st = dc_kern_cuda_pack_ranks(cls, rnk, count, K, d->d_pk, &len, &nib, ccnt,
                                             d->stream);
    if (st != DC_OK)
        return st;
    /* the counts, the two lengths */
    d->d2h += (size_t)K * sizeof(uint64_t) + 2 * sizeof(uint64_t);
    if (len > dc_listpack_bound(count))
        return dc_error(DC_ERR_IO, "device sender: %zu packed bytes for %zu ranks", len, count);
    if ((st = dc_ds_d2h(d, d->h_pk, d->d_pk, len)) != DC_OK)
        return st;
    if (dc_listunpack(d->h_pk, len, ccnt, K, nib, out, count) != DC_OK) {
        /* the device's own output: a fault of the GPU or of this code */
        dc_error_prefix("device sender: the device's packed ranks");
        return DC_ERR_IO;
    }
    return DC_OK;
}

/* The ctx model's positions as the payload codes them: each class's
 * Golomb stream made on the device (dc_kern_cuda_golomb_ranks) from the
 * count ranks rnk of classes cls (NULL: K 1, the positions) to the host,
 * into L's pg, pgl and ccnt: about the payload's own positions bytes
 * across PCIe (a byte a change as packed ranks). */
static dc_status_t dc_ds_golomb(dc_devsend_t *d, const uint8_t *cls, const uint32_t *rnk,
                                size_t count, dc_codec_lists_t *L)
{
    size_t hx = 0, total = 0;
    dc_status_t st = dc_kern_cuda_golomb_ranks(cls, rnk, count, L->K, d->d_pk, d->pk_cap, L->pgl,
                                               L->ccnt, &hx, d->stream);
    if (st != DC_OK)
        return st;
    d->d2h += hx;
    for (unsigned c = 0; c < L->K; c++)
        total += L->pgl[c];
    if (total > d->pk_cap)
        return dc_error(DC_ERR_IO, "device sender: %zu bytes of positions streams", total);
    if ((st = dc_ds_d2h(d, d->h_pg, d->d_pk, total)) != DC_OK)
        return st;
    L->pg = d->h_pg;
    return DC_OK;
}

/* The values on demand (codec.h dc_codec_vals_t): the words of a mode to
 * the host when the coder picks it. */
static dc_status_t dc_ds_words(void *arg, unsigned mode, const void **p)
{
    dc_devsend_t *d = arg;
    dc_status_t st = DC_OK;
    if (mode == 0) {
        if (!d->have_xor &&
            (st = dc_ds_words_d2h(d, d->h_xor, d->d_xor, d->cur, d->w)) == DC_OK)
            d->have_xor = 1;
        *p = d->h_xor;
    } else if (mode == 1) {
        if (!d->have_steps &&
            (st = dc_ds_words_d2h(d, d->h_steps, d->d_steps, d->cur, d->w)) == DC_OK)
            d->have_steps = 1;
        *p = d->h_steps;
    } else {
        /* new words: rare (neither XOR words nor steps compress); into the
         * base words' buffer, which this path never fills */
        st = dc_ds_words_d2h(d, d->h_bw, d->d_new, d->cur, d->w);
        *p = d->h_bw;
    }
    return st;
}

/* The histogram of the count words of w <= 2 bytes at dev: its counts in
 * the order the words first appear into d->h_cnt, *nsym of them, packed
 * on the device (dc_kern_cuda_word_hist); DC_ERR_BUSY (only the length
 * read) where that is not smaller than the words themselves. */
static dc_status_t dc_ds_hist(dc_devsend_t *d, const uint8_t *dev, size_t count, unsigned w,
                              size_t *nsym)
{
    size_t hlen = 0;
    dc_status_t st = dc_kern_cuda_word_hist(dev, count, w, d->d_pk, &hlen, d->stream);
    if (st != DC_OK)
        return st;
    d->d2h += sizeof(uint64_t); /* the histogram's length */
    if (hlen > dc_listpack_bound(count))
        return dc_error(DC_ERR_IO, "device sender: a word histogram of %zu bytes for %zu words",
                        hlen, count);
    if (hlen >= count * w)
        return DC_ERR_BUSY;
    if ((st = dc_ds_d2h(d, d->h_pk, d->d_pk, hlen)) != DC_OK)
        return st;
    if (dc_listunpack_counts(d->h_pk, hlen, count, d->h_cnt, nsym) != DC_OK) {
        dc_error_prefix("device sender: the device's word histogram");
        return DC_ERR_IO;
    }
    if (*nsym > DC_DS_SYMS)
        return dc_error(DC_ERR_IO, "device sender: %zu distinct %u-byte words", *nsym, w);
    return DC_OK;
}

/* The rANS values stream of mode's words on demand (codec.h
 * dc_codec_vals_t rans): their histogram's counts (those dc_ds_entropy
 * fetched; mode 2's now) and symbols to the host, which makes the table
 * (dc_ent_rans_table) and sends each symbol's frequency back; the device
 * codes the words (dc_kern_cuda_rans_encode) and only the coded bytes
 * cross, about the payload's own values bytes.  DC_ERR_BUSY where the
 * words are the better way: on the host already, a histogram not smaller
 * than them, or an entropy that says the coder will not keep rANS. */
static dc_status_t dc_ds_rans(void *arg, unsigned mode, struct dc_ent_scratch *ent, uint8_t *dst,
                              size_t cap, size_t *len, double *h)
{
    dc_devsend_t *d = arg;
    const size_t count = d->cur;
    const unsigned w = d->w;
    const uint8_t *dev = mode == 0 ? d->d_xor : mode == 1 ? d->d_steps : d->d_new;
    if ((mode == 0 && d->have_xor) || (mode == 1 && d->have_steps) || mode > 2)
        return DC_ERR_BUSY;
    const uint32_t *cnt = mode < 2 ? d->h_hc[mode] : d->h_cnt;
    size_t nsym = mode < 2 ? d->nsym[mode] : 0, plen = 0;
    dc_status_t st;
    if (nsym == 0) {
        if ((st = dc_ds_hist(d, dev, count, w, &nsym)) != DC_OK)
            return st;
        cnt = d->h_cnt;
    }
    /* the words instead where the coder would not keep rANS (it does at
     * most a quarter of the words: the entropy, the table, about 2 B a
     * symbol, and the states say more) or where they cost less across
     * PCIe (as varints, about half their bytes) than the symbols (up to
     * 3 B each) and the stream */
    const double hb = dc_ent_counts_entropy_bits(cnt, nsym, count) / 8.0;
    if (hb + 2.0 * (double)nsym + (count >= 4096 ? 128.0 : 16.0) > (double)(count * w) / 4.0 ||
        hb + 3.0 * (double)nsym > (double)(count * w) / 2.0)
        return DC_ERR_BUSY;
    if ((st = dc_kern_cuda_word_syms(dev, count, w, d->d_pk, &plen, d->stream)) != DC_OK)
        return st;
    d->d2h += sizeof(uint64_t);
    if (plen > dc_listpack_bound(nsym))
        return dc_error(DC_ERR_IO, "device sender: %zu bytes of symbols for %zu", plen, nsym);
    if ((st = dc_ds_d2h(d, d->h_pk, d->d_pk, plen)) != DC_OK)
        return st;
    if (dc_listunpack_words(d->h_pk, plen, nsym, 4, 0, d->h_sym32) != DC_OK) {
        dc_error_prefix("device sender: the device's histogram symbols");
        return DC_ERR_IO;
    }
    for (size_t k = 0; k < nsym; k++) {
        if (d->h_sym32[k] >> (8 * w))
            return dc_error(DC_ERR_IO, "device sender: histogram symbol %u of %u-byte words",
                            d->h_sym32[k], w);
        d->h_sym[k] = (uint16_t)d->h_sym32[k];
    }
    size_t hl = 0, blen = 0, h2d = 0;
    unsigned S = 0, ways = 0;
    st = dc_ent_rans_table(ent, d->h_sym, cnt, nsym, count, w, dst, cap, &hl, &S, &ways, d->h_qs,
                           h);
    if (st == DC_ERR_INVALID) {
        /* the device's histogram is not one: a fault of the GPU or this code */
        dc_error_prefix("device sender: the device's histogram");
        return DC_ERR_IO;
    }
    if (st != DC_OK)
        return st;
    st = dc_kern_cuda_rans_encode(dev, count, w, d->h_qs, nsym, S, ways, d->d_pk, d->pk_cap,
                                  &blen, &h2d, d->stream);
    d->h2d += h2d;
    if (st != DC_OK)
        return st;
    d->d2h += sizeof(uint64_t) + sizeof(uint32_t); /* the stream's length, the table's check */
    if (blen > cap - hl)
        return dc_error(DC_ERR_BUSY, "device sender: a rANS stream past the output");
    if ((st = dc_ds_d2h(d, dst + hl, d->d_pk, blen)) != DC_OK)
        return st;
    *len = hl + blen;
    return DC_OK;
}

/* The order-0 entropy (bits) of the count words of w <= 2 bytes at dev,
 * as dc_ent_words_entropy_bits computes it: from the device's histogram
 * (its counts in the order the words first appear) when that is smaller
 * than the words; else from the words at host (*got: they are there
 * already; else fetched, and *got = 1) with the codec's own scratch. */
static dc_status_t dc_ds_entropy(dc_devsend_t *d, dc_codec_t *codec, unsigned mode,
                                 const uint8_t *dev, uint8_t *host, size_t count, unsigned w,
                                 double *bits, int *got)
{
    dc_status_t st;
    d->nsym[mode] = 0;
    if (!*got) {
        size_t nsym = 0;
        st = dc_ds_hist(d, dev, count, w, &nsym);
        if (st != DC_OK && st != DC_ERR_BUSY)
            return st;
        if (st == DC_OK) {
            /* kept for the rANS values (dc_ds_rans) */
            memcpy(d->h_hc[mode], d->h_cnt, nsym * sizeof(*d->h_cnt));
            d->nsym[mode] = nsym;
            *bits = dc_ent_counts_entropy_bits(d->h_cnt, nsym, count);
            return DC_OK;
        }
        /* nearly every word distinct: the words are the smaller copy */
        if ((st = dc_ds_words_d2h(d, host, dev, count, w)) != DC_OK)
            return st;
        *got = 1;
    }
    *bits = dc_codec_words_entropy_bits(codec, host, count, w);
    return DC_OK;
}

dc_status_t dc_devsend_encode(dc_devsend_t *d, dc_codec_t *codec, const void *base_dev,
                              const void *base_host, const void *next_dev, size_t n, unsigned w,
                              uint8_t *dst, size_t cap, size_t *len, uint16_t *enc,
                              dc_digest_t *next_dg)
{
    size_t bytes = n * w;
    dc_status_t st;
    d->count = 0;
    if ((w != 1 && w != 2 && w != 4 && w != 8) || bytes > d->max_bytes || n > UINT32_MAX)
        return dc_error(DC_ERR_INVALID, "device sender: chunk of %zu x %u bytes exceeds its "
                                        "scratch (%zu bytes)", n, w, d->max_bytes);
    if (!base_dev) {
        if (!d->d_base)
            return dc_error(DC_ERR_INVALID, "device sender: no baseline stream buffer");
        /* the baseline stream: the host's base chunk to the device */
        if ((st = dc_kern_cuda_copy(d->d_base, base_host, bytes, DC_KCU_H2D, d->stream)) != DC_OK)
            return st;
        d->h2d += bytes;
        base_dev = d->d_base;
    }
    size_t cap_sparse = n / 4, count = 0;
    if ((st = dc_kern_cuda_diff(base_dev, next_dev, n, w, d->d_pos, d->d_xor, cap_sparse, &count,
                                d->stream)) != DC_OK ||
        (st = dc_kern_cuda_digest128_dev(next_dev, bytes, next_dg, d->stream)) != DC_OK)
        return st;
    d->d2h += sizeof(uint64_t) + sizeof(*next_dg); /* the diff's count, the digest */
    if (count > cap_sparse)
        return dc_error(DC_ERR_UNSUPPORTED, "dense chunk (%zu of %zu elements changed): the "
                                            "dense kinds need the whole chunk", count, n);
    int ctx = dc_codec_model(codec) == DC_CODEC_MODEL_CTX;
    size_t lists = dc_devsend_list_bytes(count, w, ctx);
    if (lists >= bytes)
        return dc_error(DC_ERR_UNSUPPORTED, "lists of %zu bytes (%zu of %zu elements changed) "
                                            "not smaller than the %zu-byte chunk", lists, count,
                        n, bytes);
    d->have_pos = d->have_xor = d->have_steps = 0;
    d->w = w;
    d->cur = count;
    /* the ctx model's narrow values on demand: the words' entropies and
     * the bucket histogram instead of the XOR and base words, the chosen
     * mode's words after (dc_ds_words) */
    int vals = ctx && w <= 2 && count > 0;
    uint32_t bhist[256];
    dc_codec_vals_t V = {.words = dc_ds_words, .rans = dc_ds_rans, .arg = d};
    if (count > 0 &&
        (st = dc_kern_cuda_gather(base_dev, w, d->d_pos, count, d->d_bw, d->stream)) != DC_OK)
        return st;
    if (vals) {
        /* the base words' buckets: their histogram (1 KiB), or for fewer
         * changes the buckets themselves (a byte each; into d_cls, which
         * the ranks fill only later) */
        int few = count < sizeof(bhist);
        size_t hx = 0;
        if ((st = dc_kern_cuda_ctx_values(d->d_bw, d->d_xor, count, w, d->d_steps, d->d_new,
                                          d->d_cls, few ? NULL : bhist, &hx, d->stream)) !=
            DC_OK)
            return st;
        d->d2h += hx;
        if (few) {
            if ((st = dc_ds_d2h(d, d->h_pk, d->d_cls, count)) != DC_OK)
                return st;
            memset(bhist, 0, sizeof(bhist));
            for (size_t k = 0; k < count; k++)
                bhist[d->h_pk[k]]++;
        }
        /* a host baseline's patch reads the XOR words */
        if (d->want_lists) {
            if ((st = dc_ds_words_d2h(d, d->h_xor, d->d_xor, count, w)) != DC_OK)
                return st;
            d->have_xor = 1;
        }
    } else if (count > 0 &&
               ((st = dc_ds_words_d2h(d, d->h_xor, d->d_xor, count, w)) != DC_OK ||
                (st = dc_ds_d2h(d, d->h_bw, d->d_bw, count * w)) != DC_OK)) {
        return st;
    } else {
        d->have_xor = 1;
    }
    dc_codec_lists_t L = {.n = n, .w = w, .count = count, .pos = d->h_pos, .xorv = d->h_xor,
                          .bw = d->h_bw, .K = 1, .cls = NULL};
    if (ctx && count > 0 && count < n) {
        uint32_t hist[256];
        uint64_t thrm[DC_CODEC_MAX_CLASSES];
        size_t hx = 0;
        if ((st = dc_kern_cuda_ctx_sample(base_dev, n, w, hist, &hx, d->stream)) != DC_OK)
            return st;
        d->d2h += hx;
        L.K = dc_codec_lists_classes(codec, hist, n, w, vals ? NULL : d->h_bw,
                                     vals ? bhist : NULL, count, L.thr, thrm);
        if (L.K > 1 &&
            (st = dc_kern_cuda_ctx_rank(base_dev, n, w, thrm, L.K - 1, d->d_pos, count, d->d_cls,
                                        d->d_rnk, L.pop, d->stream)) != DC_OK)
            return st;
        if (L.K > 1)
            d->d2h += L.K * sizeof(uint64_t); /* the populations */
    }
    if (ctx && count > 0) {
        /* the classes' positions streams (K 1: of the positions) */
        if ((st = dc_ds_golomb(d, L.K > 1 ? d->d_cls : NULL, L.K > 1 ? d->d_rnk : d->d_pos,
                               count, &L)) != DC_OK)
            return st;
        if (L.K == 1 && d->want_lists) {
            /* the positions for a caller that reads them: from that stream */
            if (dc_ent_pos_decode(L.pg, L.pgl[0], count, n, d->h_pos) != DC_OK) {
                dc_error_prefix("device sender: the device's positions stream");
                return DC_ERR_IO;
            }
            d->have_pos = 1;
        }
    }
    /* the positions themselves: the order0 model's, or a caller's that
     * reads them when the ctx model's streams code ranks */
    if (count > 0 && !d->have_pos && (!ctx || d->want_lists)) {
        uint64_t one;
        if ((st = dc_ds_ranks(d, NULL, d->d_pos, count, 1, d->h_pos, &one)) != DC_OK)
            return st;
        d->have_pos = 1;
    }
    if (!d->have_pos)
        L.pos = NULL;
    if (vals) {
        int got;
        got = d->have_xor;
        if ((st = dc_ds_entropy(d, codec, 0, d->d_xor, d->h_xor, count, w, &V.hx, &got)) != DC_OK)
            return st;
        d->have_xor = got;
        got = 0;
        st = dc_ds_entropy(d, codec, 1, d->d_steps, d->h_steps, count, w, &V.hs, &got);
        if (st != DC_OK)
            return st;
        d->have_steps = got;
        L.vals = &V;
        L.xorv = L.bw = NULL;
    }
    if ((st = dc_codec_encode_lists(codec, &L, dst, cap, len, enc, NULL)) != DC_OK)
        return st;
    d->count = count;
    return DC_OK;
}

uint8_t *dc_devsend_gather_buf(dc_devsend_t *d)
{
    if (!d->d_next && dc_kern_cuda_malloc((void **)&d->d_next, d->max_bytes) != DC_OK) {
        dc_error_prefix("device sender: gather buffer for %zu-byte chunks", d->max_bytes);
        return NULL;
    }
    return d->d_next;
}

void dc_devsend_want_lists(dc_devsend_t *d, int want)
{
    d->want_lists = want;
}

void dc_devsend_lists(const dc_devsend_t *d, const uint32_t **pos, const uint8_t **xorv,
                      size_t *count)
{
    *pos = d->have_pos || d->count == 0 ? d->h_pos : NULL;
    *xorv = d->have_xor || d->count == 0 ? d->h_xor : NULL;
    *count = d->count;
}

void dc_devsend_pcie(const dc_devsend_t *d, uint64_t *h2d, uint64_t *d2h)
{
    *h2d = d->h2d;
    *d2h = d->d2h;
}
