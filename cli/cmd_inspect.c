/* cmd_inspect.c - `deltacast inspect`: what a delta or a checkpoint holds. */
#include "cli.h"

#include "kernels/delta.h"
#include "kernels/entropy.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void dc_inspect_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast inspect FILE [--base BASE] [--json]\n"
            "\n"
            "Show what a delta or a safetensors checkpoint holds.  For a checkpoint:\n"
            "tensors, dtypes, shapes, sizes.  For a delta: per tensor the frames, change\n"
            "rate, encoding mix, bytes per stream and the ratio to the entropy bound;\n"
            "for the file also the frames by stream method (positions: golomb, gaps;\n"
            "values: raw, zstd, rans, planes).  Every frame is decoded, so this also\n"
            "validates the delta.  A delta whose target header is its base's (the\n"
            "usual refit step: same tensors) needs --base to list its frames.  The\n"
            "overhead is every byte that is not chunk payload (file header, target\n"
            "header, frame headers or records); its share is relative to the payload.\n"
            "\n"
            "Options:\n"
            "  --base BASE              the base checkpoint the delta applies to\n"
            "  --json                   machine-readable output\n"
            "  -h, --help               show this help\n");
}

static void dc_print_json(json_t *j)
{
    if (!j) {
        fprintf(stderr, "deltacast inspect: error: could not build the JSON report\n");
        return;
    }
    char *txt = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    if (txt)
        printf("%s\n", txt);
    free(txt);
    json_decref(j);
}

static json_t *dc_shape_json(const dc_st_tensor_t *t)
{
    json_t *a = json_array();
    for (int d = 0; d < t->ndim; d++)
        json_array_append_new(a, json_integer((json_int_t)t->shape[d]));
    return a;
}

static void dc_shape_text(const dc_st_tensor_t *t, char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int d = 0; d < t->ndim && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%llu", d ? "," : "",
                              (unsigned long long)t->shape[d]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

static int dc_inspect_ckpt(const char *path, bool json)
{
    dc_st_file_t *f;
    dc_status_t st = dc_st_open(path, DC_ST_READ, &f);
    if (st != DC_OK)
        return dc_cli_fail("inspect", st, NULL);
    size_t n = dc_st_count(f);
    uint64_t elems = 0;
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(f, i);
            elems += t->nelems;
            json_array_append_new(
                arr, json_pack("{s:s, s:s, s:o, s:I, s:I, s:I}", "name", t->name, "dtype",
                               dc_dtype_name(t->dtype), "shape", dc_shape_json(t), "elements",
                               (json_int_t)t->nelems, "bytes", (json_int_t)(t->end - t->begin),
                               "offset", (json_int_t)t->begin));
        }
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:o}", "kind", "checkpoint", "path", path,
                              "file_bytes", (json_int_t)dc_st_file_size(f), "tensors",
                              (json_int_t)n, "elements", (json_int_t)elems, "tensor_list", arr);
        const char *md = dc_st_metadata(f);
        if (j && md)
            json_object_set_new(j, "metadata", json_loads(md, 0, NULL));
        dc_print_json(j);
    } else {
        printf("%-48s %-8s %-20s %14s %14s\n", "tensor", "dtype", "shape", "elements", "bytes");
        for (size_t i = 0; i < n; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(f, i);
            char sh[128];
            dc_shape_text(t, sh, sizeof(sh));
            elems += t->nelems;
            printf("%-48s %-8s %-20s %14llu %14llu\n", t->name, dc_dtype_name(t->dtype), sh,
                   (unsigned long long)t->nelems, (unsigned long long)(t->end - t->begin));
        }
        const char *md = dc_st_metadata(f);
        printf("checkpoint %s: %zu tensors, %llu elements, %llu bytes%s%s\n", path, n,
               (unsigned long long)elems, (unsigned long long)dc_st_file_size(f),
               md ? ", metadata " : "", md ? md : "");
    }
    dc_st_close(f);
    return DC_EXIT_OK;
}

typedef struct {
    uint64_t frames, kinds[DC_ENC_KIND_MAX + 1], payload, pos, val, changed, known_elems;
    double bound, bounded_payload;
} dc_tstat_t;

static void dc_hex16(dc_digest_t d, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)d.hi, (unsigned long long)d.lo);
}

static int dc_inspect_delta(const char *path, const uint8_t *img, size_t len, const char *base_path,
                            bool json)
{
    dc_delta_reader_t r;
    dc_st_file_t *base = NULL;
    dc_status_t st;
    memset(&r, 0, sizeof(r));
    if (base_path && (st = dc_st_open(base_path, DC_ST_READ, &base)) != DC_OK)
        return dc_cli_fail("inspect", st, NULL);
    if ((st = dc_delta_reader_init_base(&r, img, len, base)) != DC_OK) {
        dc_delta_reader_free(&r);
        dc_st_close(base);
        return dc_cli_fail("inspect", st, "%s", path);
    }
    if (!r.target_header) {
        dc_delta_reader_free(&r);
        return dc_cli_fail("inspect", DC_ERR_INVALID,
                           "%s: its target header is its base's (not stored): pass --base BASE",
                           path);
    }
    dc_st_file_t *lay;
    void *lmap;
    if ((st = dc_delta_layout(&r, &lay, &lmap)) != DC_OK) {
        dc_delta_reader_free(&r);
        dc_st_close(base);
        return dc_cli_fail("inspect", st, "%s", path);
    }
    size_t nt = dc_st_count(lay);
    dc_tstat_t *ts = calloc(nt + 1, sizeof(*ts));
    dc_codec_t *codec = NULL;
    int rc = DC_EXIT_FAIL;
    /* frames by positions method (sparse kinds) and by values method */
    uint64_t pmeth[DC_ENT_METHOD_COUNT] = {0}, vmeth[DC_ENT_METHOD_COUNT] = {0};
    if (!ts || (st = dc_codec_create((size_t)dc_delta_max_chunk_bytes(lay, r.info.chunk_size),
                                   &codec)) != DC_OK) {
        st = ts ? st : DC_ERR_NOMEM;
        dc_cli_fail("inspect", st, "%s", path);
        goto out;
    }
    for (;;) {
        dc_frame_hdr_t h;
        const uint8_t *payload;
        int done;
        if ((st = dc_delta_reader_next(&r, &h, &payload, &done)) != DC_OK) {
            dc_cli_fail("inspect", st, "%s", path);
            goto out;
        }
        if (done)
            break;
        if (h.tensor_id >= nt) {
            dc_cli_fail("inspect", DC_ERR_FORMAT, "%s: frame names tensor %u of %zu", path,
                        h.tensor_id, nt);
            goto out;
        }
        const dc_st_tensor_t *t = dc_st_tensor(lay, h.tensor_id);
        unsigned w = (unsigned)dc_dtype_size(t->dtype);
        if (h.dtype != t->dtype || h.elem_count * w > r.info.chunk_size + 8 ||
            h.elem_offset + h.elem_count > t->nelems) {
            dc_cli_fail("inspect", DC_ERR_FORMAT, "%s: frame %llu does not fit tensor '%s'",
                        path, (unsigned long long)r.frames_read, t->name);
            goto out;
        }
        if ((st = dc_frame_check_payload(&h, payload, h.payload_len)) != DC_OK) {
            dc_cli_fail("inspect", st, "%s", path);
            goto out;
        }
        dc_chunk_stats_t cs;
        if ((st = dc_codec_inspect(codec, h.encoding, payload, h.payload_len,
                                   (size_t)h.elem_count, w, &cs)) != DC_OK) {
            dc_cli_fail("inspect", st, "%s: tensor '%s' chunk %u", path, t->name, h.chunk_index);
            goto out;
        }
        unsigned pm = dc_enc_pos_method(h.encoding), vm = dc_enc_val_method(h.encoding);
        if (pm)
            pmeth[pm < DC_ENT_METHOD_COUNT ? pm : 0]++;
        vmeth[vm < DC_ENT_METHOD_COUNT ? vm : 0]++;
        dc_tstat_t *s = &ts[h.tensor_id];
        s->frames++;
        s->kinds[dc_enc_kind(h.encoding)]++;
        s->payload += h.payload_len;
        s->pos += cs.pos_bytes;
        s->val += cs.val_bytes;
        if (cs.changed != UINT64_MAX) {
            s->changed += cs.changed;
            s->known_elems += h.elem_count;
        }
        if (cs.bound_bits >= 0) {
            s->bound += cs.bound_bits / 8.0;
            s->bounded_payload += h.payload_len;
        }
    }
    dc_tstat_t tot;
    memset(&tot, 0, sizeof(tot));
    json_t *arr = json ? json_array() : NULL;
    if (!json)
        printf("%-40s %-6s %12s %7s %9s %6s %6s %6s %6s %6s %11s %10s %10s %7s\n", "tensor",
               "dtype", "elements", "frames", "changed%", "ctxS", "xorS", "putS", "xorD", "putD", "payload",
               "positions", "values", "bound");
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(lay, i);
        dc_tstat_t *s = &ts[i];
        tot.frames += s->frames;
        for (int k = 0; k <= DC_ENC_KIND_MAX; k++)
            tot.kinds[k] += s->kinds[k];
        tot.payload += s->payload;
        tot.pos += s->pos;
        tot.val += s->val;
        tot.changed += s->changed;
        tot.known_elems += s->known_elems;
        tot.bound += s->bound;
        tot.bounded_payload += s->bounded_payload;
        /* chunks without frames are unchanged: they count as known, 0 changes */
        uint64_t ce = dc_delta_chunk_elems(r.info.chunk_size, (unsigned)dc_dtype_size(t->dtype));
        uint64_t nch = (t->nelems + ce - 1) / ce;
        int all_framed = s->frames == nch;
        double rate = s->kinds[4] && all_framed ? -1.0
                      : t->nelems ? (double)s->changed / (double)t->nelems
                                  : 0.0;
        double ratio = s->bound > 0 ? s->bounded_payload / s->bound : 0.0;
        if (json) {
            json_t *o = json_pack("{s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}",
                                  "name", t->name, "dtype", dc_dtype_name(t->dtype), "shape",
                                  dc_shape_json(t), "elements", (json_int_t)t->nelems, "frames",
                                  (json_int_t)s->frames, "ctx_sparse",
                                  (json_int_t)s->kinds[DC_ENC_CTX], "xor_sparse",
                                  (json_int_t)s->kinds[1],
                                  "put_sparse", (json_int_t)s->kinds[2], "xor_dense",
                                  (json_int_t)s->kinds[3], "put_dense", (json_int_t)s->kinds[4],
                                  "payload_bytes", (json_int_t)s->payload, "pos_bytes",
                                  (json_int_t)s->pos, "val_bytes", (json_int_t)s->val,
                                  "bound_bytes", s->bound);
            json_object_set_new(o, "change_rate", rate < 0 ? json_null() : json_real(rate));
            json_object_set_new(o, "ratio_to_bound", ratio > 0 ? json_real(ratio) : json_null());
            json_array_append_new(arr, o);
        } else {
            char rb[16], qb[16];
            if (rate < 0)
                snprintf(rb, sizeof(rb), "new");
            else
                snprintf(rb, sizeof(rb), "%.4f", 100.0 * rate);
            if (ratio > 0)
                snprintf(qb, sizeof(qb), "%.3fx", ratio);
            else
                snprintf(qb, sizeof(qb), "-");
            printf("%-40s %-6s %12llu %7llu %9s %6llu %6llu %6llu %6llu %6llu %11llu %10llu %10llu "
                   "%7s\n",
                   t->name, dc_dtype_name(t->dtype), (unsigned long long)t->nelems,
                   (unsigned long long)s->frames, rb, (unsigned long long)s->kinds[DC_ENC_CTX],
                   (unsigned long long)s->kinds[1],
                   (unsigned long long)s->kinds[2], (unsigned long long)s->kinds[3],
                   (unsigned long long)s->kinds[4], (unsigned long long)s->payload,
                   (unsigned long long)s->pos, (unsigned long long)s->val, qb);
        }
    }
    /* everything that is not payload: file header, target header, frame
     * headers (v1) or records and group CRCs (v2) */
    uint64_t overhead = len - tot.payload;
    double oshare = tot.payload ? (double)overhead / (double)tot.payload : 0.0;
    char bd[33], td[33];
    dc_hex16(r.info.base_digest, bd);
    dc_hex16(r.info.target_digest, td);
    double ratio = tot.bound > 0 ? tot.bounded_payload / tot.bound : 0.0;
    if (json) {
        json_t *j = json_pack(
            "{s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
            " s:I, s:f, s:o}",
            "kind", "delta", "path", path, "delta_bytes", (json_int_t)len, "base_bytes",
            (json_int_t)r.info.base_size, "target_bytes", (json_int_t)r.info.target_size,
            "base_digest", bd, "target_digest", td, "chunk_size", (json_int_t)r.info.chunk_size,
            "frames", (json_int_t)tot.frames, "ctx_sparse", (json_int_t)tot.kinds[DC_ENC_CTX],
            "xor_sparse", (json_int_t)tot.kinds[1],
            "put_sparse", (json_int_t)tot.kinds[2], "xor_dense", (json_int_t)tot.kinds[3],
            "put_dense", (json_int_t)tot.kinds[4], "payload_bytes", (json_int_t)tot.payload,
            "pos_bytes", (json_int_t)tot.pos, "val_bytes", (json_int_t)tot.val, "bound_bytes",
            tot.bound, "tensor_list", arr);
        if (j) {
            json_object_set_new(j, "ratio_to_bound", ratio > 0 ? json_real(ratio) : json_null());
            json_t *pj = json_object(), *vj = json_object();
            for (unsigned m = 0; m < DC_ENT_METHOD_COUNT; m++) {
                if (m == DC_ENT_GOLOMB || m == DC_ENT_GAPS)
                    json_object_set_new(pj, dc_ent_method_name(m),
                                        json_integer((json_int_t)pmeth[m]));
                else
                    json_object_set_new(vj, dc_ent_method_name(m),
                                        json_integer((json_int_t)vmeth[m]));
            }
            json_object_set_new(j, "positions_methods", pj);
            json_object_set_new(j, "values_methods", vj);
            json_object_set_new(j, "format_version", json_integer(r.info.version));
            json_object_set_new(j, "target_header_stored_bytes",
                                json_integer((json_int_t)r.info.target_header_stored));
            json_object_set_new(j, "overhead_bytes", json_integer((json_int_t)overhead));
            json_object_set_new(j, "overhead_share",
                                tot.payload ? json_real(oshare) : json_null());
        }
        dc_print_json(j);
    } else {
        printf("delta %s: %zu bytes (%.3f%% of the %llu-byte target), chunk size %llu, %llu "
               "frames (ctx-sparse %llu, xor-sparse %llu, put-sparse %llu, xor-dense %llu, "
               "put-dense %llu); "
               "payload %llu = positions %llu + values %llu + stream headers; %.3fx the "
               "entropy bound\n  base digest %s (%llu bytes)\n  target digest %s\n",
               path, len, r.info.target_size ? 100.0 * (double)len / (double)r.info.target_size : 0,
               (unsigned long long)r.info.target_size, (unsigned long long)r.info.chunk_size,
               (unsigned long long)tot.frames, (unsigned long long)tot.kinds[DC_ENC_CTX],
               (unsigned long long)tot.kinds[1], (unsigned long long)tot.kinds[2],
               (unsigned long long)tot.kinds[3], (unsigned long long)tot.kinds[4],
               (unsigned long long)tot.payload,
               (unsigned long long)tot.pos, (unsigned long long)tot.val, ratio, bd,
               (unsigned long long)r.info.base_size, td);
        printf("  frames by stream method: positions golomb %llu, gaps %llu; values raw %llu, "
               "zstd %llu, rans %llu, planes %llu\n",
               (unsigned long long)pmeth[DC_ENT_GOLOMB], (unsigned long long)pmeth[DC_ENT_GAPS],
               (unsigned long long)vmeth[DC_ENT_RAW], (unsigned long long)vmeth[DC_ENT_ZSTD],
               (unsigned long long)vmeth[DC_ENT_RANS], (unsigned long long)vmeth[DC_ENT_PLANES]);
        printf("  format version %u; overhead %llu bytes (%.3f%% of the payload): target "
               "header %llu stored of %llu\n",
               r.info.version, (unsigned long long)overhead, 100.0 * oshare,
               (unsigned long long)r.info.target_header_stored,
               (unsigned long long)r.info.target_header_len);
    }
    rc = DC_EXIT_OK;
out:
    dc_codec_free(codec);
    free(ts);
    dc_st_close(lay);
    dc_delta_layout_free(&r, lmap);
    dc_delta_reader_free(&r);
    dc_st_close(base);
    return rc;
}

int dc_cmd_inspect(int argc, char **argv)
{
    enum { O_JSON = 1000, O_BASE };
    static const struct option opts[] = {
        {"json", no_argument, NULL, O_JSON},
        {"base", required_argument, NULL, O_BASE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    const char *base_path = NULL;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("inspect", argc, argv, "h", opts)) != -1) {
        if (c == 'h') {
            dc_inspect_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == O_JSON) {
            json = true;
            continue;
        }
        if (c == O_BASE) {
            base_path = optarg;
            continue;
        }
        return DC_EXIT_USAGE;
    }
    if (argc - optind != 1)
        return dc_cli_usage_error("inspect", "expected one FILE");
    const char *path = argv[optind];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        dc_error_errno(DC_ERR_IO, errno, "cannot open '%s'", path);
        return dc_cli_fail("inspect", DC_ERR_IO, NULL);
    }
    struct stat sb;
    if (dc_fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        dc_error(DC_ERR_IO, "'%s' is not a regular file", path);
        return dc_cli_fail("inspect", DC_ERR_IO, NULL);
    }
    uint8_t magic[8] = {0};
    ssize_t got = pread(fd, magic, 8, 0);
    if (got == 8 && memcmp(magic, DC_DELTA_MAGIC, 8) == 0) {
        size_t len = (size_t)sb.st_size;
        void *m = NULL;
        dc_status_t st = dc_file_map_read(fd, path, len, 0, &m);
        close(fd);
        if (st != DC_OK)
            return dc_cli_fail("inspect", st, NULL);
        int rc = dc_inspect_delta(path, m, len, base_path, json);
        munmap(m, len);
        return rc;
    }
    close(fd);
    return dc_inspect_ckpt(path, json);
}
