/* cmd_node.c - `deltacast node`: one process of a refit job. */
#include "cli.h"
#include "cli/node_launch.h"
#include "engine/node.h"
#include "kernels/safetensors.h"
#include "topology/topo.h"
#include "util/dc_util.h"
#include "verbs/auth.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void dc_node_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast node (--topology FILE | --local R:N[:PORT] | --slurm |\n"
            "                       --nodelist LIST) [--rank N] [options]\n"
            "\n"
            "Run one process of a refit job.  Node 0 of the topology is the root (a\n"
            "sender and the coordinator: runs the joint commit); every sender encodes\n"
            "and sends the chunks of the shards it owns (each may be given the whole\n"
            "--versions DIR: it reads only its own chunks); every other node is a\n"
            "receiver that relays to its children in the tree.  The\n"
            "rank comes from --rank, else from MPI (OMPI_COMM_WORLD_RANK, PMI_RANK,\n"
            "PMIX_RANK) or Slurm (SLURM_PROCID); the launcher's world size must be the\n"
            "topology's node count.  Connections authenticate with the job secret:\n"
            "--secret-file FILE, DELTACAST_SECRET_FILE=FILE or DELTACAST_SECRET=TEXT\n"
            "(srun passes the environment to every task; mpirun needs\n"
            "-x DELTACAST_SECRET_FILE).\n"
            "\n"
            "Options:\n"
            "  --topology FILE          topology file (YAML)\n"
            "  --local R:N[:PORT]       synthetic local topology: R regions of N receivers\n"
            "                           on 127.0.0.1, ports PORT.. (default 7300)\n"
            "  --slurm                  the topology from Slurm: one node per task, on the\n"
            "                           hosts of SLURM_STEP_NODELIST (SLURM_JOB_NODELIST)\n"
            "                           as SLURM_STEP_TASKS_PER_NODE places them\n"
            "  --nodelist LIST          the same from a host list (Slurm syntax:\n"
            "                           'gpu-[01-04],cpu7'); the tasks (the launcher's\n"
            "                           world size, else --world-size, else one per entry)\n"
            "                           in blocks over the hosts (a host named twice\n"
            "                           counts once: 'a,a,b' puts tasks 0, 1 on a)\n"
            "    With --slurm/--nodelist: node r is task r, node 0..S-1 the senders; a\n"
            "    task with local rank L on HOST listens on HOST:PORT+L.\n"
            "  --region-map MAP         PATTERN=REGION,... (fnmatch globs on host names,\n"
            "                           first match wins, others in region 'default';\n"
            "                           default: one region), e.g. 'gpu-*=train,*=rollout'\n"
            "  --senders S              the first S tasks are senders, one shard each (1)\n"
            "  --port PORT              first port (7300); 0: each node binds a free port\n"
            "                           and publishes it with --rendezvous\n"
            "  --rendezvous DIR         with --port 0: a directory every rank reads (a\n"
            "                           shared filesystem across hosts); node r writes\n"
            "                           DIR/rank-r, then every node waits (--wait-ms) for\n"
            "                           all; use a fresh DIR per job without Slurm or MPI.\n"
            "                           With --topology: nodes whose addr is HOST:0 bind\n"
            "                           a free port and publish it the same way\n"
            "  --world-size N           tasks, when no launcher says (--nodelist)\n"
            "  --rank N                 this process's node index (the launcher's\n"
            "                           variables are then ignored)\n"
            "  --secret-file FILE       the job secret (config secret_file)\n"
            "  --state DIR              state directory: commit record, journal; created\n"
            "                           with its parents (default deltacast-state/node-RANK)\n"
            "  In --weights and --state, %%r is replaced by the rank, so one command line\n"
            "  serves every rank: mpirun -np 5 deltacast node --topology t.yaml \\\n"
            "    --versions ckpt/ --weights w%%r.st --state st/%%r\n"
            " senders (--stats, --count, --dense, --wait-ms, --progress: node 0):\n"
            "  --versions DIR           checkpoints DIR/v0.safetensors .. vK.safetensors\n"
            "  --count K                refit up to version K (default: every vN present)\n"
            "  --dense                  send whole checkpoints (overwrites), not deltas\n"
            "  --stats FILE             write per-version figures as JSON\n"
            "  --wait-ms T              wait T ms for every receiver to join (60000)\n"
            "  --progress               progress line on stderr\n"
            "  --json                   the per-version lines (stdout) as JSON, one object\n"
            "                           a line, and a final {\"summary\": ...}; by default\n"
            "                           one line per committed version: version, bytes\n"
            "                           sent of the dense size (ratio), seconds, receivers,\n"
            "                           repairs, and a final total line\n"
            "  --from-memory            a sender as a trainer embedding the library: holds\n"
            "                           the bytes it sends in its own memory (each vN read\n"
            "                           into the same buffers, as an optimizer step would)\n"
            "                           and sends them with dc_refit_sender_push\n"
            " receiver:\n"
            "  --weights FILE           this node's checkpoint copy, updated in place; its\n"
            "                           blocks are reserved at start (a sparse FILE on a\n"
            "                           full disk fails there, naming it, before any byte\n"
            "                           changes)\n"
            "  --initial-version V      version of FILE when there is no commit record (0);\n"
            "                           none: it holds no version yet (cold start: the first\n"
            "                           version comes dense, every chunk whole)\n"
            "  --durable                fsync journal transitions (power-loss safe)\n"
            " both:\n"
            "  --abort-ms T             a receiver silent this long aborts a version\n"
            "                           (default 4 x timeout_ms)\n"
            "  --chunk-size S           chunk size (default: config chunk_size)\n"
            "  --transport T            tcp, ucx, rdma or auto (default: config)\n"
            "  -h, --help               show this help\n");
}

/* Copy `in` to `out`, replacing every "%r" with the rank. */
static int dc_node_subst_rank(char *out, size_t len, const char *in, uint32_t rank)
{
    size_t k = 0;
    for (const char *p = in; *p; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            int n = snprintf(out + k, len - k, "%u", rank);
            if (n < 0 || (size_t)n >= len - k)
                return -1;
            k += (size_t)n;
            p++;
        } else {
            if (k + 1 >= len)
                return -1;
            out[k++] = *p;
        }
    }
    out[k] = 0;
    return 0;
}

/* A trainer's memory: the tensor list, and one buffer per range of
 * canonical bytes this sender sends (dc_refit_sender_ranges). */
typedef struct dc_mem_trainer {
    size_t nt, ns;
    dc_refit_tensor_t *tens;
    dc_refit_segment_t *segs;
} dc_mem_trainer_t;

static void dc_mem_trainer_free(dc_mem_trainer_t *t)
{
    for (size_t i = 0; t->segs && i < t->ns; i++)
        free(t->segs[i].ptr);
    for (size_t i = 0; t->tens && i < t->nt; i++)
        free((char *)t->tens[i].name);
    free(t->segs);
    free(t->tens);
}

/* The tensor list of a version file (names copied). */
static dc_status_t dc_mem_trainer_tensors(dc_mem_trainer_t *t, const dc_st_file_t *f)
{
    size_t n = dc_st_count(f);
    t->tens = calloc(n ? n : 1, sizeof(*t->tens));
    if (!t->tens)
        return dc_error(DC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const dc_st_tensor_t *x = dc_st_tensor(f, i);
        char *name = strdup(x->name);
        if (!name)
            return dc_error(DC_ERR_NOMEM, "out of memory");
        t->tens[i] = (dc_refit_tensor_t){name, dc_dtype_name(x->dtype), x->nelems};
        t->nt = i + 1;
    }
    return DC_OK;
}

/* Read version v of dir into the trainer's buffers: the first call takes
 * the tensor list from that file and allocates the buffers of the ranges
 * cfg's rank sends; later files must have the same tensors. */
static dc_status_t dc_mem_trainer_load(dc_mem_trainer_t *t, dc_refit_node_opts_t *cfg,
                                       const char *dir, uint64_t v)
{
    char path[PATH_MAX];
    if (dc_node_version_path(path, sizeof(path), dir, v) != 0)
        return dc_error(DC_ERR_INVALID, "versions dir path too long");
    dc_st_file_t *f = NULL;
    dc_status_t st = dc_st_open(path, DC_ST_READ, &f);
    if (st != DC_OK)
        return st;
    if (!t->tens) {
        st = dc_mem_trainer_tensors(t, f);
        cfg->tensors = t->tens;
        cfg->n_tensors = t->nt;
        size_t n = 0;
        if (st == DC_OK && dc_refit_sender_ranges(cfg, NULL, 0, &n) == DC_ERR_NOMEM && n)
            st = (t->segs = calloc(n, sizeof(*t->segs))) != NULL
                     ? dc_refit_sender_ranges(cfg, t->segs, n, &t->ns)
                     : dc_error(DC_ERR_NOMEM, "out of memory");
        else if (st == DC_OK)
            st = dc_last_status() != DC_OK ? dc_last_status()
                                           : dc_error(DC_ERR_INVALID, "node %u sends nothing",
                                                      cfg->rank);
        for (size_t i = 0; st == DC_OK && i < t->ns; i++)
            if (!(t->segs[i].ptr = malloc(t->segs[i].length)))
                st = dc_error(DC_ERR_NOMEM, "out of memory for %llu bytes",
                              (unsigned long long)t->segs[i].length);
        cfg->segments = t->segs;
        cfg->n_segments = t->ns;
    }
    if (st == DC_OK && dc_st_count(f) != t->nt)
        st = dc_error(DC_ERR_UNSUPPORTED, "%s has %zu tensors, the job %zu", path,
                      dc_st_count(f), t->nt);
    for (size_t i = 0; st == DC_OK && i < t->nt; i++) {
        const dc_st_tensor_t *x = dc_st_tensor(f, i);
        if (strcmp(x->name, t->tens[i].name) != 0 || x->nelems != t->tens[i].nelems)
            st = dc_error(DC_ERR_UNSUPPORTED, "%s: tensor %zu ('%s') differs from the job's "
                          "('%s')", path, i, x->name, t->tens[i].name);
    }
    /* the ranges are in tensor order */
    for (size_t k = 0, i = 0; st == DC_OK && k < t->ns; k++) {
        while (i < t->nt && strcmp(t->tens[i].name, t->segs[k].tensor) != 0)
            i++;
        const dc_st_tensor_t *x = i < t->nt ? dc_st_tensor(f, i) : NULL;
        if (!x || t->segs[k].offset + t->segs[k].length > x->end - x->begin) {
            st = dc_error(DC_ERR_INTERNAL, "range %zu outside its tensor", k);
            break;
        }
        memcpy(t->segs[k].ptr, dc_st_data(f, x) + t->segs[k].offset, t->segs[k].length);
    }
    dc_st_close(f);
    return st;
}

/* The root's per-version lines on stdout (like iperf's): one per committed
 * version and a total, as text or as newline-delimited JSON. */
typedef struct dc_node_report {
    int json;
    uint64_t versions, payload, dense, repairs;
    int repairs_unknown; /* a sender from memory does not count them */
    double seconds;
    uint32_t receivers;
} dc_node_report_t;

static double dc_node_ratio(uint64_t dense, uint64_t payload)
{
    return payload ? (double)dense / (double)payload : 0;
}

/* repairs: UINT64_MAX when unknown (a sender from memory) */
static void dc_node_report_version(void *user, const dc_node_vsum_t *vs)
{
    dc_node_report_t *r = user;
    r->versions++;
    r->payload += vs->payload_bytes;
    r->dense += vs->dense_bytes;
    r->seconds += vs->seconds;
    r->receivers = vs->receivers;
    if (vs->repairs != UINT64_MAX)
        r->repairs += vs->repairs;
    else
        r->repairs_unknown = 1;
    double ratio = dc_node_ratio(vs->dense_bytes, vs->payload_bytes);
    if (r->json) {
        printf("{\"version\": %llu, \"payload_bytes\": %llu, \"dense_bytes\": %llu, "
               "\"ratio\": %.2f, \"seconds\": %.6f, \"receivers\": %u, ",
               (unsigned long long)vs->version, (unsigned long long)vs->payload_bytes,
               (unsigned long long)vs->dense_bytes, ratio, vs->seconds, vs->receivers);
        if (vs->repairs == UINT64_MAX)
            printf("\"repairs\": null, ");
        else
            printf("\"repairs\": %llu, ", (unsigned long long)vs->repairs);
        printf("\"repair_bytes\": %llu}\n", (unsigned long long)vs->repair_bytes);
    } else {
        char pb[32], db[32], rb[32];
        dc_fmt_bytes(vs->payload_bytes, pb, sizeof(pb));
        dc_fmt_bytes(vs->dense_bytes, db, sizeof(db));
        dc_fmt_bytes(vs->repair_bytes, rb, sizeof(rb));
        if (vs->repairs == UINT64_MAX)
            snprintf(rb + strlen(rb), sizeof(rb) - strlen(rb), " repaired");
        printf("version %llu: %s of %s (%.1fx) in %.3f s, %u receiver%s, ",
               (unsigned long long)vs->version, pb, db, ratio, vs->seconds, vs->receivers,
               vs->receivers == 1 ? "" : "s");
        if (vs->repairs == UINT64_MAX)
            printf("%s\n", rb);
        else
            printf("%llu repair%s (%s)\n", (unsigned long long)vs->repairs,
                   vs->repairs == 1 ? "" : "s", rb);
    }
    fflush(stdout);
}

static void dc_node_report_total(const dc_node_report_t *r, dc_status_t st)
{
    double ratio = dc_node_ratio(r->dense, r->payload);
    if (r->json) {
        char rep[32] = "null";
        if (!r->repairs_unknown)
            snprintf(rep, sizeof(rep), "%llu", (unsigned long long)r->repairs);
        printf("{\"summary\": {\"ok\": %s, \"versions\": %llu, \"payload_bytes\": %llu, "
               "\"dense_bytes\": %llu, \"ratio\": %.2f, \"seconds\": %.6f, \"receivers\": "
               "%u, \"repairs\": %s}}\n",
               st == DC_OK ? "true" : "false", (unsigned long long)r->versions,
               (unsigned long long)r->payload, (unsigned long long)r->dense, ratio, r->seconds,
               r->receivers, rep);
    } else if (r->versions) { /* a job that failed before any version: its error says it */
        char pb[32], db[32];
        dc_fmt_bytes(r->payload, pb, sizeof(pb));
        dc_fmt_bytes(r->dense, db, sizeof(db));
        printf("total: %llu version%s%s, %s of %s (%.1fx) in %.3f s\n",
               (unsigned long long)r->versions, r->versions == 1 ? "" : "s",
               st == DC_OK ? "" : " (then failed)", pb, db,
               ratio, r->seconds);
    }
    fflush(stdout);
}

/* Receivers of the topology (every node that is not a sender). */
static uint32_t dc_node_receivers(const dc_topo_t *topo)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < dc_topo_node_count(topo); i++) {
        dc_topo_node_info_t ni;
        memset(&ni, 0, sizeof(ni));
        ni.size = sizeof(ni);
        k += dc_topo_node(topo, i, &ni) == DC_OK && ni.role != DC_TOPO_ROLE_SENDER;
    }
    return k;
}

/* A sender as a trainer that embeds the library: versions_dir/vN.safetensors
 * stand for its optimizer steps; it holds only the bytes it sends. */
static dc_status_t dc_node_from_memory(const dc_node_cfg_t *nc)
{
    uint64_t committed = nc->initial_version, b = 0;
    uint8_t d[16];
    dc_status_t st = dc_refit_committed(nc->state_dir, &committed, &b, d);
    if (st == DC_ERR_NOT_FOUND)
        committed = nc->initial_version;
    else if (st != DC_OK)
        return st;
    uint64_t last = nc->nversions;
    if (!last) {
        char p[PATH_MAX];
        for (last = committed; dc_node_version_path(p, sizeof(p), nc->versions_dir,
                                                    last + 1) == 0 && access(p, R_OK) == 0;)
            last++;
    }
    dc_refit_node_opts_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.size = sizeof(cfg);
    cfg.topo = nc->topo;
    cfg.rank = nc->rank;
    cfg.state_dir = nc->state_dir;
    cfg.dense = nc->dense;
    cfg.stats_path = nc->stats_path;
    cfg.wait_ms = nc->wait_ms;
    cfg.initial_version = nc->initial_version;
    cfg.abort_ms = nc->abort_ms;
    cfg.chunk_size = nc->chunk_size;
    cfg.transport = nc->transport; /* NULL: config transport */
    dc_mem_trainer_t tr = {0};
    st = dc_mem_trainer_load(&tr, &cfg, nc->versions_dir, committed);
    dc_refit_sender_t *s = NULL;
    if (st == DC_OK)
        st = dc_refit_sender_open(&cfg, &s);
    for (uint64_t v = committed + 1; st == DC_OK && v <= last; v++) {
        st = dc_mem_trainer_load(&tr, &cfg, nc->versions_dir, v);
        dc_refit_version_stats_t vs = {.size = sizeof(vs)};
        if (st == DC_OK)
            st = dc_refit_sender_push(s, NULL, 0, &vs);
        if (st == DC_OK && nc->on_version) {
            dc_node_vsum_t sum = {.version = vs.version, .payload_bytes = vs.payload_bytes,
                                  .repair_bytes = vs.repair_bytes, .dense_bytes = vs.dense_bytes,
                                  .repairs = UINT64_MAX, .seconds = vs.seconds,
                                  .receivers = dc_node_receivers(nc->topo)};
            nc->on_version(nc->on_version_user, &sum);
        }
    }
    char why[1024] = "";
    if (st != DC_OK)
        snprintf(why, sizeof(why), "%s", dc_last_error());
    dc_status_t cst = s ? dc_refit_sender_close(s) : DC_OK;
    dc_mem_trainer_free(&tr);
    if (st != DC_OK)
        return dc_error(st, "%s", why);
    return cst;
}

int dc_cmd_node(int argc, char **argv)
{
    enum { O_TOPO = 1, O_LOCAL, O_RANK, O_STATE, O_VERSIONS, O_COUNT, O_DENSE, O_STATS,
           O_WAIT, O_PROGRESS, O_WEIGHTS, O_INITIAL, O_DURABLE, O_ABORT, O_CHUNK,
           O_TRANSPORT, O_ROLE, O_LISTEN, O_FROM_MEMORY, O_SLURM, O_NODELIST, O_REGION_MAP,
           O_SENDERS, O_PORT, O_RENDEZVOUS, O_WORLD, O_SECRET_FILE, O_JSON };
    static const struct option opts[] = {
        {"topology", required_argument, NULL, O_TOPO},
        {"local", required_argument, NULL, O_LOCAL},
        {"rank", required_argument, NULL, O_RANK},
        {"state", required_argument, NULL, O_STATE},
        {"versions", required_argument, NULL, O_VERSIONS},
        {"count", required_argument, NULL, O_COUNT},
        {"dense", no_argument, NULL, O_DENSE},
        {"stats", required_argument, NULL, O_STATS},
        {"wait-ms", required_argument, NULL, O_WAIT},
        {"progress", no_argument, NULL, O_PROGRESS},
        {"weights", required_argument, NULL, O_WEIGHTS},
        {"initial-version", required_argument, NULL, O_INITIAL},
        {"durable", no_argument, NULL, O_DURABLE},
        {"abort-ms", required_argument, NULL, O_ABORT},
        {"chunk-size", required_argument, NULL, O_CHUNK},
        {"transport", required_argument, NULL, O_TRANSPORT},
        {"role", required_argument, NULL, O_ROLE},
        {"listen", required_argument, NULL, O_LISTEN},
        {"from-memory", no_argument, NULL, O_FROM_MEMORY},
        {"json", no_argument, NULL, O_JSON},
        {"slurm", no_argument, NULL, O_SLURM},
        {"nodelist", required_argument, NULL, O_NODELIST},
        {"region-map", required_argument, NULL, O_REGION_MAP},
        {"senders", required_argument, NULL, O_SENDERS},
        {"port", required_argument, NULL, O_PORT},
        {"rendezvous", required_argument, NULL, O_RENDEZVOUS},
        {"world-size", required_argument, NULL, O_WORLD},
        {"secret-file", required_argument, NULL, O_SECRET_FILE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dc_node_cfg_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    const char *topo_path = NULL, *local = NULL;
    int64_t rank = -1;
    uint64_t u;
    int from_memory = 0;
    dc_node_report_t report = {0};
    dc_node_launch_t lo = {.port = -1};
    const char *secret_file = NULL;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("node", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_node_help(stdout);
            return DC_EXIT_OK;
        case O_TOPO: topo_path = optarg; break;
        case O_LOCAL: local = optarg; break;
        case O_RANK:
            if (!dc_cli_parse_u64("node", "--rank", optarg, &u))
                return DC_EXIT_USAGE;
            rank = (int64_t)u;
            break;
        case O_STATE: cfg.state_dir = optarg; break;
        case O_VERSIONS: cfg.versions_dir = optarg; break;
        case O_COUNT:
            if (!dc_cli_parse_u64("node", "--count", optarg, &u))
                return DC_EXIT_USAGE;
            cfg.nversions = (uint32_t)u;
            break;
        case O_DENSE: cfg.dense = 1; break;
        case O_STATS: cfg.stats_path = optarg; break;
        case O_WAIT:
            if (!dc_cli_parse_u64("node", "--wait-ms", optarg, &u))
                return DC_EXIT_USAGE;
            cfg.wait_ms = (uint32_t)u;
            break;
        case O_PROGRESS: cfg.progress = 1; break;
        case O_WEIGHTS: cfg.weights = optarg; break;
        case O_INITIAL:
            if (strcmp(optarg, "none") == 0)
                cfg.cold = 1;
            else if (!dc_cli_parse_u64("node", "--initial-version", optarg,
                                       &cfg.initial_version))
                return DC_EXIT_USAGE;
            break;
        case O_DURABLE: cfg.durable = 1; break;
        case O_ABORT:
            if (!dc_cli_parse_u64("node", "--abort-ms", optarg, &u))
                return DC_EXIT_USAGE;
            cfg.abort_ms = (uint32_t)u;
            break;
        case O_CHUNK:
            if (!dc_cli_parse_size("node", "--chunk-size", optarg, &cfg.chunk_size))
                return DC_EXIT_USAGE;
            break;
        case O_TRANSPORT: cfg.transport = optarg; break;
        case O_FROM_MEMORY: from_memory = 1; break;
        case O_JSON: report.json = 1; break;
        case O_SLURM: lo.slurm = 1; break;
        case O_NODELIST: lo.nodelist = optarg; break;
        case O_REGION_MAP: lo.region_map = optarg; break;
        case O_RENDEZVOUS: lo.rendezvous = optarg; break;
        case O_SECRET_FILE: secret_file = optarg; break;
        case O_SENDERS:
            if (!dc_cli_parse_u64("node", "--senders", optarg, &u))
                return DC_EXIT_USAGE;
            if (u == 0 || u > 64)
                return dc_cli_usage_error("node", "--senders wants 1..64, got %s", optarg);
            lo.senders = (uint32_t)u;
            break;
        case O_PORT:
            if (!dc_cli_parse_u64("node", "--port", optarg, &u))
                return DC_EXIT_USAGE;
            if (u > 65535)
                return dc_cli_usage_error("node", "--port wants 0..65535, got %s", optarg);
            lo.port = (int64_t)u;
            break;
        case O_WORLD:
            if (!dc_cli_parse_u64("node", "--world-size", optarg, &u))
                return DC_EXIT_USAGE;
            if (u == 0 || u > 1000000)
                return dc_cli_usage_error("node", "--world-size wants 1..1000000, got %s", optarg);
            lo.world = (uint32_t)u;
            break;
        case O_ROLE:
        case O_LISTEN:
            return dc_cli_usage_error("node", "--role/--listen are taken from the topology "
                                              "(node 0 is the root); use --rank");
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error("node", "unexpected argument '%s'", argv[optind]);
    int launched = lo.slurm || lo.nodelist;
    if (!!topo_path + !!local + lo.slurm + !!lo.nodelist != 1)
        return dc_cli_usage_error("node", "give exactly one of --topology, --local, --slurm and "
                                          "--nodelist");
    if (!launched && (lo.region_map || lo.senders || lo.port >= 0 || lo.world))
        return dc_cli_usage_error("node", "--region-map, --senders, --port and --world-size go "
                                          "with --slurm or --nodelist");
    if (!launched && !topo_path && lo.rendezvous)
        return dc_cli_usage_error("node", "--rendezvous goes with --topology (nodes with port 0 "
                                          "in their address) or --slurm/--nodelist --port 0");
    if (lo.port == 0 && !lo.rendezvous)
        return dc_cli_usage_error("node", "--port 0 needs --rendezvous DIR: the nodes publish "
                                          "the ports they bound there");
    if (launched && lo.rendezvous && lo.port != 0)
        return dc_cli_usage_error("node", "--rendezvous goes with --port 0");
    if (secret_file) {
        dc_status_t sst = dc_config_set("secret_file", secret_file);
        if (sst != DC_OK)
            return dc_cli_fail("node", sst, "--secret-file");
    }
    dc_launch_info_t li;
    memset(&li, 0, sizeof(li));
    li.size = sizeof(li);
    dc_status_t st = DC_OK;
    if (rank >= 0) {
        /* --rank: started by hand, even inside an allocation whose
         * SLURM_NTASKS / SLURM_PROCID describe the batch shell */
        li = (dc_launch_info_t){.size = sizeof(li), .rank = -1, .world_size = -1,
                                .local_rank = -1, .source = "none"};
    } else if ((st = dc_launch_from_env(&li)) != DC_OK) {
        return dc_cli_fail("node", st, "reading the launcher's environment");
    }
    if (rank < 0 && li.rank < 0)
        return dc_cli_usage_error("node", "no --rank and no MPI/Slurm rank in the environment");
    if (rank < 0)
        rank = li.rank;
    if (rank > UINT32_MAX)
        return dc_cli_usage_error("node", "--rank %lld is too large", (long long)rank);
    cfg.rank = (uint32_t)rank;
    /* one command line for every rank (mpirun, srun): "%r" in a path is the
     * rank; root-only and receiver-only options are ignored by the others */
    char wbuf[PATH_MAX], sbuf[PATH_MAX];
    if (cfg.weights && dc_node_subst_rank(wbuf, sizeof(wbuf), cfg.weights, cfg.rank) != 0)
        return dc_cli_usage_error("node", "--weights path too long");
    if (cfg.weights)
        cfg.weights = wbuf;
    if (cfg.state_dir && dc_node_subst_rank(sbuf, sizeof(sbuf), cfg.state_dir, cfg.rank) != 0)
        return dc_cli_usage_error("node", "--state path too long");
    if (cfg.state_dir)
        cfg.state_dir = sbuf;
    dc_topo_t *topo = NULL;
    int hold[2] = {-1, -1}; /* the rendezvous ports, held until the node ran */
    char what[PATH_MAX + 32];
    if (launched) {
        lo.wait_ms = cfg.wait_ms;
        lo.transport = cfg.transport;
        st = dc_node_launch_topo(&lo, &li, &rank, &topo, hold);
        snprintf(what, sizeof(what), "the topology of %s", lo.slurm ? "--slurm" : "--nodelist");
    } else if (topo_path && lo.rendezvous) {
        /* nodes with port 0 in the file bind a free one and publish it */
        lo.wait_ms = cfg.wait_ms;
        lo.transport = cfg.transport;
        st = dc_topo_load_flags(topo_path, DC_TOPO_LOAD_PORT0, &topo);
        if (st == DC_OK && cfg.rank >= dc_topo_node_count(topo))
            st = dc_error(DC_ERR_INVALID, "the topology %s has nodes 0..%u: no node %u",
                          topo_path, dc_topo_node_count(topo) - 1, cfg.rank);
        if (st == DC_OK)
            st = dc_node_launch_rendezvous(&lo, cfg.rank, topo, hold);
        snprintf(what, sizeof(what), "the topology %s", topo_path);
    } else if (topo_path) {
        st = dc_topo_load(topo_path, &topo);
        snprintf(what, sizeof(what), "the topology %s", topo_path);
    } else {
        unsigned r = 0, n = 0, port = 7300;
        int k = sscanf(local, "%u:%u:%u", &r, &n, &port);
        if (k < 2 || r == 0 || n == 0 || port == 0 || port > 65000)
            return dc_cli_usage_error("node", "--local wants R:N[:PORT], got '%s'", local);
        st = dc_topo_synthetic_local(r, n, (uint16_t)port, &topo);
        snprintf(what, sizeof(what), "--local %s", local);
    }
    if (st == DC_OK)
        st = dc_node_launch_check(&li, topo, what, cfg.rank);
    if (st != DC_OK) {
        dc_topo_free(topo);
        dc_node_launch_release(hold);
        return dc_cli_fail("node", st, "rank %u", cfg.rank);
    }
    /* the job secret, before anything waits on a peer */
    uint8_t secret[DC_AUTH_MAX_SECRET];
    size_t secret_len = 0;
    st = dc_auth_load_secret(NULL, 0, secret, sizeof(secret), &secret_len);
    memset(secret, 0, sizeof(secret));
    if (st != DC_OK) {
        dc_topo_free(topo);
        dc_node_launch_release(hold);
        return dc_cli_fail("node", st, "rank %u", cfg.rank);
    }
    char state[PATH_MAX];
    if (!cfg.state_dir) {
        snprintf(state, sizeof(state), "deltacast-state/node-%u", cfg.rank);
        cfg.state_dir = state; /* created with its parents by the engine */
    }
    /* the role comes from the topology: senders (node 0 is also the
     * coordinator) read --versions, receivers --weights */
    dc_topo_node_info_t ni;
    memset(&ni, 0, sizeof(ni));
    ni.size = sizeof(ni);
    int sender = dc_topo_node(topo, cfg.rank, &ni) == DC_OK && ni.role == DC_TOPO_ROLE_SENDER;
    if (sender)
        cfg.weights = NULL;
    else
        cfg.versions_dir = NULL;
    if (cfg.rank != 0)
        cfg.stats_path = NULL, cfg.progress = 0;
    if (sender && !cfg.versions_dir) {
        dc_topo_free(topo);
        return dc_cli_usage_error("node", "node %u is a sender: it needs --versions DIR",
                                  cfg.rank);
    }
    if (!sender && !cfg.weights) {
        dc_topo_free(topo);
        return dc_cli_usage_error("node", "a receiver needs --weights FILE");
    }
    cfg.topo = topo;
    if (from_memory && !sender) {
        dc_topo_free(topo);
        return dc_cli_usage_error("node", "--from-memory is for senders");
    }
    if (cfg.rank == 0) {
        cfg.on_version = dc_node_report_version;
        cfg.on_version_user = &report;
    }
    st = from_memory ? dc_node_from_memory(&cfg) : dc_node_run(&cfg);
    if (cfg.rank == 0) {
        char why[1024] = "";
        if (st != DC_OK)
            snprintf(why, sizeof(why), "%s", dc_last_error());
        dc_node_report_total(&report, st);
        if (st != DC_OK)
            dc_error(st, "%s", why);
    }
    dc_topo_free(topo);
    dc_node_launch_release(hold);
    if (st != DC_OK)
        return dc_cli_fail("node", st, "rank %u", cfg.rank);
    return DC_EXIT_OK;
}
