/*
 * perf_codec.c - `deltacast perf codec`: delta size, ratio to the entropy
 * bound, encode and apply throughput, side by side with xdelta3 and
 * `zstd --patch-from` measured in the same run on the same pairs.
 *
 * Pairs: DIR/opt1 (optimizer, 1%), DIR/inj3 (inject, 3%), DIR/inj5
 * (inject, 5%), each holding base.safetensors and next.safetensors;
 * generated with `gen` (in-process) when missing.  `--pair NAME=BASE,TARGET`
 * adds given checkpoint pairs (e.g. real optimizer steps written by
 * perf/train-steps.py); their deltas and baseline outputs go to DIR/NAME.
 *
 * "ratio_to_bound" is the payload of the XOR-coded frames against the bound
 * of the model each is coded with (bound_ctx_bytes: the base-conditioned
 * one for ctx-sparse frames, order-0 for the rest).
 *
 * Sizes are set against two entropy bounds the diff reports
 * (dc_delta_stats_t): the order-0 bound of the XOR-coded frames
 * (bound_bytes) and the base-conditioned bound (bound_ctx_bytes: change
 * probability by the base value's exponent, values as integer steps).  The
 * published codec's method is measured in-process as a third baseline:
 * positions as gaps in the smallest integer width and XOR words, each
 * stream through zstd level 1 (see dc_xorzstd_baseline()).
 *
 * deltacast is timed on the in-memory API (dc_delta_diff_buffers /
 * dc_delta_apply_buffers, inputs already in memory, output buffer already
 * faulted in) and also file to file (dc_delta_diff_files /
 * dc_delta_apply_files) under the same conditions as the baselines, which
 * run as child processes reading and writing files in DIR.  Put DIR on a
 * tmpfs (/dev/shm) so that disk speed does not decide the comparison.
 *
 * Throughput is reported in GB/s of checkpoint (target file bytes): by wall
 * time, and "per core" by process CPU time (robust on a shared machine).
 * Two references measured in the same runs bound the applies: XXH3-128 of
 * every chunk (an in-place apply reads and hashes it all) and memcpy of
 * every chunk from the base into the output buffer (an apply into a new
 * buffer moves at least that).
 */
#include "kernels/codec.h"
#include "kernels/delta.h"
#include "kernels/kern.h"
#include "kernels/safetensors.h"
#include "perf/perf.h"
#include "testkit/cmdline.h"
#include "testkit/gen.h"
#include "testkit/harness.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

extern char **environ;

#define DC_MAX_PAIRS 16 /* --pair */

static void dc_perf_codec_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast perf codec [--dir DIR] [--params N] [--runs R] [--threads T]\n"
            "                            [--chunk-size S] [--cases LIST] [--no-baselines]\n"
            "                            [--pair NAME=BASE,TARGET]...\n"
            "                            [--baseline-runs R] [--baseline-timeout SEC] [--json]\n"
            "                            [--json-file FILE]\n"
            "\n"
            "Measure the delta codec on gen pairs: delta size (%% of the checkpoint), ratio\n"
            "to the entropy bound, encode (diff+encode+compress) and apply throughput with\n"
            "one thread and with all, and the same pairs through xdelta3 -e -s and\n"
            "zstd --patch-from (size and time) and the published codec's method\n"
            "(positions as gaps + XOR words, each through zstd -1, in-process).  Every\n"
            "size is also set against the order-0 entropy bound.  Medians of R runs.\n"
            "The deltas are coded in the config codec_layout\n"
            "(DELTACAST_CODEC_LAYOUT=compact measures the compact one; see deltacast\n"
            "diff --help).\n"
            "\n"
            "Options:\n"
            "  --dir DIR                where the pairs live / are generated (default\n"
            "                           /dev/shm/deltacast-perf); DIR/opt1, DIR/inj3, DIR/inj5\n"
            "  --params N               parameters when generating (default 1e8)\n"
            "  --cases LIST             comma list of opt1,inj3,inj5, or none (default all)\n"
            "  --pair NAME=BASE,TARGET  also measure this checkpoint pair (repeatable, up to\n"
            "                           %d; NAME: letters, digits, '.', '_', '-'); its outputs\n"
            "                           go to DIR/NAME\n"
            "  --runs R                 runs per measurement (default 3)\n"
            "  --threads T              the 'all cores' thread count (default: all CPUs)\n"
            "  --chunk-size S           chunk size (default: config chunk_size)\n"
            "  --no-baselines           skip xdelta3 and zstd\n"
            "  --baseline-runs R        runs of each baseline (default 1)\n"
            "  --baseline-timeout SEC   kill a baseline run after SEC seconds (default 600)\n"
            "  --json                   all figures as JSON (instead of the table)\n"
            "  --json-file FILE         also write the JSON to FILE\n"
            "  -h, --help               show this help\n",
            DC_MAX_PAIRS);
}

typedef struct {
    const char *name;
    dc_gen_model_t model;
    double rate;
    const char *base, *target; /* a given pair (--pair); NULL for gen cases */
} dc_case_t;

static const dc_case_t CASES[] = {
    {"opt1", DC_GEN_OPTIMIZER, 0.01, NULL, NULL},
    {"inj3", DC_GEN_INJECT, 0.03, NULL, NULL},
    {"inj5", DC_GEN_INJECT, 0.05, NULL, NULL},
};

static double dc_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t *dc_load(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        dc_error_errno(DC_ERR_IO, errno, "cannot open '%s'", path);
        return NULL;
    }
    struct stat sb;
    if (dc_fstat(fd, &sb) != 0) {
        close(fd);
        return NULL;
    }
    uint8_t *b = malloc((size_t)sb.st_size ? (size_t)sb.st_size : 1);
    if (!b || dc_read_full(fd, b, (size_t)sb.st_size) != DC_OK) {
        free(b);
        close(fd);
        dc_error(DC_ERR_IO, "cannot read '%s'", path);
        return NULL;
    }
    close(fd);
    *len = (size_t)sb.st_size;
    return b;
}

static int dc_file_exists(const char *p)
{
    struct stat sb;
    return dc_stat(p, &sb) == 0;
}

static uint64_t dc_file_size(const char *p)
{
    struct stat sb;
    return dc_stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* Run argv with a timeout; returns wall seconds, or -1 on failure / -2 on
 * timeout. */
static double dc_run_timed(char *const argv[], double timeout_s)
{
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    double t0 = dc_now_s();
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int status;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (dc_now_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -2;
        }
        usleep(2000);
    }
    double t = dc_now_s() - t0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? t : -1;
}

typedef struct {
    const char *name;
    uint64_t ckpt_bytes;
    uint64_t delta_bytes;
    uint64_t payload_bytes; /* chunk payloads; the rest of delta_bytes is overhead */
    double change_rate;
    double ratio;
    uint64_t frames_by_kind[5];
    const char *base, *target;   /* a given pair's paths */
    double bound0;               /* order-0 entropy bound of the XOR-coded frames, bytes */
    double bound_ctx;            /* base-conditioned bound of the same frames, bytes */
    uint64_t frames, frames_ctx; /* all frames; ctx-sparse frames */
    uint64_t bounded_payload;
    /* positions+XOR through zstd -1, in-process: stream sizes and seconds */
    uint64_t xz_pos_bytes, xz_val_bytes;
    dc_perf_metric_t xz_s;
    dc_perf_metric_t enc1_wall, enc1_cpu, encN_wall, app1_wall, app1_cpu, appN_wall;
    dc_perf_metric_t inplace_wall, inplace_cpu, inplace_all;
    dc_perf_metric_t hash_ref; /* XXH3-128 of every chunk: the floor of verifying */
    dc_perf_metric_t copy_ref; /* memcpy of every chunk: the floor of a new buffer */
    dc_perf_metric_t file_diff, file_apply;
    int exact, inplace_exact, inplace_run;
    /* baselines: size (0 = not run), median seconds (<0 = failed/timeout) */
    uint64_t xd_bytes, zs_bytes;
    dc_perf_metric_t xd_s, zs_s;
    const char *xd_note, *zs_note;
} dc_codec_res_t;

static double gbps(uint64_t bytes, double s) { return s > 0 ? (double)bytes / s / 1e9 : 0.0; }

/* Overhead of a delta: every byte that is not chunk payload (file header,
 * target header, records), and its share of the payload. */
static uint64_t dc_overhead_bytes(const dc_codec_res_t *r)
{
    return r->delta_bytes - r->payload_bytes;
}

static double dc_overhead_share(const dc_codec_res_t *r)
{
    return r->payload_bytes ? (double)dc_overhead_bytes(r) / (double)r->payload_bytes : 0.0;
}

/*
 * The receiver's apply path (engine/receiver.c): every frame of the delta is
 * decoded in place into the receiver's copy of the base and the chunk's
 * target digest is verified, no output copy.  With `threads` > 1 the frames
 * are dealt round-robin to that many tasks (each with its own codec
 * context, run by dc_kern_parallel_for), so every core patches and hashes
 * at once, as when several receivers share a machine.  `img` holds the base
 * image on entry and the target on success.  Returns the apply time (wall,
 * and CPU of the whole process) through *wall / *cpu; with hash_wall, also
 * the time of only hashing every chunk of the result (dc_ckpt_digest, one
 * thread): the floor of any verified apply, measured in the same run.
 */
typedef struct {
    dc_frame_hdr_t h;
    const uint8_t *payload;
} dc_inplace_frame_t;

typedef struct {
    uint8_t *img;
    const dc_st_file_t *f;
    const dc_inplace_frame_t *fr;
    size_t nframes;
    unsigned nthreads;
    uint64_t data_off;
    dc_codec_t **c;            /* one per task, created before the clock starts */
} dc_inplace_job_t;

static dc_status_t dc_inplace_task(void *arg, size_t tid)
{
    const dc_inplace_job_t *j = arg;
    dc_codec_t *c = j->c[tid];
    for (size_t i = tid; i < j->nframes; i += j->nthreads) {
        const dc_frame_hdr_t *h = &j->fr[i].h;
        const dc_st_tensor_t *t = dc_st_tensor(j->f, h->tensor_id);
        unsigned w = (unsigned)dc_dtype_size(t->dtype);
        uint8_t *dst = j->img + j->data_off + t->begin + h->elem_offset * w;
        dc_digest_t dg;
        dc_status_t st = dc_codec_decode_digest(c, h->encoding, j->fr[i].payload,
                                                h->payload_len, dst, dst, h->elem_count, w,
                                                NULL, &dg);
        if (st != DC_OK)
            return st;
        if (!h->no_digest && !dc_digest_eq(dg, h->target_digest))
            return dc_error(DC_ERR_VERIFY, "chunk %u of %s: target digest mismatch",
                            h->chunk_index, t->name);
    }
    return DC_OK;
}

static dc_status_t dc_apply_in_place(uint8_t *img, size_t len, const uint8_t *d, size_t dl,
                                     unsigned threads, double *wall, double *cpu,
                                     double *hash_wall)
{
    dc_delta_reader_t rd;
    dc_st_file_t *f = NULL;
    dc_inplace_frame_t *fr = NULL;
    dc_codec_t *codecs[64] = {0};
    dc_status_t st = dc_st_open_mem(img, len, "in-place", &f);
    if (st != DC_OK)
        return st;
    if ((st = dc_delta_reader_init_base(&rd, d, dl, f)) != DC_OK)
        goto out;
    if (rd.info.base_size != len || rd.info.target_size != len) {
        st = dc_error(DC_ERR_UNSUPPORTED, "in-place apply needs same-size base and target");
        goto out;
    }
    /* validate every frame first (as the receiver does before it patches);
     * the reader holds the delta to its header's frame count */
    size_t nf = 0;
    fr = malloc((rd.info.frame_count ? rd.info.frame_count : 1) * sizeof(*fr));
    if (!fr) {
        st = dc_error(DC_ERR_NOMEM, "perf codec: out of memory");
        goto out;
    }
    for (;;) {
        dc_frame_hdr_t h;
        const uint8_t *p;
        int done = 0;
        if ((st = dc_delta_reader_next(&rd, &h, &p, &done)) != DC_OK || done)
            break;
        if (h.tensor_id >= dc_st_count(f)) {
            st = dc_error(DC_ERR_FORMAT, "frame names tensor %u of %zu", h.tensor_id,
                          dc_st_count(f));
            break;
        }
        const dc_st_tensor_t *t = dc_st_tensor(f, h.tensor_id);
        if (h.elem_offset + h.elem_count > t->nelems) {
            st = dc_error(DC_ERR_FORMAT, "frame outside tensor %s", t->name);
            break;
        }
        if ((st = dc_frame_check_payload(&h, p, h.payload_len)) != DC_OK)
            break;
        fr[nf++] = (dc_inplace_frame_t){h, p};
    }
    if (st != DC_OK)
        goto out;
    threads = DC_MIN(DC_MAX(threads, 1u), 64u);
    for (unsigned i = 0; i < threads; i++)
        if ((st = dc_codec_create(dc_delta_max_chunk_bytes(f, rd.info.chunk_size), &codecs[i])) !=
            DC_OK)
            goto out;
    dc_inplace_job_t job = {.img = img, .f = f, .fr = fr, .nframes = nf, .nthreads = threads,
                            .data_off = dc_st_data_offset(f), .c = codecs};
    double w0 = dc_now_s(), c0 = dc_cpu_s();
    st = dc_kern_parallel_for(threads, dc_inplace_task, &job, threads);
    *wall = dc_now_s() - w0;
    *cpu = dc_cpu_s() - c0;
    if (st == DC_OK && hash_wall) {
        dc_digest_t dg;
        double h0 = dc_now_s();
        st = dc_ckpt_digest(f, rd.info.chunk_size, 1, &dg);
        *hash_wall = dc_now_s() - h0;
    }
out:
    for (unsigned i = 0; i < 64; i++)
        dc_codec_free(codecs[i]);
    free(fr);
    dc_delta_reader_free(&rd);
    dc_st_close(f);
    return st;
}

/*
 * The published codec's method (BACKGROUND.md: NeMo-DCR), as a baseline
 * computed in-process: for every tensor of the target matched by name,
 * dtype and shape in the base, the changed elements' positions as gaps
 * (the first from the tensor's start) in the smallest integer width that
 * holds that tensor's largest gap (1, 2, 4 or 8 bytes), and their XOR words
 * (new ^ old, the element's width); a tensor with no match is sent whole
 * (its bytes go to the values stream).  All positions form one stream and
 * all values another, each compressed with zstd level 1 in one call, and
 * the two compressed sizes are the baseline's size (the published code
 * compresses per chunk, which can only be larger: this is its best case).
 * Headers are not counted.  `secs` is the wall time of the whole (diff,
 * gaps, XOR and both compressions), one thread.
 */
/* elements per dc_kern_diff call (the published code diffs whole tensors
 * with vectorized torch ops; this is its vectorized equivalent) */
#define DC_XZ_PIECE ((size_t)1 << 20)

static void dc_put_le(uint8_t *p, uint64_t v, unsigned w)
{
    for (unsigned i = 0; i < w; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static dc_status_t dc_zstd1(const uint8_t *src, size_t len, uint64_t *out)
{
    size_t cap = ZSTD_compressBound(len);
    void *dst = malloc(cap ? cap : 1);
    if (!dst)
        return dc_error(DC_ERR_NOMEM, "perf codec: out of memory for zstd output");
    size_t r = ZSTD_compress(dst, cap, src, len, 1);
    free(dst);
    if (ZSTD_isError(r))
        return dc_error(DC_ERR_INTERNAL, "perf codec: zstd: %s", ZSTD_getErrorName(r));
    *out = r;
    return DC_OK;
}

static dc_status_t dc_xorzstd_baseline(const uint8_t *b, size_t bl, const uint8_t *n, size_t nl,
                                       uint64_t *pos_bytes, uint64_t *val_bytes, double *secs)
{
    dc_st_file_t *fb = NULL, *fn = NULL;
    uint8_t *pos = NULL, *val = NULL;
    unsigned *width = NULL;
    uint32_t *dpos = NULL; /* a piece's changed positions and XOR words */
    uint8_t *dxor = NULL;
    double t0 = dc_now_s();
    dc_status_t st = dc_st_open_mem(b, bl, "base", &fb);
    if (st != DC_OK)
        return st;
    if ((st = dc_st_open_mem(n, nl, "target", &fn)) != DC_OK)
        goto out;
    size_t nt = dc_st_count(fn);
    width = calloc(nt ? nt : 1, sizeof(*width));
    dpos = malloc(DC_XZ_PIECE * sizeof(*dpos));
    dxor = malloc(DC_XZ_PIECE * 8);
    if (!width || !dpos || !dxor) {
        st = dc_error(DC_ERR_NOMEM, "perf codec: out of memory");
        goto out;
    }
    /* pass 1: stream sizes (width 0: the tensor is sent whole) */
    uint64_t npos = 0, nval = 0;
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(fn, i), *s = dc_st_find(fb, t->name);
        unsigned w = (unsigned)dc_dtype_size(t->dtype);
        if (!s || s->dtype != t->dtype || s->nelems != t->nelems || w > 8) {
            nval += t->end - t->begin;
            continue;
        }
        const uint8_t *pb = dc_st_data(fb, s), *pn = dc_st_data(fn, t);
        uint64_t last = 0, maxgap = 0, changed = 0;
        for (uint64_t e0 = 0; e0 < t->nelems; e0 += DC_XZ_PIECE) {
            size_t m = (size_t)DC_MIN((uint64_t)DC_XZ_PIECE, t->nelems - e0);
            size_t k = dc_kern_diff(pb + e0 * w, pn + e0 * w, m, w, dpos, dxor, m);
            for (size_t j = 0; j < k; j++) {
                uint64_t e = e0 + dpos[j];
                maxgap = DC_MAX(maxgap, e - last);
                last = e;
            }
            changed += k;
        }
        width[i] = maxgap < (1u << 8) ? 1 : maxgap < (1u << 16) ? 2 : maxgap >> 32 == 0 ? 4 : 8;
        npos += changed * width[i];
        nval += changed * w;
    }
    pos = malloc(npos ? npos : 1);
    val = malloc(nval ? nval : 1);
    if (!pos || !val) {
        st = dc_error(DC_ERR_NOMEM, "perf codec: out of memory for the baseline's streams");
        goto out;
    }
    /* pass 2: fill them */
    uint8_t *pp = pos, *vp = val;
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(fn, i), *s = dc_st_find(fb, t->name);
        const uint8_t *pn = dc_st_data(fn, t);
        if (!width[i]) {
            memcpy(vp, pn, t->end - t->begin);
            vp += t->end - t->begin;
            continue;
        }
        unsigned w = (unsigned)dc_dtype_size(t->dtype);
        const uint8_t *pb = dc_st_data(fb, s);
        uint64_t last = 0;
        for (uint64_t e0 = 0; e0 < t->nelems; e0 += DC_XZ_PIECE) {
            size_t m = (size_t)DC_MIN((uint64_t)DC_XZ_PIECE, t->nelems - e0);
            size_t k = dc_kern_diff(pb + e0 * w, pn + e0 * w, m, w, dpos, dxor, m);
            for (size_t j = 0; j < k; j++) {
                uint64_t e = e0 + dpos[j];
                dc_put_le(pp, e - last, width[i]);
                pp += width[i];
                last = e;
            }
            /* the XOR words, packed as dc_kern_diff wrote them */
            memcpy(vp, dxor, k * w);
            vp += k * w;
        }
    }
    if ((st = dc_zstd1(pos, npos, pos_bytes)) != DC_OK ||
        (st = dc_zstd1(val, nval, val_bytes)) != DC_OK)
        goto out;
    *secs = dc_now_s() - t0;
out:
    free(pos);
    free(val);
    free(width);
    free(dpos);
    free(dxor);
    dc_st_close(fn);
    dc_st_close(fb);
    return st;
}

static dc_status_t dc_measure(const char *dir, const dc_case_t *cs, uint64_t params,
                              unsigned runs, unsigned threads, uint64_t chunk, int baselines,
                              unsigned bruns, double btimeout, dc_codec_res_t *r)
{
    char sub[1024], bp[1100], np[1100], dp[1100], op[1100];
    snprintf(sub, sizeof(sub), "%s/%s", dir, cs->name);
    snprintf(bp, sizeof(bp), "%s/base.safetensors", sub);
    snprintf(np, sizeof(np), "%s/next.safetensors", sub);
    if (cs->base) {
        snprintf(bp, sizeof(bp), "%s", cs->base);
        snprintf(np, sizeof(np), "%s", cs->target);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dc_error_errno(DC_ERR_IO, errno, "cannot create '%s'", dir);
    if (mkdir(sub, 0755) != 0 && errno != EEXIST)
        return dc_error_errno(DC_ERR_IO, errno, "cannot create '%s'", sub);
    /* a pair left by an earlier run is reused only if it was generated
     * with these parameters (the stamp beside it says with which) */
    char sp[1100], want[160], have[160] = "";
    snprintf(sp, sizeof(sp), "%s/gen-params", sub);
    snprintf(want, sizeof(want), "params=%llu rate=%.17g model=%d seed=1 dtype=bf16\n",
             (unsigned long long)params, cs->rate, (int)cs->model);
    FILE *sf = cs->base ? NULL : fopen(sp, "r");
    if (sf) {
        if (!fgets(have, sizeof(have), sf))
            have[0] = '\0';
        fclose(sf);
    }
    if (!cs->base && (!dc_file_exists(bp) || !dc_file_exists(np) || strcmp(have, want) != 0)) {
        dc_perf_progress("perf codec: generating %s (%.3g params)", cs->name, (double)params);
        unlink(sp);
        dc_gen_opts_t go = {.params = params, .change_rate = cs->rate, .model = cs->model,
                            .seed = 1, .dtype = DC_DTYPE_BF16};
        dc_status_t st = dc_gen_write(&go, bp, np, NULL);
        dc_perf_progress_end();
        if (st != DC_OK)
            return st;
        sf = fopen(sp, "w");
        int bad = !sf || fputs(want, sf) < 0;
        if ((sf && fclose(sf) != 0) || bad)
            return dc_error_errno(DC_ERR_IO, errno, "writing %s", sp);
    }
    size_t bl, nl;
    uint8_t *b = dc_load(bp, &bl), *n = b ? dc_load(np, &nl) : NULL;
    if (!b || !n) {
        free(b);
        return DC_ERR_IO;
    }
    uint8_t *out = malloc(nl);
    if (!out) {
        free(b);
        free(n);
        return dc_error(DC_ERR_NOMEM, "output buffer");
    }
    /* fault it in: a receiver applies into live memory.  Not zeros: the
     * compiler turns malloc + memset(0) into calloc, which leaves fresh
     * pages unmapped, and the first apply then paid ~500 K page faults
     * (0.5 GB/s instead of ~3 at 1e9 params) */
    memset(out, 0xa5, nl);
    r->name = cs->name;
    r->base = cs->base;
    r->target = cs->target;
    r->ckpt_bytes = nl;
    dc_perf_metric_init(&r->enc1_wall, "encode_1t", "GB/s");
    dc_perf_metric_init(&r->enc1_cpu, "encode_per_core_cpu", "GB/s");
    dc_perf_metric_init(&r->encN_wall, "encode_all", "GB/s");
    dc_perf_metric_init(&r->app1_wall, "apply_1t", "GB/s");
    dc_perf_metric_init(&r->app1_cpu, "apply_per_core_cpu", "GB/s");
    dc_perf_metric_init(&r->appN_wall, "apply_all", "GB/s");
    dc_perf_metric_init(&r->inplace_wall, "apply_in_place_1t", "GB/s");
    dc_perf_metric_init(&r->inplace_cpu, "apply_in_place_per_core_cpu", "GB/s");
    dc_perf_metric_init(&r->inplace_all, "apply_in_place_all", "GB/s");
    dc_perf_metric_init(&r->hash_ref, "xxh3_read_1t", "GB/s");
    dc_perf_metric_init(&r->copy_ref, "memcpy_1t", "GB/s");
    r->inplace_exact = 1;
    /* the receiver's in-place path patches tensor bytes only: it needs the
     * same header (and size) on both sides; other pairs skip it */
    uint64_t bh = 0, nh = 0;
    if (bl >= 8 && nl >= 8) {
        bh = dc_load_le64(b);
        nh = dc_load_le64(n);
    }
    const int same_header = bl == nl && bh == nh && bh <= bl - 8 && memcmp(b, n, 8 + bh) == 0;
    r->inplace_run = same_header;
    dc_perf_metric_init(&r->file_diff, "file_diff", "s");
    dc_perf_metric_init(&r->file_apply, "file_apply", "s");
    dc_perf_metric_init(&r->xd_s, "xdelta3", "s");
    dc_perf_metric_init(&r->zs_s, "zstd_patch_from", "s");
    dc_perf_metric_init(&r->xz_s, "xor_zstd1", "s");
    r->exact = 1;
    dc_status_t st = DC_OK;
    for (unsigned pass = 0; pass < 2; pass++) {
        unsigned t = pass == 0 ? 1 : threads;
        dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = chunk, .threads = t};
        for (unsigned k = 0; k < runs; k++) {
            dc_perf_progress("perf codec: %s threads=%u run %u/%u", cs->name, t, k + 1, runs);
            void *d;
            size_t dl, ol;
            dc_delta_stats_t s = {.size = sizeof(s)};
            double w0 = dc_now_s(), c0 = dc_cpu_s();
            st = dc_delta_diff_buffers(b, bl, n, nl, &o, &d, &dl, &s);
            double w1 = dc_now_s(), c1 = dc_cpu_s();
            if (st != DC_OK)
                goto out;
            st = dc_delta_apply_buffers(b, bl, d, dl, &o, out, nl, &ol, NULL);
            double w2 = dc_now_s(), c2 = dc_cpu_s();
            if (st != DC_OK) {
                dc_free(d);
                goto out;
            }
            if (ol != nl || memcmp(out, n, nl) != 0)
                r->exact = 0;
            memset(out, 0, 4096);
            if (same_header) {
                /* the receiver's path: patch in place, verify each chunk
                 * (pass 0: one thread; pass 1: every core at once) */
                double iw = 0, ic = 0, hw = 0;
                /* the base into out, a chunk per memcpy (one thread, the
                 * delta's own chunk size): what any apply into a new buffer
                 * must at least move */
                dc_delta_reader_t hr;
                if ((st = dc_delta_reader_init(&hr, d, dl)) != DC_OK) {
                    dc_free(d);
                    goto out;
                }
                const size_t step = (size_t)hr.info.chunk_size;
                dc_delta_reader_free(&hr);
                double m0 = dc_now_s();
                for (size_t at = 0; at < bl; at += step)
                    memcpy(out + at, b + at, DC_MIN(step, bl - at));
                if (pass == 0)
                    dc_perf_metric_add(&r->copy_ref, gbps(bl, dc_now_s() - m0));
                st = dc_apply_in_place(out, bl, d, dl, t, &iw, &ic, pass == 0 ? &hw : NULL);
                if (st != DC_OK) {
                    dc_free(d);
                    goto out;
                }
                if (memcmp(out, n, nl) != 0)
                    r->inplace_exact = 0;
                if (pass == 0) {
                    dc_perf_metric_add(&r->inplace_wall, gbps(nl, iw));
                    dc_perf_metric_add(&r->inplace_cpu, gbps(nl, ic));
                    dc_perf_metric_add(&r->hash_ref, gbps(nl, hw));
                } else {
                    dc_perf_metric_add(&r->inplace_all, gbps(nl, iw));
                }
                memset(out, 0, 4096);
            }
            if (pass == 0) {
                dc_perf_metric_add(&r->enc1_wall, gbps(nl, w1 - w0));
                dc_perf_metric_add(&r->enc1_cpu, gbps(nl, c1 - c0));
                dc_perf_metric_add(&r->app1_wall, gbps(nl, w2 - w1));
                dc_perf_metric_add(&r->app1_cpu, gbps(nl, c2 - c1));
            } else {
                dc_perf_metric_add(&r->encN_wall, gbps(nl, w1 - w0));
                dc_perf_metric_add(&r->appN_wall, gbps(nl, w2 - w1));
            }
            r->delta_bytes = dl;
            r->payload_bytes = s.payload_bytes;
            r->change_rate = s.elements ? (double)s.changed / (double)s.elements : 0;
            /* against the bound of the model each frame is coded with: the
             * base-conditioned one for ctx-sparse frames, order-0 for the rest */
            r->ratio = s.bound_ctx_bytes > 0 ? (double)s.bounded_payload / s.bound_ctx_bytes : 0;
            r->bound0 = s.bound_bytes;
            r->bounded_payload = s.bounded_payload;
            r->bound_ctx = s.bound_ctx_bytes;
            r->frames = s.frames;
            r->frames_ctx = s.frames_ctx;
            memcpy(r->frames_by_kind, s.frames_by_kind, sizeof(r->frames_by_kind));
            dc_free(d);
        }
    }
    for (unsigned k = 0; k < bruns; k++) {
        dc_perf_progress("perf codec: %s positions+XOR zstd -1 run %u/%u", cs->name, k + 1, bruns);
        double xs = 0;
        if ((st = dc_xorzstd_baseline(b, bl, n, nl, &r->xz_pos_bytes, &r->xz_val_bytes, &xs)) !=
            DC_OK)
            goto out;
        dc_perf_metric_add(&r->xz_s, xs);
    }
    free(out);
    out = NULL;
    free(n);
    n = NULL;
    free(b);
    b = NULL;
    /* file to file, same conditions as the baselines */
    snprintf(dp, sizeof(dp), "%s/dc.delta", sub);
    snprintf(op, sizeof(op), "%s/dc.out", sub);
    for (unsigned k = 0; k < bruns; k++) {
        dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = chunk, .threads = threads};
        double t0 = dc_now_s();
        if ((st = dc_delta_diff_files(bp, np, dp, &o, NULL)) != DC_OK)
            goto out;
        double t1 = dc_now_s();
        if ((st = dc_delta_apply_files(bp, dp, op, &o, NULL)) != DC_OK)
            goto out;
        double t2 = dc_now_s();
        dc_perf_metric_add(&r->file_diff, t1 - t0);
        dc_perf_metric_add(&r->file_apply, t2 - t1);
    }
    unlink(dp);
    unlink(op);
    if (baselines) {
        char xo[1100], zo[1100], sarg[1200];
        snprintf(xo, sizeof(xo), "%s/xdelta3.out", sub);
        snprintf(zo, sizeof(zo), "%s/zstd.out", sub);
        snprintf(sarg, sizeof(sarg), "--patch-from=%s", bp);
        char *xa[] = {"xdelta3", "-e", "-f", "-s", bp, np, xo, NULL};
        char *za[] = {"zstd", "-q", "-f", "--long=31", sarg, np, "-o", zo, NULL};
        r->xd_note = r->zs_note = "";
        for (unsigned k = 0; k < bruns; k++) {
            dc_perf_progress("perf codec: %s xdelta3 run %u/%u", cs->name, k + 1, bruns);
            double t = dc_run_timed(xa, btimeout);
            if (t < 0) {
                r->xd_note = t == -2 ? "timeout" : "failed";
                break;
            }
            dc_perf_metric_add(&r->xd_s, t);
            r->xd_bytes = dc_file_size(xo);
        }
        for (unsigned k = 0; k < bruns; k++) {
            dc_perf_progress("perf codec: %s zstd --patch-from run %u/%u", cs->name, k + 1, bruns);
            double t = dc_run_timed(za, btimeout);
            if (t < 0) {
                r->zs_note = t == -2 ? "timeout" : "failed";
                break;
            }
            dc_perf_metric_add(&r->zs_s, t);
            r->zs_bytes = dc_file_size(zo);
        }
        unlink(xo);
        unlink(zo);
    }
    dc_perf_progress_end();
out:
    free(out);
    free(n);
    free(b);
    return st;
}

int dc_cmd_perf_codec(int argc, char **argv)
{
    enum { O_DIR = 1000, O_PARAMS, O_RUNS, O_THREADS, O_CHUNK, O_NOBASE, O_BRUNS, O_BTIME,
           O_JSON, O_CASES, O_JSONFILE, O_PAIR };
    static const struct option opts[] = {
        {"dir", required_argument, NULL, O_DIR},
        {"params", required_argument, NULL, O_PARAMS},
        {"runs", required_argument, NULL, O_RUNS},
        {"threads", required_argument, NULL, O_THREADS},
        {"chunk-size", required_argument, NULL, O_CHUNK},
        {"cases", required_argument, NULL, O_CASES},
        {"no-baselines", no_argument, NULL, O_NOBASE},
        {"baseline-runs", required_argument, NULL, O_BRUNS},
        {"baseline-timeout", required_argument, NULL, O_BTIME},
        {"json", no_argument, NULL, O_JSON},
        {"json-file", required_argument, NULL, O_JSONFILE},
        {"pair", required_argument, NULL, O_PAIR},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *dir = "/dev/shm/deltacast-perf", *cases = "opt1,inj3,inj5", *json_file = NULL;
    uint64_t params = 100000000, runs = 3, threads = (uint64_t)dc_cpu_count(), chunk = 0,
             bruns = 1;
    double btimeout = 600;
    bool json = false, baselines = true;
    double dv;
    dc_case_t pairs[DC_MAX_PAIRS];
    char pair_buf[DC_MAX_PAIRS][3][1024];
    size_t npairs = 0;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("perf codec", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_perf_codec_help(stdout);
            return DC_EXIT_OK;
        case O_DIR:
            dir = optarg;
            break;
        case O_PARAMS:
            if (!dc_cli_parse_double("perf codec", "--params", optarg, &dv) || dv < 1e6 || dv > 1e13)
                return dc_cli_usage_error("perf codec", "--params: '%s' is not in 1e6..1e13", optarg);
            params = (uint64_t)dv;
            break;
        case O_RUNS:
            if (!dc_cli_parse_u64("perf codec", "--runs", optarg, &runs))
                return DC_EXIT_USAGE;
            if (runs < 1 || runs > 100)
                return dc_cli_usage_error("perf codec", "--runs: %s is not in 1..100", optarg);
            break;
        case O_THREADS:
            if (!dc_cli_parse_u64("perf codec", "--threads", optarg, &threads))
                return DC_EXIT_USAGE;
            if (threads < 1 || threads > 1024)
                return dc_cli_usage_error("perf codec", "--threads: %s is not in 1..1024", optarg);
            break;
        case O_CHUNK:
            if (!dc_cli_parse_size("perf codec", "--chunk-size", optarg, &chunk))
                return DC_EXIT_USAGE;
            break;
        case O_CASES:
            cases = optarg;
            break;
        case O_NOBASE:
            baselines = false;
            break;
        case O_BRUNS:
            if (!dc_cli_parse_u64("perf codec", "--baseline-runs", optarg, &bruns))
                return DC_EXIT_USAGE;
            if (bruns < 1 || bruns > 100)
                return dc_cli_usage_error("perf codec", "--baseline-runs: %s is not in 1..100", optarg);
            break;
        case O_BTIME:
            if (!dc_cli_parse_double("perf codec", "--baseline-timeout", optarg, &btimeout))
                return DC_EXIT_USAGE;
            break;
        case O_JSON:
            json = true;
            break;
        case O_JSONFILE:
            json_file = optarg;
            break;
        case O_PAIR: {
            if (npairs == DC_MAX_PAIRS)
                return dc_cli_usage_error("perf codec", "--pair: at most %d pairs", DC_MAX_PAIRS);
            const char *eq = strchr(optarg, '='), *comma = eq ? strchr(eq + 1, ',') : NULL;
            if (!eq || !comma || eq == optarg || comma == eq + 1 || !comma[1])
                return dc_cli_usage_error("perf codec", "--pair: '%s' is not NAME=BASE,TARGET",
                                          optarg);
            size_t nl = (size_t)(eq - optarg), bl = (size_t)(comma - eq - 1),
                   tl = strlen(comma + 1);
            if (nl > 48 || bl >= sizeof(pair_buf[0][1]) || tl >= sizeof(pair_buf[0][2]))
                return dc_cli_usage_error("perf codec", "--pair: '%.80s...': name or path too long",
                                          optarg);
            for (size_t k = 0; k < nl; k++)
                if (!isalnum((unsigned char)optarg[k]) && !strchr("._-", optarg[k]))
                    return dc_cli_usage_error("perf codec",
                                              "--pair: name '%.*s' may hold only letters, "
                                              "digits, '.', '_' and '-'",
                                              (int)nl, optarg);
            memcpy(pair_buf[npairs][0], optarg, nl);
            pair_buf[npairs][0][nl] = '\0';
            memcpy(pair_buf[npairs][1], eq + 1, bl);
            pair_buf[npairs][1][bl] = '\0';
            memcpy(pair_buf[npairs][2], comma + 1, tl + 1);
            if (strcmp(pair_buf[npairs][0], ".") == 0 || strcmp(pair_buf[npairs][0], "..") == 0)
                return dc_cli_usage_error("perf codec", "--pair: '%s' is not a usable name",
                                          pair_buf[npairs][0]);
            for (size_t k = 0; k < npairs; k++)
                if (strcmp(pairs[k].name, pair_buf[npairs][0]) == 0)
                    return dc_cli_usage_error("perf codec", "--pair: name '%s' given twice",
                                              pair_buf[npairs][0]);
            for (size_t k = 0; k < DC_ARRAY_SIZE(CASES); k++)
                if (strcmp(CASES[k].name, pair_buf[npairs][0]) == 0)
                    return dc_cli_usage_error("perf codec", "--pair: name '%s' is a gen case's",
                                              CASES[k].name);
            pairs[npairs] = (dc_case_t){.name = pair_buf[npairs][0],
                                        .model = DC_GEN_OPTIMIZER,
                                        .base = pair_buf[npairs][1],
                                        .target = pair_buf[npairs][2]};
            npairs++;
            break;
        }
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind != argc)
        return dc_cli_usage_error("perf codec", "unexpected argument '%s'", argv[optind]);
    /* the selected gen cases, then the given pairs */
    const dc_case_t *sel[DC_ARRAY_SIZE(CASES) + DC_MAX_PAIRS];
    size_t nsel = 0;
    for (const char *p = cases; *p;) {
        size_t len = strcspn(p, ",");
        size_t k = 0;
        if (len == 4 && strncmp(p, "none", 4) == 0)
            k = DC_ARRAY_SIZE(CASES) + 1;
        else
            while (k < DC_ARRAY_SIZE(CASES) &&
                   (strlen(CASES[k].name) != len || strncmp(p, CASES[k].name, len) != 0))
                k++;
        if (k == DC_ARRAY_SIZE(CASES))
            return dc_cli_usage_error(
                "perf codec", "--cases: '%.*s' is not one of opt1, inj3, inj5, none", (int)len, p);
        int dup = 0;
        for (size_t j = 0; j < nsel && k < DC_ARRAY_SIZE(CASES); j++)
            dup |= sel[j] == &CASES[k];
        if (k < DC_ARRAY_SIZE(CASES) && !dup)
            sel[nsel++] = &CASES[k];
        p += len;
        if (*p == ',')
            p++;
    }
    for (size_t i = 0; i < npairs; i++)
        sel[nsel++] = &pairs[i];
    if (nsel == 0)
        return dc_cli_usage_error("perf codec", "--cases '%s' and no --pair: nothing to measure",
                                  cases);
    dc_codec_res_t res[DC_ARRAY_SIZE(CASES) + DC_MAX_PAIRS];
    size_t nres = 0;
    for (size_t i = 0; i < nsel; i++) {
        memset(&res[nres], 0, sizeof(res[nres]));
        dc_status_t st = dc_measure(dir, sel[i], params, (unsigned)runs, (unsigned)threads, chunk,
                                    baselines, (unsigned)bruns, btimeout, &res[nres]);
        if (st != DC_OK)
            return dc_cli_fail("perf codec", st, "%s", sel[i]->name);
        nres++;
    }
    if (json || json_file) {
        json_t *root = json_object();
        json_object_set_new(root, "benchmark", json_string("codec"));
        json_object_set_new(root, "threads_all", json_integer((json_int_t)threads));
        json_object_set_new(root, "runs", json_integer((json_int_t)runs));
        json_object_set_new(root, "isa", json_string(dc_kern_isa()));
        json_object_set_new(root, "crc32c", json_string(dc_crc32c_impl()));
        json_object_set_new(root, "codec_layout", json_string(dc_config_get("codec_layout")));
        json_t *arr = json_array();
        for (size_t i = 0; i < nres; i++) {
            dc_codec_res_t *r = &res[i];
            json_t *o = json_object();
            json_object_set_new(o, "case", json_string(r->name));
            json_object_set_new(o, "checkpoint_bytes", json_integer((json_int_t)r->ckpt_bytes));
            json_object_set_new(o, "delta_bytes", json_integer((json_int_t)r->delta_bytes));
            json_object_set_new(o, "delta_pct",
                                json_real(100.0 * (double)r->delta_bytes / (double)r->ckpt_bytes));
            json_object_set_new(o, "change_rate", json_real(r->change_rate));
            json_object_set_new(o, "overhead_bytes",
                                json_integer((json_int_t)dc_overhead_bytes(r)));
            json_object_set_new(o, "overhead_share", json_real(dc_overhead_share(r)));
            json_object_set_new(o, "ratio_to_bound", json_real(r->ratio));
            if (r->base) {
                json_object_set_new(o, "base", json_string(r->base));
                json_object_set_new(o, "target", json_string(r->target));
            }
            json_object_set_new(o, "bound_bytes", json_real(r->bound0));
            json_object_set_new(o, "bounded_payload_bytes",
                                json_integer((json_int_t)r->bounded_payload));
            json_object_set_new(o, "bound_ctx_bytes", json_real(r->bound_ctx));
            json_object_set_new(o, "frames", json_integer((json_int_t)r->frames));
            json_object_set_new(o, "frames_ctx", json_integer((json_int_t)r->frames_ctx));
            json_object_set_new(o, "delta_to_bound",
                                json_real(r->bound0 > 0 ? (double)r->delta_bytes / r->bound0 : 0));
            json_object_set_new(o, "xor_zstd1_pos_bytes",
                                json_integer((json_int_t)r->xz_pos_bytes));
            json_object_set_new(o, "xor_zstd1_val_bytes",
                                json_integer((json_int_t)r->xz_val_bytes));
            json_object_set_new(o, "xor_zstd1_bytes",
                                json_integer((json_int_t)(r->xz_pos_bytes + r->xz_val_bytes)));
            json_object_set_new(o, "xor_zstd1_s", dc_perf_metric_json(&r->xz_s));
            json_object_set_new(o, "exact", json_boolean(r->exact));
            json_object_set_new(o, "encode_1t_gbps", dc_perf_metric_json(&r->enc1_wall));
            json_object_set_new(o, "encode_per_core_cpu_gbps", dc_perf_metric_json(&r->enc1_cpu));
            json_object_set_new(o, "encode_all_gbps", dc_perf_metric_json(&r->encN_wall));
            json_object_set_new(o, "apply_1t_gbps", dc_perf_metric_json(&r->app1_wall));
            json_object_set_new(o, "apply_per_core_cpu_gbps", dc_perf_metric_json(&r->app1_cpu));
            json_object_set_new(o, "apply_all_gbps", dc_perf_metric_json(&r->appN_wall));
            json_object_set_new(o, "apply_in_place_1t_gbps", dc_perf_metric_json(&r->inplace_wall));
            json_object_set_new(o, "apply_in_place_per_core_cpu_gbps",
                                dc_perf_metric_json(&r->inplace_cpu));
            json_object_set_new(o, "apply_in_place_all_gbps", dc_perf_metric_json(&r->inplace_all));
            json_object_set_new(o, "xxh3_read_1t_gbps", dc_perf_metric_json(&r->hash_ref));
            json_object_set_new(o, "memcpy_1t_gbps", dc_perf_metric_json(&r->copy_ref));
            json_object_set_new(o, "apply_in_place_exact",
                                r->inplace_run ? json_boolean(r->inplace_exact) : json_null());
            json_object_set_new(o, "file_diff_s", dc_perf_metric_json(&r->file_diff));
            json_object_set_new(o, "file_apply_s", dc_perf_metric_json(&r->file_apply));
            if (baselines) {
                json_object_set_new(o, "xdelta3_bytes", json_integer((json_int_t)r->xd_bytes));
                json_object_set_new(o, "xdelta3_s", dc_perf_metric_json(&r->xd_s));
                json_object_set_new(o, "xdelta3_note", json_string(r->xd_note));
                json_object_set_new(o, "zstd_patch_bytes", json_integer((json_int_t)r->zs_bytes));
                json_object_set_new(o, "zstd_patch_s", dc_perf_metric_json(&r->zs_s));
                json_object_set_new(o, "zstd_patch_note", json_string(r->zs_note));
            }
            json_array_append_new(arr, o);
        }
        json_object_set_new(root, "cases", arr);
        if (json_file && json_dump_file(root, json_file, JSON_INDENT(2)) != 0) {
            json_decref(root);
            dc_error(DC_ERR_IO, "cannot write '%s'", json_file);
            return dc_cli_fail("perf codec", DC_ERR_IO, NULL);
        }
        if (json)
            dc_perf_json_print(root);
        json_decref(root);
        if (json)
            return DC_EXIT_OK;
    }
    printf("deltacast perf codec: medians of %llu runs, all cores = %llu threads, kernels %s, "
           "crc32c %s, codec layout %s\n"
           "GB/s are of checkpoint bytes; 'cpu' = per core by process CPU time; "
           "the file rows and baselines read/write files in %s\n\n",
           (unsigned long long)runs, (unsigned long long)threads, dc_kern_isa(),
           dc_crc32c_impl(), dc_config_get("codec_layout"), dir);
    printf("%-34s", "");
    for (size_t i = 0; i < nres; i++)
        printf(" %16s", res[i].name);
    printf("\n");
#define ROW(label, fmt, expr)                                                                 \
    do {                                                                                      \
        printf("%-34s", label);                                                               \
        for (size_t i = 0; i < nres; i++) {                                                   \
            dc_codec_res_t *r = &res[i];                                                      \
            (void)r;                                                                          \
            printf(" %16" fmt, expr);                                                         \
        }                                                                                     \
        printf("\n");                                                                         \
    } while (0)
    ROW("checkpoint MB", ".1f", (double)r->ckpt_bytes / 1e6);
    ROW("change rate %", ".3f", 100.0 * r->change_rate);
    ROW("bit-exact round trip", "s", r->exact ? "yes" : "NO");
    ROW("deltacast delta, % of ckpt", ".3f", 100.0 * (double)r->delta_bytes / (double)r->ckpt_bytes);
    ROW("deltacast overhead, % of payload", ".3f", 100.0 * dc_overhead_share(r));
    ROW("deltacast payload / its bound (<=1.15)", ".3f", r->ratio);
    ROW("order-0 bound, % of ckpt", ".3f", 100.0 * r->bound0 / (double)r->ckpt_bytes);
    ROW("base-cond. bound, % of ckpt", ".3f", 100.0 * r->bound_ctx / (double)r->ckpt_bytes);
    ROW("base-cond. bound / order-0 bound", ".3f", r->bound0 > 0 ? r->bound_ctx / r->bound0 : 0.0);
    ROW("ctx-sparse frames, % of frames", ".1f",
        r->frames ? 100.0 * (double)r->frames_ctx / (double)r->frames : 0.0);
    ROW("deltacast delta / order-0 bound", ".3f",
        r->bound0 > 0 ? (double)r->delta_bytes / r->bound0 : 0.0);
    ROW("pos+XOR zstd-1, % of ckpt", ".3f",
        100.0 * (double)(r->xz_pos_bytes + r->xz_val_bytes) / (double)r->ckpt_bytes);
    ROW("pos+XOR zstd-1 / order-0 bound", ".3f",
        r->bound0 > 0 ? (double)(r->xz_pos_bytes + r->xz_val_bytes) / r->bound0 : 0.0);
    ROW("pos+XOR zstd-1 / deltacast", ".2f",
        (double)(r->xz_pos_bytes + r->xz_val_bytes) / (double)r->delta_bytes);
    ROW("pos+XOR zstd-1 encode s", ".3f", r->xz_s.n ? dc_perf_median(&r->xz_s) : -1.0);
    ROW("encode GB/s 1 thread (>=2)", ".2f", dc_perf_median(&r->enc1_wall));
    ROW("encode GB/s 1 thread, cpu", ".2f", dc_perf_median(&r->enc1_cpu));
    ROW("encode GB/s all cores", ".2f", dc_perf_median(&r->encN_wall));
    ROW("apply GB/s 1 thread (>=4)", ".2f", dc_perf_median(&r->app1_wall));
    ROW("apply GB/s 1 thread, cpu", ".2f", dc_perf_median(&r->app1_cpu));
    ROW("apply GB/s all cores", ".2f", dc_perf_median(&r->appN_wall));
    ROW("apply in place GB/s 1 thread (>=4)", ".2f", dc_perf_median(&r->inplace_wall));
    ROW("apply in place GB/s 1 thread, cpu", ".2f", dc_perf_median(&r->inplace_cpu));
    ROW("apply in place GB/s all cores", ".2f", dc_perf_median(&r->inplace_all));
    ROW("apply in place bit-exact", "s", !r->inplace_run ? "n/a" : r->inplace_exact ? "yes" : "NO");
    ROW("reference: XXH3 of each chunk GB/s", ".2f", dc_perf_median(&r->hash_ref));
    ROW("apply in place / XXH3 reference", ".2f",
        dc_perf_median(&r->hash_ref) > 0
            ? dc_perf_median(&r->inplace_wall) / dc_perf_median(&r->hash_ref) : 0);
    ROW("reference: memcpy of each chunk GB/s", ".2f", dc_perf_median(&r->copy_ref));
    ROW("apply / memcpy reference", ".2f",
        dc_perf_median(&r->copy_ref) > 0
            ? dc_perf_median(&r->app1_wall) / dc_perf_median(&r->copy_ref) : 0);
    ROW("deltacast diff file->file s", ".3f", dc_perf_median(&r->file_diff));
    ROW("deltacast apply file->file s", ".3f", dc_perf_median(&r->file_apply));
    if (baselines) {
        ROW("xdelta3 delta, % of ckpt", ".3f",
            r->xd_bytes ? 100.0 * (double)r->xd_bytes / (double)r->ckpt_bytes : 0.0);
        ROW("xdelta3 encode s", ".3f", r->xd_s.n ? dc_perf_median(&r->xd_s) : -1.0);
        ROW("zstd --patch-from, % of ckpt", ".3f",
            r->zs_bytes ? 100.0 * (double)r->zs_bytes / (double)r->ckpt_bytes : 0.0);
        ROW("zstd --patch-from encode s", ".3f", r->zs_s.n ? dc_perf_median(&r->zs_s) : -1.0);
        ROW("size: xdelta3 / deltacast (>=2.5)", ".2f",
            r->xd_bytes ? (double)r->xd_bytes / (double)r->delta_bytes : 0.0);
        ROW("time: xdelta3 / deltacast file (>=20)", ".1f",
            r->xd_s.n ? dc_perf_median(&r->xd_s) / dc_perf_median(&r->file_diff) : 0.0);
        ROW("size: zstd-patch / deltacast", ".2f",
            r->zs_bytes ? (double)r->zs_bytes / (double)r->delta_bytes : 0.0);
        ROW("time: zstd-patch / deltacast file", ".1f",
            r->zs_s.n ? dc_perf_median(&r->zs_s) / dc_perf_median(&r->file_diff) : 0.0);
        ROW("xdelta3 / order-0 bound", ".3f",
            r->xd_bytes && r->bound0 > 0 ? (double)r->xd_bytes / r->bound0 : 0.0);
        ROW("zstd-patch / order-0 bound", ".3f",
            r->zs_bytes && r->bound0 > 0 ? (double)r->zs_bytes / r->bound0 : 0.0);
        for (size_t i = 0; i < nres; i++)
            if (*res[i].xd_note || *res[i].zs_note)
                printf("note: %s: xdelta3 %s, zstd %s (-1 = not measured)\n", res[i].name,
                       *res[i].xd_note ? res[i].xd_note : "ok",
                       *res[i].zs_note ? res[i].zs_note : "ok");
    }
#undef ROW
    for (size_t i = 0; i < nres; i++)
        if (res[i].base)
            printf("pair %s: %s -> %s\n", res[i].name, res[i].base, res[i].target);
    return DC_EXIT_OK;
}
