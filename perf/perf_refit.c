/* perf_refit.c - `deltacast perf refit`: a whole refit job on this machine.
 *
 *   trainer ns ──veth (tbf: WAN rate, both ways)── region ns r0: gateway ─ lo ─ receivers
 *       │      ──veth (tbf)───────────────────────── region ns r1: ...
 *
 * With root privileges every region is a network namespace joined to the
 * trainer's by a veth pair shaped with `tc tbf` to the WAN rate (links
 * inside a region are the namespace's loopback: unshaped).  Without root it
 * runs on loopback, unshaped, and says so.  Each version is refitted as a
 * delta and then, from the same baseline, dense (every chunk an overwrite)
 * through the same engine and tree; every receiver is byte-compared with
 * the trainer's checkpoint after each run.  `deltacast demo` is this job at
 * demo size with a progress display.
 */
#include "perf/perf.h"
#include "perf/refit_job.h"
#include "testkit/cmdline.h"
#include "testkit/gen.h"
#include "testkit/harness.h"
#include "testkit/synth.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static dc_status_t rb_make_versions(rb_ctx_t *c, dc_gen_result_t *gr)
{
    dc_status_t st = rb_gen_first(c, !(c->o.json && !c->o.demo), gr);
    if (st != DC_OK)
        return st;
    for (uint32_t v = 2; v <= c->o.versions; v++) {
        char a[PATH_MAX], b[PATH_MAX];
        rb_path(a, sizeof(a), c, "ver/v%u.safetensors", v - 1);
        rb_path(b, sizeof(b), c, "ver/v%u.safetensors", v);
        uint64_t ch;
        st = dc_synth_next(a, b, gr->real_rate > 0 ? gr->real_rate : c->o.rate, c->o.inject,
                           c->o.seed + v, &ch);
        if (st != DC_OK)
            return st;
    }
    return DC_OK;
}

/* Receivers back to v0, state cleared. */
static dc_status_t rb_reset_receivers(rb_ctx_t *c)
{
    rb_sh("rm -rf '%s/state' && mkdir -p '%s/state'", c->dir, c->dir);
    return rb_receivers_at_v0(c);
}

/* One node of a run: rank 0 coordinates (and sends, with shard 0), ranks
 * 1..senders-1 send their shards, the others receive. */
typedef struct rb_run_ctx {
    rb_ctx_t *c;
    int dense;
    uint32_t upto;
    const char *stats;
} rb_run_ctx_t;

static int rb_child_env(void *arg, int rank)
{
    const rb_ctx_t *c = arg;
    (void)rank;
    if (c->o.transport)
        setenv("DELTACAST_TRANSPORT", c->o.transport, 1);
    else if (!getenv("DELTACAST_TRANSPORT"))
        setenv("DELTACAST_TRANSPORT", "tcp", 1);
    if (c->o.chunk_size) {
        char cs[32];
        snprintf(cs, sizeof(cs), "%llu", (unsigned long long)c->o.chunk_size);
        setenv("DELTACAST_CHUNK_SIZE", cs, 1);
    }
    if (!getenv("DELTACAST_INFLIGHT_BYTES"))
        setenv("DELTACAST_INFLIGHT_BYTES", "256MiB", 1);
    if (!getenv("DELTACAST_LOG"))
        setenv("DELTACAST_LOG", "warn", 1);
    return 0;
}

static pid_t rb_spawn_node(void *arg, int rank)
{
    const rb_run_ctx_t *r = arg;
    rb_ctx_t *c = r->c;
    const char *dense = r->dense ? "--dense" : "";
    const char *mem = c->o.from_memory ? "--from-memory" : "";
    if (rank == 0) {
        char err[PATH_MAX + 16];
        if (c->o.demo && dc_cli_is_tty()) /* progress line on the terminal */
            snprintf(err, sizeof(err), "--progress");
        else
            snprintf(err, sizeof(err), "2>>'%s/log0'", c->dir);
        return rb_spawn(c, 0, rb_child_env, c,
                        "--versions '%s/ver' --count %u --state '%s/state/0' --stats '%s' "
                        "--wait-ms 120000 %s %s >>'%s/log0' %s", /* its per-version lines: not on
                                                            perf refit's stdout */
                        c->dir, r->upto, c->dir, r->stats, dense, mem, c->dir, err);
    }
    if (rank < (int)c->o.senders) /* another trainer shard: reads only its own chunks */
        return rb_spawn(c, rank, rb_child_env, c,
                        "--versions '%s/ver' --state '%s/state/%d' %s %s >>'%s/log%d' 2>&1",
                        c->dir, c->dir, rank, dense, mem, c->dir, rank);
    return rb_spawn_receiver(c, rank, rb_child_env, c);
}

/* Versions 1..upto from v0, delta or dense.  Each version is one run of
 * the job (the root resumes from its commit record, receivers from theirs)
 * so that every receiver is byte-compared with the trainer after every
 * version: exact_v[v-1].  Returns the root's stats merged (caller decrefs)
 * or NULL. */
static json_t *rb_run(rb_ctx_t *c, int dense, uint32_t upto, int *exact, int *exact_v)
{
    if (rb_reset_receivers(c) != DC_OK)
        return NULL;
    json_t *all = NULL;
    *exact = 1;
    for (uint32_t v = 1; v <= upto; v++) {
        char stats[PATH_MAX];
        rb_path(stats, sizeof(stats), c, "stats-%s-v%u.json", dense ? "dense" : "delta", v);
        unlink(stats);
        pid_t pids[RB_MAX_NODES];
        rb_run_ctx_t run = {.c = c, .dense = dense, .upto = v, .stats = stats};
        if (rb_launch(c, rb_spawn_node, &run, pids) != DC_OK) {
            for (int k = 0; k < c->nnodes; k++)
                if (pids[k] > 0) {
                    kill(pids[k], SIGKILL);
                    waitpid(pids[k], NULL, 0);
                }
            json_decref(all);
            return NULL;
        }
        int status, rc0;
        waitpid(pids[0], &status, 0);
        rc0 = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
        for (int i = 1; i < c->nnodes; i++) {
            int ok = 0;
            for (int k = 0; k < 200 && !ok; k++) {
                if (waitpid(pids[i], &status, WNOHANG) == pids[i])
                    ok = 1;
                else
                    usleep(50000);
            }
            if (!ok) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], &status, 0);
            }
        }
        if (rc0 != 0) {
            rb_sh("tail -n 5 '%s/log0' >&2", c->dir);
            json_decref(all);
            dc_error(DC_ERR_INTERNAL, "the %s refit of v%u failed (root exit %d; logs in %s)",
                     dense ? "dense" : "delta", v, rc0, c->dir);
            return NULL;
        }
        exact_v[v - 1] = 1;
        for (int i = (int)c->o.senders; i < c->nnodes && exact_v[v - 1]; i++)
            exact_v[v - 1] = rb_receiver_is(c, i, v);
        *exact &= exact_v[v - 1];
        json_error_t je;
        json_t *j = json_load_file(stats, 0, &je);
        if (!j || json_array_size(json_object_get(j, "versions")) != 1) {
            json_decref(j);
            json_decref(all);
            dc_error(DC_ERR_FORMAT, "%s: no stats of version %u", stats, v);
            return NULL;
        }
        if (!all) {
            all = j;
        } else {
            json_array_append(json_object_get(all, "versions"),
                              json_array_get(json_object_get(j, "versions"), 0));
            json_decref(j);
        }
    }
    return all;
}

static double rb_num(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return v ? json_number_value(v) : 0;
}

/* Bytes per WAN link of one version: {"parent->node": bytes, ...}; *busiest
 * out: the most bytes through one shaped veth direction (a region's veth
 * carries what enters the region and, separately shaped, what leaves it:
 * with several senders, several links enter a region over the same veth). */
static json_t *rb_wan_bytes(rb_ctx_t *c, json_t *ver, double *busiest)
{
    json_t *o = json_object();
    *busiest = 0;
    static double in[RB_MAX_NODES], out[RB_MAX_NODES];
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    size_t i;
    json_t *lk;
    json_array_foreach(json_object_get(ver, "links"), i, lk)
    {
        const char *kind = json_string_value(json_object_get(lk, "kind"));
        if (!kind || strcmp(kind, "wan") != 0)
            continue;
        long long par = (long long)json_integer_value(json_object_get(lk, "parent"));
        long long node = (long long)json_integer_value(json_object_get(lk, "node"));
        char name[64];
        snprintf(name, sizeof(name), "%lld->%lld", par, node);
        double b = rb_num(lk, "bytes");
        json_object_set_new(o, name, json_integer((json_int_t)b));
        if (node >= (long long)c->o.senders && node < c->nnodes)
            in[c->region_of[node]] += b;
        if (par >= (long long)c->o.senders && par < c->nnodes)
            out[c->region_of[par]] += b;
    }
    for (uint32_t r = 0; r < c->o.regions && r < RB_MAX_NODES; r++)
        *busiest = DC_MAX(*busiest, DC_MAX(in[r], out[r]));
    return o;
}

/* Encryption per link of one version: {"parent->node": "TLS_AES_128_GCM_SHA256"
 * or "none", ...} (the coordinator's stats: config tls, tls_cipher, which
 * every node of this run shares; each node's log says what each of its
 * connections negotiated). */
static json_t *rb_link_encryption(json_t *ver)
{
    json_t *o = json_object();
    size_t i;
    json_t *lk;
    json_array_foreach(json_object_get(ver, "links"), i, lk)
    {
        const char *e = json_string_value(json_object_get(lk, "encryption"));
        char name[64];
        snprintf(name, sizeof(name), "%lld->%lld",
                 (long long)json_integer_value(json_object_get(lk, "parent")),
                 (long long)json_integer_value(json_object_get(lk, "node")));
        json_object_set_new(o, name, json_string(e ? e : "none"));
    }
    return o;
}

static void rb_plot(rb_ctx_t *c, json_t *versions, const char *png)
{
    char dat[PATH_MAX], gp[PATH_MAX];
    rb_path(dat, sizeof(dat), c, "refit.dat");
    rb_path(gp, sizeof(gp), c, "refit.gp");
    FILE *f = fopen(dat, "w");
    if (!f)
        return;
    fprintf(f, "# version delta_s dense_s encode transfer apply commit\n");
    size_t i;
    json_t *v;
    json_array_foreach(versions, i, v)
    {
        json_t *ph = json_object_get(v, "phases");
        fprintf(f, "v%lld %.6f %.6f %.6f %.6f %.6f %.6f\n",
                (long long)json_integer_value(json_object_get(v, "version")),
                rb_num(v, "seconds"), rb_num(v, "dense_seconds"), rb_num(ph, "encode"),
                rb_num(ph, "transfer"), rb_num(ph, "apply"), rb_num(ph, "commit"));
    }
    fclose(f);
    f = fopen(gp, "w");
    if (!f)
        return;
    fprintf(f,
            "set terminal pngcairo size 1100,450 noenhanced\n"
            "set output '%s'\n"
            "set multiplot layout 1,2 title 'deltacast refit: %u receivers in %u regions, %s WAN, "
            "%.3g params, %s %.2g%%'\n"
            "set style data histograms\nset style fill solid 0.8 border -1\n"
            "set ylabel 'seconds'\nset logscale y\nset key top left\n"
            "set title 'time to commit, delta vs dense'\n"
            "plot '%s' using 2:xtic(1) title 'delta', '' using 3 title 'dense'\n"
            "unset logscale y\nset style histogram rowstacked\n"
            "set title 'delta refit by phase (encode/apply overlap the transfer)'\n"
            "plot '%s' using 4:xtic(1) title 'encode', '' using 5 title 'transfer', "
            "'' using 6 title 'apply', '' using 7 title 'commit'\n"
            "unset multiplot\n",
            png, c->o.receivers, c->o.regions, c->netns ? c->o.wan_text : "loopback",
            (double)c->o.params, c->o.inject ? "inject" : "optimizer", c->o.rate * 100, dat,
            dat);
    fclose(f);
    if (rb_sh("command -v gnuplot >/dev/null 2>&1") == 0 &&
        rb_sh("gnuplot '%s' 2>/dev/null", gp) == 0)
        rb_say(c, "  plot: %s\n", png);
    else
        rb_say(c, "  (gnuplot not available: no plot; data in %s)\n", dat);
}

static void dc_perf_refit_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast perf refit [--receivers N] [--regions R] [--params P]\n"
            "         [--change-rate C] [--model optimizer|inject] [--wan-rate 100mbit]\n"
            "         [--versions K] [--json] [options]\n"
            "\n"
            "Run a whole refit job on this machine: a trainer in a region of its own and N\n"
            "receivers spread evenly over R regions, K consecutive versions, each refitted as a\n"
            "delta and (from the same baseline) dense, through the same engine and tree.  As\n"
            "root, each region is a network namespace joined to the trainer's by a veth pair\n"
            "shaped with tc tbf to the WAN rate; otherwise loopback (unshaped, and it says so).\n"
            "Every receiver is byte-compared with the trainer's checkpoint.\n"
            "\n"
            "Options:\n"
            "  --receivers N            receivers (default 4)\n"
            "  --senders K              trainer shards: K senders in the trainer region, one\n"
            "                           shard each; node 0 coordinates (default 1)\n"
            "  --regions R              receiver regions (default 4)\n"
            "  --params P               model parameters, BF16 (default 2.5e8)\n"
            "  --change-rate C          fraction of weights changing per version (0.01)\n"
            "  --model M                optimizer (default) or inject\n"
            "  --wan-rate RATE          WAN rate per region link (default 100mbit)\n"
            "  --versions K             consecutive versions (default 2)\n"
            "  --chunk-size S           chunk size (default: config chunk_size)\n"
            "  --no-dense               skip the dense refits (no speedup figure)\n"
            "  --no-netns               loopback even as root\n"
            "  --workdir DIR            keep the job's files in DIR (default: a temp dir on\n"
            "                           /dev/shm when it has room (weights in memory, as on\n"
            "                           a rollout node), else $TMPDIR or /tmp)\n"
            "  --keep                   do not delete the work directory\n"
            "  --plot FILE              PNG plot (default WORKDIR/refit.png)\n"
            "  --transport T            tcp (default), ucx\n"
            "  --from-memory            the trainer (each shard) holds its weights in memory\n"
            "                           and sends through the library (node --from-memory)\n"
            "  --seed S                 model seed (default 1)\n"
            "  --json                   JSON on stdout (encryption: {wan, lan} and per edge in\n"
            "                           versions[].encryption: the TLS cipher suite or \"none\")\n"
            "  -h, --help               show this help\n"
            "\n"
            "The edges between regions are encrypted (TLS 1.3) as config tls says: by\n"
            "default (tls=auto) they are, the edges inside a region are not.\n"
            "Each WAN shaper (tbf at the WAN rate) lets pure ACKs leave before queued data,\n"
            "as fq_codel would; DELTACAST_WAN_FIFO=1 keeps plain FIFO queues instead.\n");
}

static int rb_parse(int argc, char **argv, rb_opts_t *o)
{
    enum { O_RECV = 1, O_SENDERS, O_REG, O_PARAMS, O_RATE, O_MODEL, O_WAN, O_VERS, O_CHUNK, O_NODENSE,
           O_NONETNS, O_WORK, O_KEEP, O_PLOT, O_TRANSPORT, O_SEED, O_JSON, O_DEMO,
           O_FROM_MEMORY };
    static const struct option opts[] = {
        {"receivers", required_argument, NULL, O_RECV},
        {"senders", required_argument, NULL, O_SENDERS},
        {"regions", required_argument, NULL, O_REG},
        {"params", required_argument, NULL, O_PARAMS},
        {"change-rate", required_argument, NULL, O_RATE},
        {"model", required_argument, NULL, O_MODEL},
        {"wan-rate", required_argument, NULL, O_WAN},
        {"versions", required_argument, NULL, O_VERS},
        {"chunk-size", required_argument, NULL, O_CHUNK},
        {"no-dense", no_argument, NULL, O_NODENSE},
        {"no-netns", no_argument, NULL, O_NONETNS},
        {"workdir", required_argument, NULL, O_WORK},
        {"keep", no_argument, NULL, O_KEEP},
        {"plot", required_argument, NULL, O_PLOT},
        {"transport", required_argument, NULL, O_TRANSPORT},
        {"seed", required_argument, NULL, O_SEED},
        {"json", no_argument, NULL, O_JSON},
        {"demo", no_argument, NULL, O_DEMO},
        {"from-memory", no_argument, NULL, O_FROM_MEMORY},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t u;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("perf refit", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_perf_refit_help(stdout);
            return -1;
        case O_RECV:
            if (!dc_cli_parse_u64("perf refit", "--receivers", optarg, &u))
                return DC_EXIT_USAGE;
            o->receivers = (uint32_t)u;
            break;
        case O_SENDERS:
            if (!dc_cli_parse_u64("perf refit", "--senders", optarg, &u) || u == 0 ||
                u > DC_TOPO_MAX_SHARDS)
                return dc_cli_usage_error("perf refit", "--senders wants 1..%d",
                                          DC_TOPO_MAX_SHARDS);
            o->senders = (uint32_t)u;
            break;
        case O_REG:
            if (!dc_cli_parse_u64("perf refit", "--regions", optarg, &u))
                return DC_EXIT_USAGE;
            o->regions = (uint32_t)u;
            break;
        case O_PARAMS: {
            double d;
            if (!dc_cli_parse_double("perf refit", "--params", optarg, &d))
                return DC_EXIT_USAGE;
            o->params = (uint64_t)d;
            break;
        }
        case O_RATE:
            if (!dc_cli_parse_double("perf refit", "--change-rate", optarg, &o->rate))
                return DC_EXIT_USAGE;
            break;
        case O_MODEL:
            if (strcmp(optarg, "optimizer") == 0)
                o->inject = 0;
            else if (strcmp(optarg, "inject") == 0)
                o->inject = 1;
            else
                return dc_cli_usage_error("perf refit", "--model wants optimizer or inject");
            break;
        case O_WAN:
            if (dc_parse_rate(optarg, &o->wan_bps) != DC_OK || o->wan_bps < 1e6)
                return dc_cli_usage_error("perf refit", "--wan-rate: '%s' is not a rate >= 1mbit",
                                          optarg);
            o->wan_text = optarg;
            break;
        case O_VERS:
            if (!dc_cli_parse_u64("perf refit", "--versions", optarg, &u))
                return DC_EXIT_USAGE;
            o->versions = (uint32_t)u;
            break;
        case O_CHUNK:
            if (!dc_cli_parse_size("perf refit", "--chunk-size", optarg, &o->chunk_size))
                return DC_EXIT_USAGE;
            break;
        case O_NODENSE: o->no_dense = 1; break;
        case O_NONETNS: o->netns_off = 1; break;
        case O_WORK: o->workdir = optarg; break;
        case O_KEEP: o->keep = 1; break;
        case O_PLOT: o->plot = optarg; break;
        case O_TRANSPORT: o->transport = optarg; break;
        case O_SEED:
            if (!dc_cli_parse_u64("perf refit", "--seed", optarg, &o->seed))
                return DC_EXIT_USAGE;
            break;
        case O_JSON: o->json = 1; break;
        case O_DEMO: o->demo = 1; break;
        case O_FROM_MEMORY: o->from_memory = 1; break;
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error("perf refit", "unexpected argument '%s'", argv[optind]);
    if (o->regions == 0 || o->receivers < o->regions)
        return dc_cli_usage_error("perf refit", "need 1 <= --regions <= --receivers");
    if (o->receivers + o->senders > RB_MAX_NODES - 1)
        return dc_cli_usage_error("perf refit", "at most %d receivers", RB_MAX_NODES - 2);
    if (o->regions > 200)
        return dc_cli_usage_error("perf refit", "at most 200 regions");
    if (o->versions == 0 || o->versions > 100)
        return dc_cli_usage_error("perf refit", "--versions must be 1..100");
    if (!(o->rate > 0 && o->rate < 0.9))
        return dc_cli_usage_error("perf refit", "--change-rate must be in (0, 0.9)");
    if (o->params < DC_GEN_MIN_PARAMS)
        return dc_cli_usage_error("perf refit", "--params must be at least %u", DC_GEN_MIN_PARAMS);
    return 0;
}

int dc_cmd_perf_refit(int argc, char **argv)
{
    rb_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    rb_ctx_t *c = &ctx;
    c->o.receivers = 4;
    c->o.senders = 1;
    c->o.regions = 4;
    c->o.params = 250000000;
    c->o.rate = 0.01;
    c->o.wan_bps = 100e6;
    c->o.wan_text = "100mbit";
    c->o.versions = 2;
    c->o.seed = 1;
    int rc = rb_parse(argc, argv, &c->o);
    if (rc == -1)
        return DC_EXIT_OK;
    if (rc != 0)
        return rc;
    const char *cmd = c->o.demo ? "demo" : "perf refit";
    dc_status_t st = rb_job_open(c, "refit", 0);
    if (st != DC_OK)
        return dc_cli_fail(cmd, st, NULL);
    json_t *delta = NULL, *dense = NULL, *out = NULL;
    int exact_delta = 0, exact_dense = 0;
    int exact_dv[100] = {0}, exact_ddv[100] = {0};
    dc_gen_result_t gr;
    memset(&gr, 0, sizeof(gr));

    if ((st = rb_job_start(c)) != DC_OK)
        goto fail;
    rb_say(c, "%s: %u receivers in %u regions, %.3g params BF16, %s %.2g%%, %u versions; %s\n",
           cmd, c->o.receivers, c->o.regions, (double)c->o.params,
           c->o.inject ? "inject" : "optimizer", c->o.rate * 100, c->o.versions,
           c->netns ? "network namespaces + tc tbf" : "loopback");
    rb_say_network(c, " (the WAN rate is not emulated)");
    if ((st = rb_make_versions(c, &gr)) != DC_OK)
        goto fail;
    char fb[32];
    rb_say(c, "  files: %s%s\n", c->dir,
           strncmp(c->dir, "/dev/shm/", 9) == 0 ? " (tmpfs: weights in memory)" : "");
    rb_say(c, "  model: %llu params, %llu tensors, %s per checkpoint, real change rate %.3f%%\n",
           (unsigned long long)gr.params, (unsigned long long)gr.tensors,
           dc_fmt_bytes(gr.file_bytes, fb, sizeof(fb)), gr.real_rate * 100);
    rb_say(c, "  delta refit of v1..v%u (receivers byte-compared after each version) ...\n",
           c->o.versions);
    delta = rb_run(c, 0, c->o.versions, &exact_delta, exact_dv);
    if (!delta) {
        st = dc_last_status() ? dc_last_status() : DC_ERR_INTERNAL;
        goto fail;
    }
    if (!c->o.no_dense) {
        rb_say(c, "  dense refit of v1..v%u (same engine, same tree) ...\n", c->o.versions);
        dense = rb_run(c, 1, c->o.versions, &exact_dense, exact_ddv);
        if (!dense) {
            st = dc_last_status() ? dc_last_status() : DC_ERR_INTERNAL;
            goto fail;
        }
    }

    /* results */
    out = json_object();
    json_t *vers = json_array();
    json_t *dv = json_object_get(delta, "versions");
    json_t *ddv = dense ? json_object_get(dense, "versions") : NULL;
    double tot = 0, tot_dense = 0, busiest_tot = 0, first_enc = 0;
    uint64_t payload_tot = 0;
    json_t *wan_tot = json_object();
    json_t *ph_tot = json_object();
    const char *phn[] = {"encode", "transfer", "apply", "commit"};
    size_t i;
    json_t *v;
    json_array_foreach(dv, i, v)
    {
        json_t *o = json_object();
        json_t *dvv = ddv ? json_array_get(ddv, i) : NULL;
        double s = rb_num(v, "seconds");
        double ds = dvv ? rb_num(dvv, "seconds") : 0;
        double busiest;
        json_t *wb = rb_wan_bytes(c, v, &busiest);
        const char *k;
        json_t *x;
        json_object_foreach(wb, k, x)
        {
            json_t *t = json_object_get(wan_tot, k);
            json_object_set_new(wan_tot, k, json_integer((t ? json_integer_value(t) : 0) +
                                                         json_integer_value(x)));
        }
        json_object_set_new(o, "version", json_integer((json_int_t)json_integer_value(
                                              json_object_get(v, "version"))));
        json_object_set_new(o, "seconds", json_real(s));
        json_object_set_new(o, "dense_seconds", dvv ? json_real(ds) : json_null());
        json_object_set_new(o, "speedup_vs_dense", dvv && s > 0 ? json_real(ds / s) : json_null());
        json_object_set_new(o, "payload_bytes", json_integer((json_int_t)rb_num(v, "payload_bytes")));
        json_object_set_new(o, "dense_payload_bytes",
                            dvv ? json_integer((json_int_t)rb_num(dvv, "payload_bytes")) : json_null());
        json_object_set_new(o, "checkpoint_bytes", json_integer((json_int_t)rb_num(v, "dense_bytes")));
        json_object_set_new(o, "wan_bytes", wb);
        json_object_set_new(o, "encryption", rb_link_encryption(v));
        json_object_set_new(o, "busiest_wan_bytes", json_integer((json_int_t)busiest));
        json_object_set_new(o, "first_frame_seconds", json_real(rb_num(v, "first_frame_seconds")));
        if (c->netns) {
            double bound = busiest * 8 / c->o.wan_bps + rb_num(v, "first_frame_seconds");
            json_object_set_new(o, "wan_bound_seconds", json_real(bound));
            json_object_set_new(o, "ratio_to_wan_bound", json_real(bound > 0 ? s / bound : 0));
            if (dvv) {
                double dbound = rb_num(dvv, "payload_bytes") * 8 / c->o.wan_bps;
                json_object_set_new(o, "dense_wan_bound_seconds", json_real(dbound));
            }
        }
        json_object_set_new(o, "exact", json_boolean(i < 100 && exact_dv[i]));
        json_object_set_new(o, "dense_exact", dense ? json_boolean(i < 100 && exact_ddv[i])
                                                    : json_null());
        json_object_set_new(o, "phases", json_deep_copy(json_object_get(v, "phases")));
        json_object_set_new(o, "frames", json_integer((json_int_t)rb_num(v, "frames")));
        json_object_set_new(o, "repairs", json_integer((json_int_t)rb_num(v, "repairs")));
        json_object_set_new(o, "repair_bytes", json_integer((json_int_t)rb_num(v, "repair_bytes")));
        json_array_append_new(vers, o);
        tot += s;
        tot_dense += ds;
        busiest_tot += busiest;
        payload_tot += (uint64_t)rb_num(v, "payload_bytes");
        if (i == 0)
            first_enc = rb_num(v, "first_frame_seconds");
        for (int p = 0; p < 4; p++) {
            json_t *ph = json_object_get(v, "phases");
            json_object_set_new(ph_tot, phn[p], json_real(rb_num(ph_tot, phn[p]) +
                                                          rb_num(ph, phn[p])));
        }
    }
    json_object_set_new(out, "receivers", json_integer(c->o.receivers));
    json_object_set_new(out, "senders", json_integer(c->o.senders));
    json_object_set_new(out, "sender_memory", json_string(c->o.from_memory ? "host (library)"
                                                                           : "file"));
    json_object_set_new(out, "regions", json_integer(c->o.regions));
    json_object_set_new(out, "params", json_integer((json_int_t)gr.params));
    json_object_set_new(out, "model", json_string(c->o.inject ? "inject" : "optimizer"));
    json_object_set_new(out, "change_rate", json_real(gr.real_rate));
    json_object_set_new(out, "network", json_string(c->netns ? "netns+tbf" : "loopback-unshaped"));
    json_object_set_new(out, "wan_rate_bps", c->netns ? json_real(c->o.wan_bps) : json_null());
    json_object_set_new(out, "transport", json_string(c->o.transport ? c->o.transport : "tcp"));
    {
        /* what the edges between regions and inside them use (per edge:
         * versions[].encryption) */
        const char *tls = dc_config_get("tls"), *suite = dc_config_get("tls_cipher");
        bool off = tls && strcmp(tls, "off") == 0, on = tls && strcmp(tls, "on") == 0;
        const char *lan_t = c->o.transport ? c->o.transport : "tcp";
        json_t *enc = json_object();
        json_object_set_new(enc, "wan", json_string(off ? "none" : suite));
        json_object_set_new(enc, "lan",
                            json_string(on && strcmp(lan_t, "tcp") == 0 ? suite : "none"));
        json_object_set_new(out, "encryption", enc);
    }
    json_object_set_new(out, "seconds", json_real(tot));
    json_object_set_new(out, "dense_seconds", dense ? json_real(tot_dense) : json_null());
    json_object_set_new(out, "speedup_vs_dense", dense && tot > 0 ? json_real(tot_dense / tot) : json_null());
    json_object_set_new(out, "payload_bytes", json_integer((json_int_t)payload_tot));
    json_object_set_new(out, "wan_bytes", wan_tot);
    json_object_set_new(out, "exact", json_boolean(exact_delta && (!dense || exact_dense)));
    json_object_set_new(out, "phases", ph_tot);
    if (c->netns) {
        double bound = busiest_tot * 8 / c->o.wan_bps + first_enc;
        json_object_set_new(out, "wan_bound_seconds", json_real(bound));
        json_object_set_new(out, "ratio_to_wan_bound", json_real(bound > 0 ? tot / bound : 0));
    }
    json_object_set_new(out, "versions", vers);
    json_object_set_new(out, "workdir", json_string(c->dir));
    json_object_set_new(out, "note", json_string("all processes share this machine's cores"));

    {
        /* results outlive a temporary work directory */
        int tmp = !c->o.keep && !c->o.workdir;
        const char *base = c->o.demo ? "/tmp/deltacast-demo" : "/tmp/deltacast-refit-latest";
        char png[PATH_MAX], jp[PATH_MAX];
        if (c->o.plot)
            snprintf(png, sizeof(png), "%s", c->o.plot);
        else if (tmp)
            snprintf(png, sizeof(png), "%s.png", base);
        else
            rb_path(png, sizeof(png), c, "refit.png");
        if (tmp)
            snprintf(jp, sizeof(jp), "%s.json", base);
        else
            rb_path(jp, sizeof(jp), c, "refit.json");
        if (json_dump_file(out, jp, JSON_INDENT(2)) == 0)
            rb_say(c, "  results: %s\n", jp);
        rb_plot(c, vers, png);
    }
    if (c->o.json) {
        dc_perf_json_print(out);
    } else {
        printf("\n%-8s %10s %10s %9s %12s %12s %10s %7s\n", "version", "delta s", "dense s",
               "speedup", "payload", "busiest WAN", "apply s", "exact");
        json_array_foreach(vers, i, v)
        {
            char pb[32], wb[32], d[32] = "-";
            json_t *ph = json_object_get(v, "phases");
            double sp = rb_num(v, "speedup_vs_dense");
            if (dense)
                snprintf(d, sizeof(d), "%.3f", rb_num(v, "dense_seconds"));
            printf("v%-7lld %10.3f %10s %8.1fx %12s %12s %10.3f %7s\n",
                   (long long)json_integer_value(json_object_get(v, "version")),
                   rb_num(v, "seconds"), d,
                   sp, dc_fmt_bytes((uint64_t)rb_num(v, "payload_bytes"), pb, sizeof(pb)),
                   dc_fmt_bytes((uint64_t)rb_num(v, "busiest_wan_bytes"), wb, sizeof(wb)),
                   rb_num(ph, "apply"), json_is_true(json_object_get(v, "exact")) ? "yes" : "NO");
        }
        char td[32] = "-";
        if (dense)
            snprintf(td, sizeof(td), "%.3f", tot_dense);
        printf("%-8s %10.3f %10s %8.1fx   (%s; every receiver byte-compared: %s)\n", "total", tot,
               td,
               dense && tot > 0 ? tot_dense / tot : 0,
               c->netns ? "netns + tbf" : "loopback, unshaped",
               json_is_true(json_object_get(out, "exact")) ? "exact" : "NOT EXACT");
        if (c->netns)
            printf("time / (busiest WAN link bytes / WAN rate + first chunk): %.2f\n",
                   rb_num(out, "ratio_to_wan_bound"));
        printf("(figures from a machine whose %d cores all node processes share)\n",
               dc_cpu_count());
    }
    int exact_all = json_is_true(json_object_get(out, "exact"));
    json_decref(out);
    json_decref(delta);
    json_decref(dense);
    rb_job_close(c, c->o.keep || c->o.workdir);
    if (!exact_all) {
        fprintf(stderr, "deltacast %s: error: a receiver is not byte-exact\n", cmd);
        return DC_EXIT_FAIL;
    }
    return DC_EXIT_OK;

fail:
    json_decref(delta);
    json_decref(dense);
    rb_net_teardown(c);
    return dc_cli_fail(cmd, st, "work directory %s", c->dir);
}
