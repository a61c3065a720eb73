/* synth.c - derive the next version of a checkpoint (see synth.h). */
#include "testkit/synth.h"
#include "kernels/safetensors.h"

#include <math.h>
#include <stdlib.h>

static uint64_t dc_synth_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double dc_synth_unif(uint64_t *s)
{
    return ((double)(dc_synth_rng(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double dc_synth_normal(uint64_t *s)
{
    double u = dc_synth_unif(s), v = dc_synth_unif(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static uint16_t dc_bf16_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    uint32_t r = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + r) >> 16);
}

static float dc_f32_from_bf16(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Change element i of a w-byte floating array at p. */
static void dc_synth_change(uint8_t *p, dc_dtype_t dt, int inject, uint64_t *rs)
{
    int up = (int)(dc_synth_rng(rs) & 1);
    if (dt == DC_DTYPE_BF16 || dt == DC_DTYPE_F16) {
        uint16_t v = dc_load_le16(p);
        uint16_t mag = v & 0x7fff;
        uint16_t expmask = dt == DC_DTYPE_BF16 ? 0x7f80 : 0x7c00;
        if ((v & expmask) == expmask)
            return; /* inf / nan: leave */
        if (inject && dt == DC_DTYPE_BF16) {
            float f = dc_f32_from_bf16(v) * (float)(1.0 + 0.01 * dc_synth_normal(rs));
            dc_store_le16(p, dc_bf16_from_f32(f));
            return;
        }
        if (mag == 0)
            mag = 1;
        else if (up && ((mag + 1) & expmask) != expmask)
            mag++;
        else
            mag--;
        dc_store_le16(p, (uint16_t)((v & 0x8000) | mag));
    } else if (dt == DC_DTYPE_F32) {
        uint32_t v = dc_load_le32(p);
        if ((v & 0x7f800000u) == 0x7f800000u)
            return;
        if (inject) {
            float f;
            memcpy(&f, &v, 4);
            f *= (float)(1.0 + 0.01 * dc_synth_normal(rs));
            memcpy(&v, &f, 4);
        } else {
            uint32_t mag = v & 0x7fffffffu;
            mag = mag == 0 ? 1 : (up && ((mag + 1) & 0x7f800000u) != 0x7f800000u) ? mag + 1 : mag - 1;
            v = (v & 0x80000000u) | mag;
        }
        dc_store_le32(p, v);
    } else if (dt == DC_DTYPE_F64) {
        uint64_t v = dc_load_le64(p);
        dc_store_le64(p, v ^ 1u);
    }
}

static int dc_synth_is_float(dc_dtype_t dt)
{
    return dt == DC_DTYPE_BF16 || dt == DC_DTYPE_F16 || dt == DC_DTYPE_F32 || dt == DC_DTYPE_F64;
}

dc_status_t dc_synth_next(const char *src, const char *dst, double rate, int inject,
                          uint64_t seed, uint64_t *changed)
{
    if (!(rate > 0 && rate < 1))
        return dc_error(DC_ERR_INVALID, "synth: change rate %g outside (0, 1)", rate);
    dc_st_file_t *f = NULL;
    dc_status_t st = dc_st_open(src, DC_ST_READ, &f);
    if (st != DC_OK)
        return st;
    size_t hlen = 0;
    const uint8_t *hraw = dc_st_header_raw(f, &hlen);
    uint64_t dsize = dc_st_file_size(f) - dc_st_data_offset(f);
    dc_st_writer_t *w = NULL;
    st = dc_st_writer_create_raw(dst, hraw, hlen, dsize, &w);
    if (st != DC_OK) {
        dc_st_close(f);
        return st;
    }
    const size_t blk = 16u << 20;
    uint8_t *buf = malloc(blk);
    if (!buf) {
        dc_st_writer_abort(w);
        dc_st_close(f);
        return dc_error(DC_ERR_NOMEM, "synth: out of memory");
    }
    uint64_t rs = seed * 0x2545f4914f6cdd1dull + 1, nchanged = 0;
    const double lq = log1p(-rate);
    uint64_t at = 0; /* data bytes written */
    for (size_t i = 0; i < dc_st_count(f) && st == DC_OK; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        if (t->begin != at) {
            st = dc_error(DC_ERR_FORMAT, "%s: tensor data is not contiguous", src);
            break;
        }
        const uint8_t *data = dc_st_data(f, t);
        uint64_t nb = t->end - t->begin;
        size_t es = dc_dtype_size(t->dtype);
        int fl = dc_synth_is_float(t->dtype);
        /* next changed element index (geometric gaps) */
        uint64_t next = fl ? (uint64_t)floor(log(dc_synth_unif(&rs)) / lq) : UINT64_MAX;
        for (uint64_t off = 0; off < nb && st == DC_OK; off += blk) {
            size_t n = (size_t)DC_MIN((uint64_t)blk - (blk % es), nb - off);
            memcpy(buf, data + off, n);
            uint64_t e0 = off / es, e1 = (off + n) / es;
            while (fl && next < e1) {
                dc_synth_change(buf + (next - e0) * es, t->dtype, inject, &rs);
                nchanged++;
                next += 1 + (uint64_t)floor(log(dc_synth_unif(&rs)) / lq);
            }
            st = dc_st_writer_write(w, buf, n);
            if (n % es)
                break;
        }
        at = t->end;
    }
    if (st == DC_OK && at != dsize)
        st = dc_error(DC_ERR_FORMAT, "%s: data region has %llu trailing bytes", src,
                      (unsigned long long)(dsize - at));
    free(buf);
    dc_st_close(f);
    if (st != DC_OK) {
        dc_st_writer_abort(w);
        return st;
    }
    st = dc_st_writer_finish(w);
    if (st == DC_OK && changed)
        *changed = nchanged;
    return st;
}
