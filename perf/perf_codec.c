/*
 * perf_codec.c - `deltacast perf codec`: delta size, ratio to the entropy
 * bound, encode and apply throughput, side by side with xdelta3 and
 * `zstd --patch-from` measured in the same run on the same pairs.
 *
 * Pairs: DIR/opt1 (optimizer, 1%), DIR/inj3 (inject, 3%), DIR/inj5
 * (inject, 5%), each holding base.safetensors and next.safetensors;
 * generated with `gen` (in-process) when missing.
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

extern char **environ;

static void dc_perf_codec_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast perf codec [--dir DIR] [--params N] [--runs R] [--threads T]\n"
            "                            [--chunk-size S] [--cases LIST] [--no-baselines]\n"
            "                            [--baseline-runs R] [--baseline-timeout SEC] [--json]\n"
            "                            [--json-file FILE]\n"
            "\n"
            "Measure the delta codec on gen pairs: delta size (%% of the checkpoint), ratio\n"
            "to the entropy bound, encode (diff+encode+compress) and apply throughput with\n"
            "one thread and with all, and the same pairs through xdelta3 -e -s and\n"
            "zstd --patch-from (size and time).  Medians of R runs.  The deltas are\n"
            "coded in the config codec_layout (DELTACAST_CODEC_LAYOUT=compact measures\n"
            "the compact one; see deltacast diff --help).\n"
            "\n"
            "Options:\n"
            "  --dir DIR                where the pairs live / are generated (default\n"
            "                           /dev/shm/deltacast-perf); DIR/opt1, DIR/inj3, DIR/inj5\n"
            "  --params N               parameters when generating (default 1e8)\n"
            "  --cases LIST             comma list of opt1,inj3,inj5 (default all)\n"
            "  --runs R                 runs per measurement (default 3)\n"
            "  --threads T              the 'all cores' thread count (default: all CPUs)\n"
            "  --chunk-size S           chunk size (default: config chunk_size)\n"
            "  --no-baselines           skip xdelta3 and zstd\n"
            "  --baseline-runs R        runs of each baseline (default 1)\n"
            "  --baseline-timeout SEC   kill a baseline run after SEC seconds (default 600)\n"
            "  --json                   all figures as JSON (instead of the table)\n"
            "  --json-file FILE         also write the JSON to FILE\n"
            "  -h, --help               show this help\n");
}

typedef struct {
    const char *name;
    dc_gen_model_t model;
    double rate;
} dc_case_t;

static const dc_case_t CASES[] = {
    {"opt1", DC_GEN_OPTIMIZER, 0.01},
    {"inj3", DC_GEN_INJECT, 0.03},
    {"inj5", DC_GEN_INJECT, 0.05},
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
    dc_perf_metric_t enc1_wall, enc1_cpu, encN_wall, app1_wall, app1_cpu, appN_wall;
    dc_perf_metric_t inplace_wall, inplace_cpu, inplace_all;
    dc_perf_metric_t hash_ref; /* XXH3-128 of every chunk: the floor of verifying */
    dc_perf_metric_t copy_ref; /* memcpy of every chunk: the floor of a new buffer */
    dc_perf_metric_t file_diff, file_apply;
    int exact, inplace_exact;
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

static dc_status_t dc_measure(const char *dir, const dc_case_t *cs, uint64_t params,
                              unsigned runs, unsigned threads, uint64_t chunk, int baselines,
                              unsigned bruns, double btimeout, dc_codec_res_t *r)
{
    char sub[1024], bp[1100], np[1100], dp[1100], op[1100];
    snprintf(sub, sizeof(sub), "%s/%s", dir, cs->name);
    snprintf(bp, sizeof(bp), "%s/base.safetensors", sub);
    snprintf(np, sizeof(np), "%s/next.safetensors", sub);
    mkdir(dir, 0755);
    mkdir(sub, 0755);
    /* a pair left by an earlier run is reused only if it was generated
     * with these parameters (the stamp beside it says with which) */
    char sp[1100], want[160], have[160] = "";
    snprintf(sp, sizeof(sp), "%s/gen-params", sub);
    snprintf(want, sizeof(want), "params=%llu rate=%.17g model=%d seed=1 dtype=bf16\n",
             (unsigned long long)params, cs->rate, (int)cs->model);
    FILE *sf = fopen(sp, "r");
    if (sf) {
        if (!fgets(have, sizeof(have), sf))
            have[0] = '\0';
        fclose(sf);
    }
    if (!dc_file_exists(bp) || !dc_file_exists(np) || strcmp(have, want) != 0) {
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
    dc_perf_metric_init(&r->file_diff, "file_diff", "s");
    dc_perf_metric_init(&r->file_apply, "file_apply", "s");
    dc_perf_metric_init(&r->xd_s, "xdelta3", "s");
    dc_perf_metric_init(&r->zs_s, "zstd_patch_from", "s");
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
            if (bl == nl) {
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
            r->ratio = s.bound_bytes > 0 ? (double)s.bounded_payload / s.bound_bytes : 0;
            memcpy(r->frames_by_kind, s.frames_by_kind, sizeof(r->frames_by_kind));
            dc_free(d);
        }
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
           O_JSON, O_CASES, O_JSONFILE };
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
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *dir = "/dev/shm/deltacast-perf", *cases = "opt1,inj3,inj5", *json_file = NULL;
    uint64_t params = 100000000, runs = 3, threads = (uint64_t)dc_cpu_count(), chunk = 0,
             bruns = 1;
    double btimeout = 600;
    bool json = false, baselines = true;
    double dv;
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
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind != argc)
        return dc_cli_usage_error("perf codec", "unexpected argument '%s'", argv[optind]);
    dc_codec_res_t res[DC_ARRAY_SIZE(CASES)];
    size_t nres = 0;
    for (size_t i = 0; i < DC_ARRAY_SIZE(CASES); i++) {
        if (!strstr(cases, CASES[i].name))
            continue;
        memset(&res[nres], 0, sizeof(res[nres]));
        dc_status_t st = dc_measure(dir, &CASES[i], params, (unsigned)runs, (unsigned)threads,
                                    chunk, baselines, (unsigned)bruns, btimeout, &res[nres]);
        if (st != DC_OK)
            return dc_cli_fail("perf codec", st, "%s", CASES[i].name);
        nres++;
    }
    if (nres == 0)
        return dc_cli_usage_error("perf codec", "--cases: nothing selected from '%s'", cases);
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
            json_object_set_new(o, "apply_in_place_exact", json_boolean(r->inplace_exact));
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
    ROW("deltacast ratio to bound (<=1.15)", ".3f", r->ratio);
    ROW("encode GB/s 1 thread (>=2)", ".2f", dc_perf_median(&r->enc1_wall));
    ROW("encode GB/s 1 thread, cpu", ".2f", dc_perf_median(&r->enc1_cpu));
    ROW("encode GB/s all cores", ".2f", dc_perf_median(&r->encN_wall));
    ROW("apply GB/s 1 thread (>=4)", ".2f", dc_perf_median(&r->app1_wall));
    ROW("apply GB/s 1 thread, cpu", ".2f", dc_perf_median(&r->app1_cpu));
    ROW("apply GB/s all cores", ".2f", dc_perf_median(&r->appN_wall));
    ROW("apply in place GB/s 1 thread (>=4)", ".2f", dc_perf_median(&r->inplace_wall));
    ROW("apply in place GB/s 1 thread, cpu", ".2f", dc_perf_median(&r->inplace_cpu));
    ROW("apply in place GB/s all cores", ".2f", dc_perf_median(&r->inplace_all));
    ROW("apply in place bit-exact", "s", r->inplace_exact ? "yes" : "NO");
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
        for (size_t i = 0; i < nres; i++)
            if (*res[i].xd_note || *res[i].zs_note)
                printf("note: %s: xdelta3 %s, zstd %s (-1 = not measured)\n", res[i].name,
                       *res[i].xd_note ? res[i].xd_note : "ok",
                       *res[i].zs_note ? res[i].zs_note : "ok");
    }
#undef ROW
    return DC_EXIT_OK;
}
