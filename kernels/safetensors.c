/*
 * safetensors.c - reading (mmap + full validation) and writing (atomic,
 * byte-compatible with the reference implementation) of safetensors files.
 *
 * Reading:
 *
 *   [u64 LE n][n bytes JSON header (+ space padding)][data region]
 *   |<---------- data_offset = 8 + n ------------>|
 *
 *   The JSON is parsed with jansson (duplicate keys rejected).  Every tensor
 *   entry must have a known dtype, a shape of at most DC_ST_MAX_NDIM
 *   non-negative integers and data_offsets [b, e] with e - b == prod(shape) *
 *   dtype size (overflow-checked).  Sorted by offset, the ranges must tile
 *   the data region exactly: the first begins at 0, each begins where the
 *   previous ends, the last ends at the end of the file.  __metadata__, when
 *   present, must be an object whose values are strings.
 *
 * Writing:
 *
 *   The header is emitted like serde_json::to_string() in the reference
 *   (compact, "__metadata__" first, tensors in layout order, keys dtype,
 *   shape, data_offsets), padded with spaces to a multiple of 8 bytes, so a
 *   file written here is byte-identical to one written by the Python
 *   library for the same tensor order.  Data goes to "<dir>/.<name>.tmp.*",
 *   finish() checks the size, fsyncs, renames and fsyncs the directory.
 */
#include "kernels/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- dtypes --------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dc_dtype_info[DC_DTYPE_COUNT] = {
    [DC_DTYPE_BOOL] = {"BOOL", 1},     [DC_DTYPE_U8] = {"U8", 1},
    [DC_DTYPE_I8] = {"I8", 1},         [DC_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [DC_DTYPE_F8_E5M2] = {"F8_E5M2", 1}, [DC_DTYPE_I16] = {"I16", 2},
    [DC_DTYPE_U16] = {"U16", 2},       [DC_DTYPE_F16] = {"F16", 2},
    [DC_DTYPE_BF16] = {"BF16", 2},     [DC_DTYPE_I32] = {"I32", 4},
    [DC_DTYPE_U32] = {"U32", 4},       [DC_DTYPE_F32] = {"F32", 4},
    [DC_DTYPE_I64] = {"I64", 8},       [DC_DTYPE_U64] = {"U64", 8},
    [DC_DTYPE_F64] = {"F64", 8},
};

size_t dc_dtype_size(dc_dtype_t dt)
{
    return (unsigned)dt < DC_DTYPE_COUNT ? dc_dtype_info[dt].size : 0;
}

const char *dc_dtype_name(dc_dtype_t dt)
{
    return (unsigned)dt < DC_DTYPE_COUNT ? dc_dtype_info[dt].name : "?";
}

/* Exact match of the safetensors spelling. */
static int dc_dtype_lookup(const char *name)
{
    for (int i = 0; i < DC_DTYPE_COUNT; i++)
        if (strcmp(name, dc_dtype_info[i].name) == 0)
            return i;
    return -1;
}

dc_status_t dc_dtype_parse(const char *name, dc_dtype_t *out)
{
    if (!name)
        return dc_error(DC_ERR_FORMAT, "missing dtype");
    char up[16];
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof(up))
        return dc_error(DC_ERR_FORMAT, "unknown dtype '%.40s'", name);
    for (size_t i = 0; i <= n; i++) {
        char c = name[i];
        up[i] = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
    }
    int i = dc_dtype_lookup(up);
    if (i < 0)
        return dc_error(DC_ERR_FORMAT, "unknown dtype '%.40s'", name);
    *out = (dc_dtype_t)i;
    return DC_OK;
}

/* --- a tiny growable buffer and serde_json-compatible string output ------- */

typedef struct dc_sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} dc_sbuf_t;

static void dc_sbuf_put(dc_sbuf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void dc_sbuf_puts(dc_sbuf_t *b, const char *s) { dc_sbuf_put(b, s, strlen(s)); }

static void dc_sbuf_u64(dc_sbuf_t *b, uint64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof(t), "%" PRIu64, v);
    dc_sbuf_put(b, t, (size_t)n);
}

/* A JSON string literal exactly as serde_json writes it: '"' and '\\'
 * escaped, \b \t \n \f \r short forms, other C0 controls as \u00xx (lower
 * case hex), everything else (including UTF-8 and DEL) verbatim. */
static void dc_sbuf_jstr(dc_sbuf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    dc_sbuf_put(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\t': esc = "\\t"; break;
        case '\n': esc = "\\n"; break;
        case '\f': esc = "\\f"; break;
        case '\r': esc = "\\r"; break;
        default:
            if (c < 0x20) {
                u[0] = '\\', u[1] = 'u', u[2] = '0', u[3] = '0';
                u[4] = hex[c >> 4], u[5] = hex[c & 15], u[6] = 0;
                esc = u;
            }
        }
        if (esc) {
            dc_sbuf_put(b, run, (size_t)(s - run));
            dc_sbuf_puts(b, esc);
            run = s + 1;
        }
    }
    dc_sbuf_put(b, run, (size_t)(s - run));
    dc_sbuf_put(b, "\"", 1);
}

/* Emit a jansson object of strings compactly, in its (insertion) order. */
static void dc_sbuf_meta(dc_sbuf_t *b, json_t *obj)
{
    const char *k;
    json_t *v;
    bool first = true;
    dc_sbuf_put(b, "{", 1);
    json_object_foreach(obj, k, v)
    {
        if (!first)
            dc_sbuf_put(b, ",", 1);
        first = false;
        dc_sbuf_jstr(b, k);
        dc_sbuf_put(b, ":", 1);
        dc_sbuf_jstr(b, json_string_value(v));
    }
    dc_sbuf_put(b, "}", 1);
}

/* --- header parsing --------------------------------------------------------- */

/* Result of parsing one header. */
typedef struct dc_st_parsed {
    dc_st_tensor_t *tensors;
    size_t count;
    size_t *by_name; /* indices of tensors sorted by name */
    char *metadata;  /* compact JSON or NULL */
} dc_st_parsed_t;

static void dc_st_parsed_free(dc_st_parsed_t *p)
{
    if (p->tensors)
        for (size_t i = 0; i < p->count; i++)
            free((char *)p->tensors[i].name);
    free(p->tensors);
    free(p->by_name);
    free(p->metadata);
    memset(p, 0, sizeof(*p));
}

typedef struct {
    dc_st_tensor_t *t;
    size_t idx; /* position in the JSON (tie-break: empty tensors) */
} dc_st_sortent_t;

static int dc_st_cmp_offset(const void *a, const void *b)
{
    const dc_st_sortent_t *x = a, *y = b;
    if (x->t->begin != y->t->begin)
        return x->t->begin < y->t->begin ? -1 : 1;
    if (x->t->end != y->t->end)
        return x->t->end < y->t->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int dc_st_cmp_name_r(const void *a, const void *b, void *ctx)
{
    const dc_st_tensor_t *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Read a non-negative JSON integer. */
static bool dc_st_json_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v))
        return false;
    json_int_t i = json_integer_value(v);
    if (i < 0)
        return false;
    *out = (uint64_t)i;
    return true;
}

/*
 * Parse and validate the JSON header `json`/`n` (without the length prefix)
 * against a data region of `data_size` bytes.  `what` names the file in
 * messages.  Fills *out on success.
 */
static dc_status_t dc_st_parse_header(const char *what, const uint8_t *json, size_t n,
                                      uint64_t data_size, dc_st_parsed_t *out)
{
    dc_status_t st = DC_OK;
    dc_st_parsed_t p = {0};
    dc_st_sortent_t *ents = NULL;
    json_t *root = NULL;
    json_error_t jerr;

    if (n == 0 || json[0] != '{') {
        return dc_error(DC_ERR_FORMAT, "%s: header does not start with '{' (not a safetensors file?)",
                        what);
    }
    root = json_loadb((const char *)json, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        return dc_error(DC_ERR_FORMAT, "%s: header JSON invalid at byte %d: %s", what,
                        jerr.position, jerr.text);
    }
    if (!json_is_object(root)) {
        st = dc_error(DC_ERR_FORMAT, "%s: header is not a JSON object", what);
        goto out_json;
    }

    size_t nkeys = json_object_size(root);
    json_t *meta = json_object_get(root, "__metadata__");
    size_t count = nkeys - (meta ? 1 : 0);
    if (meta) {
        if (!json_is_object(meta)) {
            st = dc_error(DC_ERR_FORMAT, "%s: __metadata__ is not a JSON object", what);
            goto out_json;
        }
        const char *k;
        json_t *v;
        json_object_foreach(meta, k, v)
        {
            if (!json_is_string(v)) {
                st = dc_error(DC_ERR_FORMAT, "%s: __metadata__ value of '%.80s' is not a string",
                              what, k);
                goto out_json;
            }
        }
        dc_sbuf_t mb = {0};
        dc_sbuf_meta(&mb, meta);
        if (mb.oom) {
            free(mb.p);
            st = dc_error(DC_ERR_NOMEM, "%s: out of memory for the header", what);
            goto out_json;
        }
        p.metadata = mb.p;
    }

    p.tensors = calloc(count ? count : 1, sizeof(*p.tensors));
    p.by_name = calloc(count ? count : 1, sizeof(*p.by_name));
    ents = calloc(count ? count : 1, sizeof(*ents));
    if (!p.tensors || !p.by_name || !ents) {
        st = dc_error(DC_ERR_NOMEM, "%s: out of memory for %zu tensors", what, count);
        goto out_parsed;
    }

    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach(root, key, val)
    {
        if (val == meta && strcmp(key, "__metadata__") == 0)
            continue;
        dc_st_tensor_t *t = &p.tensors[i];
        if (!json_is_object(val)) {
            st = dc_error(DC_ERR_FORMAT, "%s: tensor '%.80s': entry is not a JSON object", what,
                          key);
            goto out_parsed;
        }
        json_t *jd = json_object_get(val, "dtype");
        json_t *js = json_object_get(val, "shape");
        json_t *jo = json_object_get(val, "data_offsets");
        if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
            st = dc_error(DC_ERR_FORMAT,
                          "%s: tensor '%.80s': needs string \"dtype\", array \"shape\" and "
                          "array \"data_offsets\"",
                          what, key);
            goto out_parsed;
        }
        int dt = dc_dtype_lookup(json_string_value(jd));
        if (dt < 0) {
            st = dc_error(DC_ERR_FORMAT, "%s: tensor '%.80s': unknown dtype '%.40s'", what, key,
                          json_string_value(jd));
            goto out_parsed;
        }
        t->dtype = (dc_dtype_t)dt;
        size_t nd = json_array_size(js);
        if (nd > DC_ST_MAX_NDIM) {
            st = dc_error(DC_ERR_FORMAT, "%s: tensor '%.80s': %zu dimensions (at most %d)", what,
                          key, nd, DC_ST_MAX_NDIM);
            goto out_parsed;
        }
        t->ndim = (int)nd;
        uint64_t ne = 1;
        for (size_t d = 0; d < nd; d++) {
            if (!dc_st_json_u64(json_array_get(js, d), &t->shape[d])) {
                st = dc_error(DC_ERR_FORMAT,
                              "%s: tensor '%.80s': shape[%zu] is not a non-negative integer", what,
                              key, d);
                goto out_parsed;
            }
            if (!dc_mul_u64(ne, t->shape[d], &ne)) {
                st = dc_error(DC_ERR_FORMAT, "%s: tensor '%.80s': element count overflows", what,
                              key);
                goto out_parsed;
            }
        }
        t->nelems = ne;
        if (json_array_size(jo) != 2 || !dc_st_json_u64(json_array_get(jo, 0), &t->begin) ||
            !dc_st_json_u64(json_array_get(jo, 1), &t->end)) {
            st = dc_error(DC_ERR_FORMAT,
                          "%s: tensor '%.80s': data_offsets must be two non-negative integers",
                          what, key);
            goto out_parsed;
        }
        uint64_t bytes;
        if (!dc_mul_u64(ne, dc_dtype_size(t->dtype), &bytes)) {
            st = dc_error(DC_ERR_FORMAT, "%s: tensor '%.80s': byte size overflows", what, key);
            goto out_parsed;
        }
        if (t->end < t->begin || t->end - t->begin != bytes) {
            st = dc_error(DC_ERR_FORMAT,
                          "%s: tensor '%.80s': data_offsets [%" PRIu64 ", %" PRIu64
                          "] do not hold %" PRIu64 " x %s (%" PRIu64 " bytes)",
                          what, key, t->begin, t->end, ne, dc_dtype_name(t->dtype), bytes);
            goto out_parsed;
        }
        if (t->end > data_size) {
            st = dc_error(DC_ERR_FORMAT,
                          "%s: tensor '%.80s': data_offsets [%" PRIu64 ", %" PRIu64
                          "] beyond the data region (%" PRIu64 " bytes)",
                          what, key, t->begin, t->end, data_size);
            goto out_parsed;
        }
        t->name = strdup(key);
        if (!t->name) {
            st = dc_error(DC_ERR_NOMEM, "%s: out of memory for tensor names", what);
            goto out_parsed;
        }
        p.count = ++i; /* names[0..i) owned from here on */
        ents[i - 1].t = t;
        ents[i - 1].idx = i - 1;
    }
    if (i != count) { /* only if "__metadata__" appeared twice, which jansson refuses */
        st = dc_error(DC_ERR_FORMAT, "%s: inconsistent header", what);
        goto out_parsed;
    }

    /* Order by offset and check that the ranges tile [0, data_size). */
    qsort(ents, count, sizeof(*ents), dc_st_cmp_offset);
    uint64_t pos = 0;
    for (size_t k = 0; k < count; k++) {
        const dc_st_tensor_t *t = ents[k].t;
        if (t->begin != pos) {
            if (t->begin < pos)
                st = dc_error(DC_ERR_FORMAT,
                              "%s: tensor '%.80s' [%" PRIu64 ", %" PRIu64
                              ") overlaps the previous tensor (ending at %" PRIu64 ")",
                              what, t->name, t->begin, t->end, pos);
            else
                st = dc_error(DC_ERR_FORMAT,
                              "%s: gap in the data region before tensor '%.80s' (bytes %" PRIu64
                              "..%" PRIu64 " unused)",
                              what, t->name, pos, t->begin);
            goto out_parsed;
        }
        pos = t->end;
    }
    if (pos != data_size) {
        st = dc_error(DC_ERR_FORMAT,
                      "%s: tensors cover %" PRIu64 " bytes but the data region has %" PRIu64
                      " (truncated or trailing bytes)",
                      what, pos, data_size);
        goto out_parsed;
    }

    /* Rebuild the tensor array in offset order. */
    dc_st_tensor_t *sorted = calloc(count ? count : 1, sizeof(*sorted));
    if (!sorted) {
        st = dc_error(DC_ERR_NOMEM, "%s: out of memory", what);
        goto out_parsed;
    }
    for (size_t k = 0; k < count; k++)
        sorted[k] = *ents[k].t;
    free(p.tensors);
    p.tensors = sorted;
    for (size_t k = 0; k < count; k++)
        p.by_name[k] = k;
    qsort_r(p.by_name, count, sizeof(size_t), dc_st_cmp_name_r, p.tensors);

    free(ents);
    json_decref(root);
    *out = p;
    return DC_OK;

out_parsed:
    free(ents);
    dc_st_parsed_free(&p);
out_json:
    json_decref(root);
    return st;
}

/*
 * Validate a whole file image (length prefix + header + data) of `size`
 * bytes at `map`.  Returns the header length n.
 */
static dc_status_t dc_st_parse_image(const char *what, const uint8_t *map, uint64_t size,
                                     uint64_t *hdr_n, dc_st_parsed_t *out)
{
    if (size < 8)
        return dc_error(DC_ERR_FORMAT, "%s: %" PRIu64 " bytes is too short for a safetensors file",
                        what, size);
    uint64_t n = dc_load_le64(map);
    if (n > DC_ST_MAX_HEADER)
        return dc_error(DC_ERR_FORMAT,
                        "%s: header length %" PRIu64 " exceeds the limit of %u bytes (not a safetensors file?)", what, n,
                        DC_ST_MAX_HEADER);
    if (n > size - 8)
        return dc_error(DC_ERR_FORMAT,
                        "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                        " bytes; truncated?)",
                        what, n, size);
    dc_status_t st = dc_st_parse_header(what, map + 8, (size_t)n, size - 8 - n, out);
    if (st == DC_OK)
        *hdr_n = n;
    return st;
}

/* --- the file object -------------------------------------------------------- */

struct dc_st_file {
    char *path;
    int fd;             /* -1 for memory images */
    uint8_t *map;
    uint64_t size;
    bool mapped;        /* munmap on close */
    bool writable;
    uint64_t hdr_n;
    dc_st_parsed_t p;
};

static dc_status_t dc_st_file_finish(dc_st_file_t *f, dc_st_file_t **out)
{
    dc_status_t st = dc_st_parse_image(f->path, f->map, f->size, &f->hdr_n, &f->p);
    if (st != DC_OK)
        return st;
    *out = f;
    return DC_OK;
}

dc_status_t dc_st_open(const char *path, int flags, dc_st_file_t **out)
{
    if (!path || !out || (flags & ~(DC_ST_WRITABLE | DC_ST_POPULATE)))
        return dc_error(DC_ERR_INVALID, "dc_st_open: bad arguments");
    dc_status_t st;
    bool wr = (flags & DC_ST_WRITABLE) != 0;
    dc_st_file_t *f = calloc(1, sizeof(*f));
    if (!f)
        return dc_error(DC_ERR_NOMEM, "%s: out of memory", path);
    f->fd = -1;
    f->writable = wr;
    f->path = strdup(path);
    if (!f->path) {
        st = dc_error(DC_ERR_NOMEM, "%s: out of memory", path);
        goto out_free;
    }
    f->fd = open(path, (wr ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        st = dc_error_errno(e == ENOENT ? DC_ERR_NOT_FOUND : DC_ERR_IO, e, "cannot open '%s'",
                            path);
        goto out_free;
    }
    struct stat sb;
    if (dc_fstat(f->fd, &sb) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "cannot stat '%s'", path);
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = dc_error(DC_ERR_FORMAT, "%s: not a regular file", path);
        goto out_close;
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size < 8) {
        st = dc_error(DC_ERR_FORMAT,
                      "%s: %" PRIu64 " bytes is too short for a safetensors file", path, f->size);
        goto out_close;
    }
    if (f->size > (uint64_t)SIZE_MAX) {
        st = dc_error(DC_ERR_UNSUPPORTED, "%s: file too large to map", path);
        goto out_close;
    }
    void *m;
    if (wr) {
        /* A writable map is a receiver's copy of the weights, written in
         * place by the next refit.  Its blocks are reserved first: a hole
         * (a zero tensor copied with cp --sparse) on a full file system is
         * an error here, naming the file, not a SIGBUS mid-apply.  Its page
         * tables are filled now (one pass at open) rather than by one minor
         * fault per page inside the refit. */
        st = dc_file_reserve(f->fd, path, f->size);
        if (st != DC_OK)
            goto out_close;
        m = mmap(NULL, (size_t)f->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, f->fd,
                 0);
        if (m == MAP_FAILED) {
            st = dc_error_errno(DC_ERR_IO, errno, "cannot mmap '%s'", path);
            goto out_close;
        }
    } else {
        st = dc_file_map_read(f->fd, path, (size_t)f->size, (flags & DC_ST_POPULATE) != 0, &m);
        if (st != DC_OK)
            goto out_close;
    }
    f->map = m;
    f->mapped = true;
    dc_file_map_note(m, (size_t)f->size, path); /* named if it ever faults */
    st = dc_st_file_finish(f, out);
    if (st != DC_OK)
        goto out_unmap;
    return DC_OK;

out_unmap:
    dc_file_map_forget(f->map);
    munmap(f->map, (size_t)f->size);
out_close:
    close(f->fd);
out_free:
    free(f->path);
    free(f);
    return st;
}

dc_status_t dc_st_open_mem(const void *buf, size_t len, const char *name, dc_st_file_t **out)
{
    if ((!buf && len) || !out)
        return dc_error(DC_ERR_INVALID, "dc_st_open_mem: bad arguments");
    dc_st_file_t *f = calloc(1, sizeof(*f));
    if (!f)
        return dc_error(DC_ERR_NOMEM, "out of memory");
    f->fd = -1;
    f->path = strdup(name ? name : "<memory>");
    f->map = (uint8_t *)buf;
    f->size = len;
    if (!f->path) {
        free(f);
        return dc_error(DC_ERR_NOMEM, "out of memory");
    }
    dc_status_t st = dc_st_file_finish(f, out);
    if (st != DC_OK) {
        free(f->path);
        free(f);
    }
    return st;
}

void dc_st_close(dc_st_file_t *f)
{
    if (!f)
        return;
    dc_st_parsed_free(&f->p);
    if (f->mapped) {
        dc_file_map_forget(f->map);
        munmap(f->map, (size_t)f->size);
    }
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f);
}

size_t dc_st_count(const dc_st_file_t *f) { return f->p.count; }

const dc_st_tensor_t *dc_st_tensor(const dc_st_file_t *f, size_t i)
{
    return i < f->p.count ? &f->p.tensors[i] : NULL;
}

const dc_st_tensor_t *dc_st_find(const dc_st_file_t *f, const char *name)
{
    size_t lo = 0, hi = f->p.count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const dc_st_tensor_t *t = &f->p.tensors[f->p.by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

uint8_t *dc_st_data(const dc_st_file_t *f, const dc_st_tensor_t *t)
{
    return f->map + 8 + f->hdr_n + t->begin;
}

const uint8_t *dc_st_header_raw(const dc_st_file_t *f, size_t *len)
{
    if (len)
        *len = (size_t)(8 + f->hdr_n);
    return f->map;
}

const char *dc_st_metadata(const dc_st_file_t *f) { return f->p.metadata; }
uint64_t dc_st_file_size(const dc_st_file_t *f) { return f->size; }
const uint8_t *dc_st_map(const dc_st_file_t *f) { return f->map; }
uint64_t dc_st_data_offset(const dc_st_file_t *f) { return 8 + f->hdr_n; }
const char *dc_st_path(const dc_st_file_t *f) { return f->path; }

dc_status_t dc_st_sync(dc_st_file_t *f)
{
    if (!f->writable || !f->mapped)
        return dc_error(DC_ERR_INVALID, "%s: not opened writable", f->path);
    if (msync(f->map, (size_t)f->size, MS_SYNC) != 0)
        return dc_error_errno(DC_ERR_IO, errno, "msync '%s'", f->path);
    return DC_OK;
}

/* --- header construction ----------------------------------------------------- */

dc_status_t dc_st_header_build(const dc_st_desc_t *descs, size_t n, const char *metadata_json,
                               uint8_t **out, size_t *out_len, uint64_t *data_size)
{
    dc_status_t st = DC_OK;
    json_t *meta = NULL;
    dc_sbuf_t b = {0};
    uint64_t off = 0;

    if ((!descs && n) || !out || !out_len)
        return dc_error(DC_ERR_INVALID, "dc_st_header_build: bad arguments");
    if (metadata_json) {
        json_error_t jerr;
        meta = json_loads(metadata_json, JSON_REJECT_DUPLICATES, &jerr);
        if (!meta)
            return dc_error(DC_ERR_INVALID, "metadata is not valid JSON: %s", jerr.text);
        if (!json_is_object(meta)) {
            st = dc_error(DC_ERR_INVALID, "metadata must be a JSON object of strings");
            goto out;
        }
        const char *k;
        json_t *v;
        json_object_foreach(meta, k, v)
        {
            if (!json_is_string(v)) {
                st = dc_error(DC_ERR_INVALID, "metadata value of '%.80s' is not a string", k);
                goto out;
            }
        }
    }

    dc_sbuf_put(&b, "\0\0\0\0\0\0\0\0{", 9);
    bool first = true;
    if (meta) {
        dc_sbuf_puts(&b, "\"__metadata__\":");
        dc_sbuf_meta(&b, meta);
        first = false;
    }
    for (size_t i = 0; i < n; i++) {
        const dc_st_desc_t *d = &descs[i];
        if (!d->name || (unsigned)d->dtype >= DC_DTYPE_COUNT || d->ndim < 0 ||
            d->ndim > DC_ST_MAX_NDIM) {
            st = dc_error(DC_ERR_INVALID, "tensor %zu ('%.80s'): bad name, dtype or ndim", i,
                          d->name ? d->name : "(null)");
            goto out;
        }
        if (strcmp(d->name, "__metadata__") == 0) {
            st = dc_error(DC_ERR_INVALID, "'__metadata__' cannot name a tensor");
            goto out;
        }
        uint64_t ne = 1, bytes;
        for (int k = 0; k < d->ndim; k++)
            if (!dc_mul_u64(ne, d->shape[k], &ne)) {
                st = dc_error(DC_ERR_INVALID, "tensor '%.80s': element count overflows", d->name);
                goto out;
            }
        if (!dc_mul_u64(ne, dc_dtype_size(d->dtype), &bytes) || !dc_add_u64(off, bytes, &off) ||
            off > (uint64_t)INT64_MAX) {
            st = dc_error(DC_ERR_INVALID, "tensor '%.80s': size overflows", d->name);
            goto out;
        }
        if (!first)
            dc_sbuf_put(&b, ",", 1);
        first = false;
        dc_sbuf_jstr(&b, d->name);
        dc_sbuf_puts(&b, ":{\"dtype\":\"");
        dc_sbuf_puts(&b, dc_dtype_name(d->dtype));
        dc_sbuf_puts(&b, "\",\"shape\":[");
        for (int k = 0; k < d->ndim; k++) {
            if (k)
                dc_sbuf_put(&b, ",", 1);
            dc_sbuf_u64(&b, d->shape[k]);
        }
        dc_sbuf_puts(&b, "],\"data_offsets\":[");
        dc_sbuf_u64(&b, off - bytes);
        dc_sbuf_put(&b, ",", 1);
        dc_sbuf_u64(&b, off);
        dc_sbuf_puts(&b, "]}");
    }
    dc_sbuf_put(&b, "}", 1);
    while (!b.oom && (b.len - 8) % 8)
        dc_sbuf_put(&b, " ", 1);
    if (b.oom) {
        st = dc_error(DC_ERR_NOMEM, "out of memory building a safetensors header");
        goto out;
    }
    if (b.len - 8 > DC_ST_MAX_HEADER) {
        st = dc_error(DC_ERR_INVALID, "safetensors header of %zu bytes exceeds the limit", b.len - 8);
        goto out;
    }
    dc_store_le64(b.p, (uint64_t)(b.len - 8));

    /* Whatever we write, we must be able to read back: names must be valid
     * UTF-8 and unique, which the parser checks. */
    dc_st_parsed_t chk;
    st = dc_st_parse_header("new header", (const uint8_t *)b.p + 8, b.len - 8, off, &chk);
    if (st != DC_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", dc_last_error());
        st = dc_error(DC_ERR_INVALID, "cannot write these tensors: %s", why);
        goto out;
    }
    dc_st_parsed_free(&chk);

    *out = (uint8_t *)b.p;
    *out_len = b.len;
    if (data_size)
        *data_size = off;
    b.p = NULL;
out:
    free(b.p);
    json_decref(meta);
    return st;
}

/* --- writer -------------------------------------------------------------------- */

#define DC_ST_WBUF (4u << 20)

struct dc_st_writer {
    char *path;
    char *tmp;
    int fd;
    uint64_t expect;  /* data bytes still to come at create */
    uint64_t written; /* data bytes accepted */
    uint8_t *buf;
    size_t buf_len;
    bool failed;
};

static atomic_uint dc_st_tmp_counter;

static void dc_st_writer_free(dc_st_writer_t *w)
{
    if (w->fd >= 0)
        close(w->fd);
    free(w->buf);
    free(w->path);
    free(w->tmp);
    free(w);
}

static dc_status_t dc_st_writer_start(const char *path, const uint8_t *hdr, size_t hdr_len,
                                      uint64_t data_size, dc_st_writer_t **out)
{
    dc_status_t st;
    dc_st_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return dc_error(DC_ERR_NOMEM, "out of memory");
    w->fd = -1;
    w->expect = data_size;
    w->path = strdup(path);
    w->buf = malloc(DC_ST_WBUF);
    size_t plen = strlen(path);
    w->tmp = malloc(plen + 64);
    if (!w->path || !w->buf || !w->tmp) {
        st = dc_error(DC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* "<dir>/.<base>.tmp.<pid>.<n>" in the target's directory */
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path + 1) : 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(w->tmp, plen + 64, "%.*s.%s.tmp.%ld.%u", (int)dlen, path, path + dlen,
                 (long)getpid(), atomic_fetch_add(&dc_st_tmp_counter, 1));
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd >= 0 || errno != EEXIST)
            break;
    }
    if (w->fd < 0) {
        int e = errno;
        st = dc_error_errno(DC_ERR_IO, e, "cannot create '%s' (temporary '%s')", path, w->tmp);
        goto fail;
    }
    /* Reserve the space up front where the file system can (ENOSPC now,
     * not after gigabytes); silently skip where it cannot. */
    uint64_t total = (uint64_t)hdr_len + data_size;
    if (total > 0 && fallocate(w->fd, 0, 0, (off_t)total) != 0) {
        int e = errno;
        if (e == ENOSPC || e == EFBIG || e == EDQUOT) {
            st = dc_error_errno(DC_ERR_IO, e, "cannot write '%s' (%" PRIu64 " bytes)", path,
                                total);
            goto fail_unlink;
        }
    }
    st = dc_write_full(w->fd, hdr, hdr_len);
    if (st != DC_OK) {
        dc_error_prefix("writing '%s'", w->tmp);
        goto fail_unlink;
    }
    *out = w;
    return DC_OK;

fail_unlink:
    unlink(w->tmp);
fail:
    dc_st_writer_free(w);
    return st;
}

dc_status_t dc_st_writer_create(const char *path, const dc_st_desc_t *descs, size_t n,
                                const char *metadata_json, dc_st_writer_t **out)
{
    if (!path || !out)
        return dc_error(DC_ERR_INVALID, "dc_st_writer_create: bad arguments");
    uint8_t *hdr;
    size_t hlen;
    uint64_t dsize;
    dc_status_t st = dc_st_header_build(descs, n, metadata_json, &hdr, &hlen, &dsize);
    if (st != DC_OK) {
        dc_error_prefix("%s", path);
        return st;
    }
    st = dc_st_writer_start(path, hdr, hlen, dsize, out);
    free(hdr);
    return st;
}

dc_status_t dc_st_writer_create_raw(const char *path, const uint8_t *header_raw,
                                    size_t header_len, uint64_t data_size,
                                    dc_st_writer_t **out)
{
    if (!path || !out || !header_raw)
        return dc_error(DC_ERR_INVALID, "dc_st_writer_create_raw: bad arguments");
    if (header_len < 8 || dc_load_le64(header_raw) != header_len - 8)
        return dc_error(DC_ERR_FORMAT, "%s: raw header length prefix does not match %zu bytes",
                        path, header_len);
    if (header_len - 8 > DC_ST_MAX_HEADER)
        return dc_error(DC_ERR_FORMAT, "%s: raw header exceeds the limit", path);
    dc_st_parsed_t chk;
    dc_status_t st =
        dc_st_parse_header(path, header_raw + 8, header_len - 8, data_size, &chk);
    if (st != DC_OK)
        return st;
    dc_st_parsed_free(&chk);
    return dc_st_writer_start(path, header_raw, header_len, data_size, out);
}

static dc_status_t dc_st_writer_flush(dc_st_writer_t *w)
{
    if (w->buf_len == 0)
        return DC_OK;
    dc_status_t st = dc_write_full(w->fd, w->buf, w->buf_len);
    w->buf_len = 0;
    if (st != DC_OK) {
        w->failed = true;
        dc_error_prefix("writing '%s'", w->path);
    }
    return st;
}

dc_status_t dc_st_writer_write(dc_st_writer_t *w, const void *buf, size_t len)
{
    if (w->failed)
        return dc_error(DC_ERR_IO, "writing '%s': an earlier write failed", w->path);
    if (len > w->expect - w->written) {
        w->failed = true;
        return dc_error(DC_ERR_INVALID,
                        "writing '%s': %zu more bytes would exceed the %" PRIu64
                        " bytes the header declares",
                        w->path, len, w->expect);
    }
    w->written += len;
    if (w->buf_len + len <= DC_ST_WBUF) {
        memcpy(w->buf + w->buf_len, buf, len);
        w->buf_len += len;
        return DC_OK;
    }
    dc_status_t st = dc_st_writer_flush(w);
    if (st != DC_OK)
        return st;
    if (len >= DC_ST_WBUF / 2) {
        st = dc_write_full(w->fd, buf, len);
        if (st != DC_OK) {
            w->failed = true;
            dc_error_prefix("writing '%s'", w->path);
        }
        return st;
    }
    memcpy(w->buf, buf, len);
    w->buf_len = len;
    return DC_OK;
}

static void dc_st_fsync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    if (!dir)
        return;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(dir);
}

dc_status_t dc_st_writer_finish(dc_st_writer_t *w)
{
    dc_status_t st;
    if (!w)
        return dc_error(DC_ERR_INVALID, "dc_st_writer_finish: NULL writer");
    if (w->failed) {
        st = dc_error(DC_ERR_IO, "writing '%s': an earlier write failed", w->path);
        goto fail;
    }
    if (w->written != w->expect) {
        st = dc_error(DC_ERR_INVALID,
                      "writing '%s': %" PRIu64 " data bytes written but the header declares %" PRIu64,
                      w->path, w->written, w->expect);
        goto fail;
    }
    st = dc_st_writer_flush(w);
    if (st != DC_OK)
        goto fail;
    if (fsync(w->fd) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "fsync '%s'", w->tmp);
        goto fail;
    }
    if (close(w->fd) != 0) {
        w->fd = -1;
        st = dc_error_errno(DC_ERR_IO, errno, "close '%s'", w->tmp);
        goto fail;
    }
    w->fd = -1;
    if (rename(w->tmp, w->path) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "rename '%s' to '%s'", w->tmp, w->path);
        goto fail;
    }
    dc_st_fsync_dir(w->path);
    dc_st_writer_free(w);
    return DC_OK;

fail:
    unlink(w->tmp);
    dc_st_writer_free(w);
    return st;
}

void dc_st_writer_abort(dc_st_writer_t *w)
{
    if (!w)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    unlink(w->tmp);
    dc_st_writer_free(w);
}
