/* perf_soak.c - `deltacast perf soak`: a chaos soak of a multi-region refit
 * job on this machine.
 *
 * The job of `perf refit` (perf/refit_job.h: a trainer and receivers in
 * network namespaces joined by shaped veth pairs as root, else loopback)
 * runs N consecutive version attempts, each a realistic delta (an
 * optimizer-style step of the previous version, testkit/synth.h).  Each
 * attempt is one launch of the job (the coordinator with --count v resumes
 * from its commit record, the receivers from theirs), and while it runs
 * real faults are injected at random times:
 *
 *   kill     SIGKILL of the coordinator, a relay or a leaf receiver,
 *            restarted after a short delay as a launcher would; one kill in
 *            five of a receiver leaves it down past the coordinator's
 *            abort_ms (the version aborts, survivors must undo it)
 *   cut      the region's WAN veth set down then up (as root), or the
 *            coordinator's connection cut after N bytes written, mid-frame
 *            (DELTACAST_FAULT=drop_after=N)
 *   corrupt  a receiver flips bytes of the messages it receives
 *            (DELTACAST_FAULT=corrupt=P): NACK + re-send on that hop
 *   stall    SIGSTOP of a node for 0.2-4 s (longer than the transport's
 *            timeout: its peers see it dead), then SIGCONT
 *   restart  every process of the job SIGKILLed at once and the job
 *            relaunched, as a scheduler's requeue would
 *
 * A fault counts only when it was seen to happen: the process died of
 * SIGKILL (waitpid), the link was reported down, the node's log has the
 * fault's line (a CRC32C mismatch, a dropped connection), the process was
 * in state T.  After every attempt every receiver is byte-compared: a
 * committed version (the coordinator's commit record) must be exactly the
 * trainer's bits on every receiver; an aborted one must leave every
 * receiver that was not killed in it exactly at the baseline (a killed one
 * lost its undo records with its memory: it is made exact by the next
 * committed version, where it is compared).  A version past its timeout is
 * a hang.  Exit 1 on the first version that is not exact or hangs (the
 * work directory and its logs are kept).
 */
#include "perf/perf.h"
#include "perf/refit_job.h"
#include "testkit/cmdline.h"
#include "testkit/gen.h"
#include "testkit/harness.h"
#include "testkit/synth.h"
#include "util/dc_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { SK_KILL, SK_CUT, SK_CORRUPT, SK_STALL, SK_RESTART, SK_NKINDS };
static const char *const sk_kind_name[SK_NKINDS] = {"kill", "cut", "corrupt", "stall", "restart"};

#define SK_MAX_EVENTS 8

typedef struct sk_opts {
    uint32_t versions, receivers, regions, per_version;
    uint64_t params;
    double rate;
    double wan_bps;
    const char *wan_text;
    unsigned kinds; /* bit per SK_* */
    uint64_t seed;
    double timeout_s;
    uint64_t abort_ms, timeout_ms;
    int json, keep, netns_off;
    const char *workdir;
} sk_opts_t;

typedef struct sk_node {
    pid_t pid;         /* 0: not running */
    char fault[160];   /* DELTACAST_FAULT of its processes in this attempt */
    int killed;        /* SIGKILLed in this attempt: holds no undo records */
    double restart_at; /* > 0: the launcher starts it again then */
    double cont_at;    /* > 0: SIGCONT then */
    int relay;         /* has children in the plan */
    off_t log_off;     /* size of its log when the attempt began */
} sk_node_t;

typedef struct sk_event {
    int kind, target, region, variant, done, fired;
    double at, dur;
    char detail[160];
} sk_event_t;

typedef struct sk {
    sk_opts_t o;
    rb_ctx_t rb;
    sk_node_t node[RB_MAX_NODES];
    uint64_t rng;
    uint64_t committed;
    double window_s;    /* when the faults of an attempt fall: [0, window) */
    uint64_t est_bytes; /* the coordinator's payload of the last version */
    double link_up_at[200];
    uint64_t fired[SK_NKINDS], tried[SK_NKINDS];
    double t0;                                /* this attempt's start (dc_now_s) */
    int test_hang, test_flip, test_flip_rank; /* DELTACAST_SOAK_TEST (tests only) */
    int root_reaped; /* sk_kill found the coordinator had exited on its own */
    int root_ws;     /* and its wait status */
    int attempt;     /* the attempt running */
    pid_t parent;    /* the soak's pid (a node's parent) */
} sk_t;

static uint64_t sk_rand(sk_t *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double sk_uniform(sk_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(sk_rand(s) >> 11) / 9007199254740992.0;
}

static void sk_say(const sk_t *s, const char *fmt, ...) DC_PRINTF(2, 3);
static void sk_say(const sk_t *s, const char *fmt, ...)
{
    (void)s;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

static const char *sk_role(const sk_t *s, int rank)
{
    return rank == 0 ? "coordinator" : s->node[rank].relay ? "relay" : "receiver";
}

/* --- the job's processes ------------------------------------------------------------- */

/* The environment of the job's processes (in the child, before the exec). */
static int sk_child_env(void *arg, int rank)
{
    const sk_t *s = arg;
    /* dies with the soak (exec keeps it) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != s->parent)
        return -1;
    char t[32];
    setenv("DELTACAST_TRANSPORT", "tcp", 1);
    snprintf(t, sizeof(t), "%llu", (unsigned long long)s->o.timeout_ms);
    setenv("DELTACAST_TIMEOUT_MS", t, 1);
    if (!getenv("DELTACAST_CHUNK_SIZE"))
        setenv("DELTACAST_CHUNK_SIZE", "64KiB", 1);
    if (!getenv("DELTACAST_THREADS"))
        setenv("DELTACAST_THREADS", "1", 1);
    setenv("DELTACAST_LOG", "info", 1);
    if (s->node[rank].fault[0])
        setenv("DELTACAST_FAULT", s->node[rank].fault, 1);
    else
        unsetenv("DELTACAST_FAULT");
    return 0;
}

/* Start node `rank` for version `upto` of attempt `attempt`. */
static pid_t sk_spawn(sk_t *s, int rank, uint64_t upto, int attempt)
{
    rb_ctx_t *c = &s->rb;
    s->parent = getpid();
    pid_t pid;
    if (rank == 0)
        pid = rb_spawn(c, 0, sk_child_env, s,
                       "--versions '%s/ver' --count %llu --state '%s/state/0' "
                       "--stats '%s/stats-%d.json' --wait-ms %llu --abort-ms %llu "
                       ">>'%s/log0' 2>&1",
                       c->dir, (unsigned long long)upto, c->dir, c->dir, attempt,
                       (unsigned long long)(2 * s->o.abort_ms), (unsigned long long)s->o.abort_ms,
                       c->dir);
    else
        pid = rb_spawn_receiver(c, rank, sk_child_env, s);
    s->node[rank].pid = pid > 0 ? pid : 0;
    return pid;
}

/* rb_launch's spawn: the attempt's nodes. */
static pid_t sk_launch_node(void *arg, int rank)
{
    sk_t *s = arg;
    return sk_spawn(s, rank, s->committed + 1, s->attempt);
}

/* SIGKILL node `rank` and reap it: 1 when it died of that signal (it had
 * not exited on its own first); *status gets the wait status. */
static int sk_kill(sk_t *s, int rank, int *status)
{
    pid_t pid = s->node[rank].pid;
    *status = 0;
    if (pid <= 0)
        return 0;
    kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    s->node[rank].pid = 0;
    s->node[rank].cont_at = 0;
    *status = st;
    int killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    if (rank == 0 && !killed) {
        s->root_reaped = 1;
        s->root_ws = st;
    }
    return killed;
}

/* Process state letter from /proc/PID/stat ('?' when gone). */
static char sk_proc_state(pid_t pid)
{
    char p[64], buf[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *r = strrchr(buf, ')');
    return r && r[1] == ' ' && r[2] ? r[2] : '?';
}

static off_t sk_log_size(const sk_t *s, int rank)
{
    char p[PATH_MAX];
    struct stat st;
    rb_path(p, sizeof(p), &s->rb, "log%d", rank);
    return stat(p, &st) == 0 ? st.st_size : 0;
}

/* Lines of node `rank`'s log written in this attempt that contain `needle`. */
static int sk_log_count(const sk_t *s, int rank, const char *needle)
{
    char p[PATH_MAX], line[4096];
    rb_path(p, sizeof(p), &s->rb, "log%d", rank);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    int n = 0;
    if (fseeko(f, s->node[rank].log_off, SEEK_SET) == 0)
        while (fgets(line, sizeof(line), f))
            n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* The last line of node `rank`'s log in this attempt containing `needle`. */
static void sk_log_last(const sk_t *s, int rank, const char *needle, char *out, size_t len)
{
    char p[PATH_MAX], line[4096];
    out[0] = 0;
    rb_path(p, sizeof(p), &s->rb, "log%d", rank);
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    if (fseeko(f, s->node[rank].log_off, SEEK_SET) == 0)
        while (fgets(line, sizeof(line), f))
            if (strstr(line, needle)) {
                size_t n = strcspn(line, "\n");
                n = n < len - 1 ? n : len - 1;
                memcpy(out, line, n);
                out[n] = 0;
            }
    fclose(f);
}

/* --- byte checks ------------------------------------------------------------------------ */

/* Version v's file (v >= 2: the optimizer step of v-1); the file two
 * versions back is no longer needed (the coordinator diffs v-1 -> v). */
static dc_status_t sk_make_version(sk_t *s, uint64_t v)
{
    char a[PATH_MAX], b[PATH_MAX];
    rb_path(b, sizeof(b), &s->rb, "ver/v%llu.safetensors", (unsigned long long)v);
    if (access(b, R_OK) == 0)
        return DC_OK;
    rb_path(a, sizeof(a), &s->rb, "ver/v%llu.safetensors", (unsigned long long)(v - 1));
    uint64_t ch = 0;
    dc_status_t st = dc_synth_next(a, b, s->o.rate, 0, s->o.seed * 1000003u + v, &ch);
    if (st == DC_OK && v >= 3) {
        rb_path(a, sizeof(a), &s->rb, "ver/v%llu.safetensors", (unsigned long long)(v - 3));
        unlink(a);
    }
    return st;
}

/* Which receivers relay (have children) in the plan of the topology. */
static void sk_mark_relays(sk_t *s)
{
    char p[PATH_MAX];
    rb_path(p, sizeof(p), &s->rb, "topo.yaml");
    dc_topo_t *t = NULL;
    dc_tree_t *tr = NULL;
    if (dc_topo_load(p, &t) == DC_OK && dc_tree_plan(t, NULL, &tr) == DC_OK) {
        for (int i = 1; i < s->rb.nnodes; i++) {
            dc_tree_node_view_t nv = {.size = sizeof(nv)};
            s->node[i].relay = dc_tree_node(tr, (uint32_t)i, &nv) == DC_OK && nv.n_children > 0;
        }
    }
    dc_tree_free(tr);
    dc_topo_free(t);
}

/* --- faults ------------------------------------------------------------------------------ */

static int sk_nkinds(unsigned kinds, int *list)
{
    int n = 0;
    for (int k = 0; k < SK_NKINDS; k++)
        if (kinds & (1u << k))
            list[n++] = k;
    return n;
}

/* The plan of one attempt: per_version faults, the first of the kind whose
 * turn it is (every kind comes round), the others at random. */
static int sk_plan(sk_t *s, int attempt, sk_event_t *ev)
{
    int list[SK_NKINDS];
    int nk = sk_nkinds(s->o.kinds, list);
    if (!nk)
        return 0;
    int n = (int)DC_MIN(s->o.per_version, SK_MAX_EVENTS);
    int nrecv = s->rb.nnodes - 1;
    for (int e = 0; e < n; e++) {
        sk_event_t *x = &ev[e];
        memset(x, 0, sizeof(*x));
        x->kind = e == 0 ? list[attempt % nk] : list[sk_rand(s) % (uint64_t)nk];
        /* early in the attempt (joins, frames, commit), rarely after its end */
        x->at = sk_uniform(s, 0.02, 0.9) * s->window_s;
        switch (x->kind) {
        case SK_KILL:
            x->target = sk_rand(s) % 4 == 0 ? 0 : 1 + (int)(sk_rand(s) % (uint64_t)nrecv);
            x->variant = x->target != 0 && sk_rand(s) % 5 == 0; /* lost past abort_ms */
            x->dur = sk_uniform(s, 0.05, 1.5);                  /* until the restart */
            break;
        case SK_CUT:
            x->variant = s->rb.netns && sk_rand(s) % 2 == 0; /* 1: veth down */
            x->region = (int)(sk_rand(s) % s->o.regions);
            x->dur = sk_uniform(s, 0.3, 3.0);
            /* drop: after N bytes the coordinator writes (mid-frame) */
            x->target = 0;
            break;
        case SK_CORRUPT:
            x->target = 1 + (int)(sk_rand(s) % (uint64_t)nrecv);
            x->dur = sk_uniform(s, 0.05, 0.2); /* probability per message */
            x->at = 0;                         /* from its start */
            break;
        case SK_STALL:
            x->target = (int)(sk_rand(s) % (uint64_t)(nrecv + 1));
            x->dur = sk_uniform(s, 0.2, 4.0);
            break;
        case SK_RESTART:
            x->dur = sk_uniform(s, 0.2, 1.0);
            break;
        }
        if (x->kind == SK_CUT && !x->variant) {
            uint64_t hi = DC_MAX(s->est_bytes / 2, 4096);
            uint64_t nb = 512 + sk_rand(s) % hi;
            x->at = 0;
            snprintf(x->detail, sizeof(x->detail), "coordinator's connection cut after %llu bytes",
                     (unsigned long long)nb);
            size_t l = strlen(s->node[0].fault);
            snprintf(s->node[0].fault + l, sizeof(s->node[0].fault) - l,
                     "%sdrop_after=%llu,drop_count=1", l ? "," : "", (unsigned long long)nb);
        }
        if (x->kind == SK_CORRUPT) {
            size_t l = strlen(s->node[x->target].fault);
            snprintf(s->node[x->target].fault + l, sizeof(s->node[x->target].fault) - l,
                     "%scorrupt=%.3f,seed=%llu", l ? "," : "", x->dur,
                     (unsigned long long)(sk_rand(s) % 1000000 + 1));
            snprintf(x->detail, sizeof(x->detail),
                     "node %d (%s) corrupts %.1f%% of received "
                     "messages",
                     x->target, sk_role(s, x->target), x->dur * 100);
        }
    }
    return n;
}

static void sk_link(sk_t *s, int region, int up)
{
    rb_sh("ip -n %st link set %st%d %s", s->rb.ns_prefix, s->rb.ns_prefix, region,
          up ? "up" : "down");
}

/* Fire event x now (t seconds into the attempt).  Faults set at the start
 * (drop_after, corrupt) are checked in the logs at the end instead. */
static void sk_fire(sk_t *s, sk_event_t *x, double t)
{
    x->done = 1;
    int st;
    switch (x->kind) {
    case SK_KILL: {
        sk_node_t *nd = &s->node[x->target];
        x->fired = sk_kill(s, x->target, &st);
        if (x->fired) {
            nd->killed = 1;
            nd->restart_at = x->variant ? 0 : t + x->dur;
        }
        snprintf(x->detail, sizeof(x->detail), "SIGKILL node %d (%s) at %.2f s, %s", x->target,
                 sk_role(s, x->target), t,
                 !x->fired    ? "not running"
                 : x->variant ? "down past abort_ms (lost)"
                              : "restarted");
        break;
    }
    case SK_CUT: {
        char dev[64];
        snprintf(dev, sizeof(dev), "%st%d", s->rb.ns_prefix, x->region);
        sk_link(s, x->region, 0);
        x->fired =
            rb_sh("ip -n %st link show %s | grep -q 'state DOWN'", s->rb.ns_prefix, dev) == 0;
        s->link_up_at[x->region] = DC_MAX(s->link_up_at[x->region], t + x->dur);
        snprintf(x->detail, sizeof(x->detail), "WAN veth of region r%d down at %.2f s for %.2f s",
                 x->region, t, x->dur);
        break;
    }
    case SK_STALL: {
        sk_node_t *nd = &s->node[x->target];
        if (nd->pid > 0 && kill(nd->pid, SIGSTOP) == 0) {
            for (int w = 0; w < 50 && !x->fired; w++) {
                x->fired = sk_proc_state(nd->pid) == 'T';
                if (!x->fired)
                    usleep(2000);
            }
            nd->cont_at = t + x->dur;
        }
        snprintf(x->detail, sizeof(x->detail), "SIGSTOP node %d (%s) at %.2f s for %.2f s%s",
                 x->target, sk_role(s, x->target), t, x->dur, x->fired ? "" : " (not running)");
        break;
    }
    case SK_RESTART: {
        int killed = 0;
        for (int i = 0; i < s->rb.nnodes; i++) {
            int was_due = s->node[i].restart_at > 0;
            s->node[i].restart_at = 0;
            if (sk_kill(s, i, &st)) {
                killed++;
                s->node[i].killed = 1;
            } else if (!was_due) {
                continue;
            }
            /* the launcher starts the coordinator first, the rest after it
             * (and those a kill had left waiting for their restart) */
            s->node[i].restart_at = t + x->dur + (i ? 0.1 : 0);
        }
        x->fired = killed > 0;
        snprintf(x->detail, sizeof(x->detail),
                 "whole job SIGKILLed at %.2f s (%d processes), "
                 "relaunched after %.2f s",
                 t, killed, x->dur);
        break;
    }
    default:
        break;
    }
}

/* --- one attempt --------------------------------------------------------------------- */

typedef struct sk_result {
    int committed, exact, hang, aborted;
    int root_exit;
    int checked;
    uint64_t repair_bytes, repairs, payload_bytes;
    double seconds;
    char reason[512];
    char unchecked[256];
    int lingering;
    char crashed[256]; /* nodes that died of a signal not sent by the soak, or
                        * left a sanitizer report: a failure */
} sk_result_t;

/* The coordinator's stats of version v in this attempt's stats file. */
static void sk_stats(sk_t *s, int attempt, uint64_t v, sk_result_t *r)
{
    char p[PATH_MAX];
    rb_path(p, sizeof(p), &s->rb, "stats-%d.json", attempt);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(j, "versions"), i, x)
    {
        if ((uint64_t)json_integer_value(json_object_get(x, "version")) != v)
            continue;
        r->repair_bytes = (uint64_t)json_number_value(json_object_get(x, "repair_bytes"));
        r->repairs = (uint64_t)json_number_value(json_object_get(x, "repairs"));
        r->payload_bytes = (uint64_t)json_number_value(json_object_get(x, "payload_bytes"));
    }
    json_decref(j);
}

static int sk_any_running(const sk_t *s)
{
    for (int i = 0; i < s->rb.nnodes; i++)
        if (s->node[i].pid > 0)
            return 1;
    return 0;
}

static void sk_end_faults(sk_t *s)
{
    for (int i = 0; i < s->rb.nnodes; i++) {
        if (s->node[i].pid > 0 && s->node[i].cont_at > 0)
            kill(s->node[i].pid, SIGCONT);
        s->node[i].cont_at = 0;
        s->node[i].restart_at = 0;
    }
    for (uint32_t r = 0; s->rb.netns && r < s->o.regions && r < 200; r++)
        if (s->link_up_at[r] > 0) {
            sk_link(s, (int)r, 1);
            s->link_up_at[r] = 0;
        }
}

static dc_status_t sk_attempt(sk_t *s, int attempt, sk_event_t *ev, int *nev, sk_result_t *r)
{
    memset(r, 0, sizeof(*r));
    uint64_t v = s->committed + 1;
    dc_status_t st = sk_make_version(s, v);
    if (st != DC_OK)
        return st;
    for (int i = 0; i < s->rb.nnodes; i++) {
        sk_node_t *nd = &s->node[i];
        nd->fault[0] = 0;
        nd->killed = 0;
        nd->restart_at = nd->cont_at = 0;
        nd->log_off = sk_log_size(s, i);
    }
    s->root_reaped = 0;
    *nev = attempt == 1 && s->o.versions > 1 ? 0 : sk_plan(s, attempt, ev);
    s->t0 = dc_now_s();
    s->attempt = attempt;
    if ((st = rb_launch(&s->rb, sk_launch_node, s, NULL)) != DC_OK)
        return st;
    if (s->test_hang == attempt)
        kill(s->node[0].pid, SIGSTOP); /* never continued: a hang */
    int root_done = 0;
    double root_done_t = 0;
    for (;;) {
        double t = dc_now_s() - s->t0;
        if (s->root_reaped && !root_done) {
            s->root_reaped = 0;
            root_done = 1;
            root_done_t = t;
            r->root_exit =
                WIFEXITED(s->root_ws) ? WEXITSTATUS(s->root_ws) : 128 + WTERMSIG(s->root_ws);
        }
        for (int i = 0; i < s->rb.nnodes; i++) {
            sk_node_t *nd = &s->node[i];
            int ws;
            if (nd->pid > 0 && waitpid(nd->pid, &ws, WNOHANG) == nd->pid) {
                nd->pid = 0;
                nd->cont_at = 0;
                if (WIFSIGNALED(ws)) { /* the soak's own kills are reaped in sk_kill */
                    size_t l = strlen(r->crashed);
                    snprintf(r->crashed + l, sizeof(r->crashed) - l, "%snode %d died of signal %d",
                             l ? "; " : "", i, WTERMSIG(ws));
                }
                if (i == 0 && !root_done) {
                    root_done = 1;
                    root_done_t = t;
                    r->root_exit = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
                }
            }
        }
        if (root_done) {
            /* the coordinator is done: the others leave on its BYE; pending
             * restarts are moot, stopped ones continue */
            sk_end_faults(s);
            if (!sk_any_running(s))
                break;
            if (t - root_done_t > 10) {
                int ws;
                for (int i = 1; i < s->rb.nnodes; i++)
                    if (s->node[i].pid > 0) {
                        r->lingering++;
                        sk_kill(s, i, &ws);
                    }
                break;
            }
            usleep(10000);
            continue;
        }
        if (t > s->o.timeout_s) {
            int ws;
            r->hang = 1;
            sk_end_faults(s);
            for (int i = 0; i < s->rb.nnodes; i++)
                sk_kill(s, i, &ws);
            r->seconds = t;
            snprintf(r->reason, sizeof(r->reason), "version %llu did not end within %.0f s",
                     (unsigned long long)v, s->o.timeout_s);
            return DC_OK;
        }
        for (int e = 0; e < *nev; e++)
            if (!ev[e].done && ev[e].at > 0 && t >= ev[e].at &&
                (ev[e].kind == SK_KILL || ev[e].kind == SK_STALL || ev[e].kind == SK_RESTART ||
                 (ev[e].kind == SK_CUT && ev[e].variant)))
                sk_fire(s, &ev[e], t);
        for (int i = 0; i < s->rb.nnodes; i++) {
            sk_node_t *nd = &s->node[i];
            if (nd->restart_at > 0 && t >= nd->restart_at && nd->pid == 0) {
                nd->restart_at = 0;
                sk_spawn(s, i, v, attempt);
            }
            if (nd->cont_at > 0 && t >= nd->cont_at) {
                nd->cont_at = 0;
                if (nd->pid > 0)
                    kill(nd->pid, SIGCONT);
            }
        }
        for (uint32_t g = 0; s->rb.netns && g < s->o.regions && g < 200; g++)
            if (s->link_up_at[g] > 0 && t >= s->link_up_at[g]) {
                s->link_up_at[g] = 0;
                sk_link(s, (int)g, 1);
                rb_sh("for i in $(seq 200); do ip -n %st link show %st%u | grep -q 'state UP' "
                      "&& break; sleep 0.01; done",
                      s->rb.ns_prefix, s->rb.ns_prefix, g);
            }
        usleep(10000);
    }
    r->seconds = root_done_t;
    /* faults set at the start: seen in the logs */
    for (int e = 0; e < *nev; e++) {
        sk_event_t *x = &ev[e];
        if (x->kind == SK_CUT && !x->variant) {
            x->done = 1;
            x->fired = sk_log_count(s, 0, "fault injection: dropping the connection") > 0;
        } else if (x->kind == SK_CORRUPT) {
            x->done = 1;
            x->fired = sk_log_count(s, x->target, "CRC32C mismatch on message") > 0;
        }
    }
    /* a sanitizer build's reports go to the nodes' logs */
    for (int i = 0; i < s->rb.nnodes; i++)
        if (sk_log_count(s, i, "AddressSanitizer") || sk_log_count(s, i, "runtime error:") ||
            sk_log_count(s, i, "LeakSanitizer")) {
            size_t l = strlen(r->crashed);
            snprintf(r->crashed + l, sizeof(r->crashed) - l, "%ssanitizer report in log%d",
                     l ? "; " : "", i);
        }
    /* the outcome: the coordinator's commit record */
    char sd[PATH_MAX];
    rb_path(sd, sizeof(sd), &s->rb, "state/0");
    uint64_t cv = 0, cb = 0;
    uint8_t dg[16];
    st = dc_refit_committed(sd, &cv, &cb, dg);
    if (st == DC_ERR_NOT_FOUND)
        cv = 0;
    else if (st != DC_OK)
        return st;
    sk_stats(s, attempt, v, r);
    if (s->test_flip == attempt) {
        char w[PATH_MAX];
        rb_path(w, sizeof(w), &s->rb, "w%d.st", s->test_flip_rank);
        int fd = open(w, O_RDWR);
        uint8_t b = 0;
        if (fd >= 0 && pread(fd, &b, 1, 4096) == 1) {
            b ^= 0x10;
            if (pwrite(fd, &b, 1, 4096) != 1)
                DC_LOG_WARN("%s: test flip failed", w);
        }
        if (fd >= 0)
            close(fd);
    }
    if (cv == v) {
        r->committed = 1;
        r->exact = 1;
        for (int i = 1; i < s->rb.nnodes; i++) {
            r->checked++;
            if (!rb_receiver_is(&s->rb, i, v)) {
                r->exact = 0;
                size_t l = strlen(r->reason);
                snprintf(r->reason + l, sizeof(r->reason) - l, "%sreceiver %d (%s) is not v%llu",
                         l ? "; " : "", i, sk_role(s, i), (unsigned long long)v);
            }
        }
        s->committed = v;
    } else if (cv == v - 1) {
        r->aborted = 1;
        r->exact = 1;
        sk_log_last(s, 0, "error", r->reason, sizeof(r->reason));
        for (int i = 1; i < s->rb.nnodes; i++) {
            if (s->node[i].killed) {
                size_t l = strlen(r->unchecked);
                snprintf(r->unchecked + l, sizeof(r->unchecked) - l, "%s%d", l ? "," : "", i);
                continue;
            }
            r->checked++;
            if (!rb_receiver_is(&s->rb, i, v - 1)) {
                r->exact = 0;
                size_t l = strlen(r->reason);
                snprintf(r->reason + l, sizeof(r->reason) - l,
                         "%sreceiver %d (%s) is not back at the baseline v%llu", l ? "; " : "", i,
                         sk_role(s, i), (unsigned long long)(v - 1));
            }
        }
    } else {
        r->exact = 0;
        snprintf(r->reason, sizeof(r->reason),
                 "the coordinator's commit record says version "
                 "%llu after an attempt at %llu",
                 (unsigned long long)cv, (unsigned long long)v);
    }
    return DC_OK;
}

/* --- command ------------------------------------------------------------------------- */

static void sk_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast perf soak [--versions N]\n"
            "         [--faults kill,cut,corrupt,stall,restart] [--seed S]\n"
            "         [--timeout-per-version SEC] [--json] [options]\n"
            "\n"
            "A chaos soak: the refit job of 'perf refit' (a trainer and receivers in regions:\n"
            "network namespaces joined by veth pairs shaped to the WAN rate as root, else\n"
            "loopback, unshaped, and it says so) runs N consecutive versions, each an\n"
            "optimizer-style step of the last, while real faults are injected at random\n"
            "times.  Each version is one launch of the job (nodes resume from their commit\n"
            "records and journals).  Faults (each counted only when seen to happen):\n"
            "  kill     SIGKILL of the coordinator, a relay or a receiver, restarted after\n"
            "           0.05-1.5 s as a launcher would (1 receiver kill in 5: left down past\n"
            "           the coordinator's abort time, so the version aborts)\n"
            "  cut      a region's WAN veth down for 0.3-3 s (as root), or the coordinator's\n"
            "           connection cut mid-frame after N bytes (DELTACAST_FAULT=drop_after)\n"
            "  corrupt  a receiver flips bytes of 5-20%% of the messages it receives\n"
            "  stall    SIGSTOP of a node for 0.2-4 s, then SIGCONT\n"
            "  restart  every process SIGKILLed at once, the job relaunched\n"
            "After every version every receiver is byte-compared: a committed version must\n"
            "be the trainer's bits on every receiver, an aborted one must leave every\n"
            "receiver not killed in it at the baseline (a killed one is compared at the\n"
            "next committed version).  Exit 1 when a version is not exact or runs past\n"
            "its timeout (the work directory is kept).\n"
            "\n"
            "Options:\n"
            "  --versions N             version attempts (default 20)\n"
            "  --faults LIST            fault kinds (default all: kill,cut,corrupt,stall,\n"
            "                           restart); 'none' for a clean run\n"
            "  --faults-per-version K   faults injected per version (default 2; the first\n"
            "                           version runs clean to time the job)\n"
            "  --seed S                 seed of the model and the fault plan (default 1)\n"
            "  --timeout-per-version S  a version running longer is a hang (default 120)\n"
            "  --receivers N            receivers (default 5)\n"
            "  --regions R              receiver regions (default 3)\n"
            "  --params P               model parameters, BF16 (default 4e6)\n"
            "  --change-rate C          fraction of values changing per version (0.05)\n"
            "  --wan-rate RATE          WAN rate per region link (default 4mbit)\n"
            "  --abort-ms T             the coordinator aborts a version after a receiver\n"
            "                           is lost this long, and waits twice as long for\n"
            "                           every node to join (default 6000)\n"
            "  --timeout-ms T           the transport's timeout (DELTACAST_TIMEOUT_MS,\n"
            "                           default 2000: a stall beyond it looks dead)\n"
            "  --no-netns               loopback even as root\n"
            "  --workdir DIR            keep the job's files in DIR\n"
            "  --keep                   do not delete the work directory\n"
            "  --json                   JSON on stdout (progress stays on stderr)\n"
            "  -h, --help               show this help\n");
}

static int sk_parse_kinds(const char *arg, unsigned *out)
{
    *out = 0;
    if (strcmp(arg, "none") == 0)
        return 1;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", arg);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k;
        for (k = 0; k < SK_NKINDS && strcmp(tok, sk_kind_name[k]) != 0; k++) {
        }
        if (k == SK_NKINDS)
            return 0;
        *out |= 1u << k;
    }
    return *out != 0;
}

static int sk_parse(int argc, char **argv, sk_opts_t *o)
{
    enum {
        O_VERS = 1,
        O_FAULTS,
        O_PER,
        O_SEED,
        O_TIMEOUT,
        O_RECV,
        O_REG,
        O_PARAMS,
        O_RATE,
        O_WAN,
        O_ABORT,
        O_TMO,
        O_NONETNS,
        O_WORK,
        O_KEEP,
        O_JSON
    };
    static const struct option opts[] = {
        {"versions", required_argument, NULL, O_VERS},
        {"faults", required_argument, NULL, O_FAULTS},
        {"faults-per-version", required_argument, NULL, O_PER},
        {"seed", required_argument, NULL, O_SEED},
        {"timeout-per-version", required_argument, NULL, O_TIMEOUT},
        {"receivers", required_argument, NULL, O_RECV},
        {"regions", required_argument, NULL, O_REG},
        {"params", required_argument, NULL, O_PARAMS},
        {"change-rate", required_argument, NULL, O_RATE},
        {"wan-rate", required_argument, NULL, O_WAN},
        {"abort-ms", required_argument, NULL, O_ABORT},
        {"timeout-ms", required_argument, NULL, O_TMO},
        {"no-netns", no_argument, NULL, O_NONETNS},
        {"workdir", required_argument, NULL, O_WORK},
        {"keep", no_argument, NULL, O_KEEP},
        {"json", no_argument, NULL, O_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "perf soak";
    uint64_t u;
    double d;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'h':
            sk_help(stdout);
            return -1;
        case O_VERS:
            if (!dc_cli_parse_u64(cmd, "--versions", optarg, &u))
                return DC_EXIT_USAGE;
            if (u == 0 || u > 100000)
                return dc_cli_usage_error(cmd, "--versions must be 1..100000");
            o->versions = (uint32_t)u;
            break;
        case O_FAULTS:
            if (!sk_parse_kinds(optarg, &o->kinds))
                return dc_cli_usage_error(cmd,
                                          "--faults: '%s' is not a list of kill, cut, "
                                          "corrupt, stall, restart (or 'none')",
                                          optarg);
            break;
        case O_PER:
            if (!dc_cli_parse_u64(cmd, "--faults-per-version", optarg, &u))
                return DC_EXIT_USAGE;
            if (u == 0 || u > SK_MAX_EVENTS)
                return dc_cli_usage_error(cmd, "--faults-per-version must be 1..%d", SK_MAX_EVENTS);
            o->per_version = (uint32_t)u;
            break;
        case O_SEED:
            if (!dc_cli_parse_u64(cmd, "--seed", optarg, &o->seed))
                return DC_EXIT_USAGE;
            break;
        case O_TIMEOUT:
            if (!dc_cli_parse_double(cmd, "--timeout-per-version", optarg, &o->timeout_s))
                return DC_EXIT_USAGE;
            if (!(o->timeout_s >= 5 && o->timeout_s <= 86400))
                return dc_cli_usage_error(cmd, "--timeout-per-version must be 5..86400 s");
            break;
        case O_RECV:
            if (!dc_cli_parse_u64(cmd, "--receivers", optarg, &u))
                return DC_EXIT_USAGE;
            o->receivers = (uint32_t)u;
            break;
        case O_REG:
            if (!dc_cli_parse_u64(cmd, "--regions", optarg, &u))
                return DC_EXIT_USAGE;
            o->regions = (uint32_t)u;
            break;
        case O_PARAMS:
            if (!dc_cli_parse_double(cmd, "--params", optarg, &d))
                return DC_EXIT_USAGE;
            o->params = (uint64_t)d;
            break;
        case O_RATE:
            if (!dc_cli_parse_double(cmd, "--change-rate", optarg, &o->rate))
                return DC_EXIT_USAGE;
            break;
        case O_WAN:
            if (dc_parse_rate(optarg, &o->wan_bps) != DC_OK || o->wan_bps < 1e6)
                return dc_cli_usage_error(cmd, "--wan-rate: '%s' is not a rate >= 1mbit", optarg);
            o->wan_text = optarg;
            break;
        case O_ABORT:
            if (!dc_cli_parse_u64(cmd, "--abort-ms", optarg, &o->abort_ms))
                return DC_EXIT_USAGE;
            break;
        case O_TMO:
            if (!dc_cli_parse_u64(cmd, "--timeout-ms", optarg, &o->timeout_ms))
                return DC_EXIT_USAGE;
            break;
        case O_NONETNS:
            o->netns_off = 1;
            break;
        case O_WORK:
            o->workdir = optarg;
            break;
        case O_KEEP:
            o->keep = 1;
            break;
        case O_JSON:
            o->json = 1;
            break;
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (o->regions == 0 || o->receivers < o->regions || o->regions > 200)
        return dc_cli_usage_error(cmd, "need 1 <= --regions <= --receivers, at most 200 regions");
    if (o->receivers > RB_MAX_NODES - 2)
        return dc_cli_usage_error(cmd, "at most %d receivers", RB_MAX_NODES - 2);
    if (!(o->rate > 0 && o->rate < 0.9))
        return dc_cli_usage_error(cmd, "--change-rate must be in (0, 0.9)");
    if (o->params < DC_GEN_MIN_PARAMS)
        return dc_cli_usage_error(cmd, "--params must be at least %u", DC_GEN_MIN_PARAMS);
    if (o->abort_ms < 1000 || o->timeout_ms < 100)
        return dc_cli_usage_error(cmd, "--abort-ms must be >= 1000 and --timeout-ms >= 100");
    if (o->timeout_s * 1000 < (double)o->abort_ms * 2)
        return dc_cli_usage_error(cmd, "--timeout-per-version must be at least twice --abort-ms");
    return 0;
}

static json_t *sk_kinds_json(const uint64_t *n, unsigned kinds)
{
    json_t *o = json_object();
    for (int k = 0; k < SK_NKINDS; k++)
        if (kinds & (1u << k))
            json_object_set_new(o, sk_kind_name[k], json_integer((json_int_t)n[k]));
    return o;
}

int dc_cmd_perf_soak(int argc, char **argv)
{
    static sk_t soak; /* large: RB_MAX_NODES nodes */
    sk_t *s = &soak;
    memset(s, 0, sizeof(*s));
    const char *cmd = "perf soak";
    s->o.versions = 20;
    s->o.kinds = (1u << SK_NKINDS) - 1;
    s->o.per_version = 2;
    s->o.seed = 1;
    s->o.timeout_s = 120;
    s->o.receivers = 5;
    s->o.regions = 3;
    s->o.params = 4000000;
    s->o.rate = 0.05;
    s->o.wan_bps = 4e6;
    s->o.wan_text = "4mbit";
    s->o.abort_ms = 6000;
    s->o.timeout_ms = 2000;
    int rc = sk_parse(argc, argv, &s->o);
    if (rc == -1)
        return DC_EXIT_OK;
    if (rc != 0)
        return rc;
    s->rng = s->o.seed * 0x2545f4914f6cdd1dull + 1;
    /* test hooks: "hang:A" stops the coordinator of attempt A for good,
     * "flip:A:R" flips a byte of receiver R after attempt A, before the check */
    const char *th = getenv("DELTACAST_SOAK_TEST");
    if (th && sscanf(th, "hang:%d", &s->test_hang) != 1 &&
        sscanf(th, "flip:%d:%d", &s->test_flip, &s->test_flip_rank) != 2)
        return dc_cli_usage_error(cmd, "DELTACAST_SOAK_TEST: '%s' is not hang:A or flip:A:R", th);

    rb_ctx_t *c = &s->rb;
    c->o.receivers = s->o.receivers;
    c->o.regions = s->o.regions;
    c->o.senders = 1;
    c->o.versions = 2; /* the soak keeps three version files at a time */
    c->o.params = s->o.params;
    c->o.rate = s->o.rate;
    c->o.wan_bps = s->o.wan_bps;
    c->o.wan_text = s->o.wan_text;
    c->o.netns_off = s->o.netns_off;
    c->o.seed = s->o.seed;
    c->o.workdir = s->o.workdir;
    dc_status_t st = rb_job_open(c, "soak", 1);
    if (st != DC_OK)
        return dc_cli_fail(cmd, st, NULL);
    if ((st = rb_job_start(c)) != DC_OK)
        goto fail;
    sk_mark_relays(s);
    sk_say(s,
           "perf soak: %u versions, %u receivers in %u regions, %.3g params BF16, optimizer "
           "steps of %.2g%%; %s\n",
           s->o.versions, s->o.receivers, s->o.regions, (double)s->o.params, s->o.rate * 100,
           c->netns ? "network namespaces + tc tbf" : "loopback");
    rb_say_network(c, "; WAN cuts are connection cuts only");
    {
        char fl[128] = "";
        for (int k = 0; k < SK_NKINDS; k++)
            if (s->o.kinds & (1u << k)) {
                size_t l = strlen(fl);
                snprintf(fl + l, sizeof(fl) - l, "%s%s", l ? "," : "", sk_kind_name[k]);
            }
        sk_say(s, "  faults: %s, %u per version; timeout per version %.0f s; files %s\n",
               fl[0] ? fl : "none", s->o.per_version, s->o.timeout_s, c->dir);
    }
    rb_sh("mkdir -p '%s/state'", c->dir);
    {
        dc_gen_result_t gr;
        memset(&gr, 0, sizeof(gr));
        if ((st = rb_gen_first(c, 0, &gr)) != DC_OK || (st = rb_receivers_at_v0(c)) != DC_OK)
            goto fail;
    }

    json_t *recs = json_array();
    uint32_t exact_versions = 0, aborted = 0, failed = 0;
    uint64_t repair_bytes = 0, repairs = 0;
    double t_start = dc_now_s(), max_s = 0;
    s->window_s = 2.0;
    int clean = 0;
    s->est_bytes = 65536;
    for (uint32_t a = 1; a <= s->o.versions; a++) {
        sk_event_t ev[SK_MAX_EVENTS];
        int nev = 0;
        sk_result_t r;
        uint64_t v = s->committed + 1;
        if ((st = sk_attempt(s, (int)a, ev, &nev, &r)) != DC_OK) {
            json_decref(recs);
            goto fail;
        }
        /* the next attempts' faults fall within one clean version's time
         * (the first attempt's, then the mean of those where no fault
         * fired: a fault's recovery time must not spread them past the
         * end of the next versions) */
        int any_fired = 0;
        for (int e = 0; e < nev; e++)
            any_fired |= ev[e].fired;
        if (!r.hang && r.committed && !any_fired) {
            s->window_s = clean ? (s->window_s * clean + r.seconds) / (clean + 1) : r.seconds;
            s->window_s = DC_MAX(0.3, s->window_s);
            clean = DC_MIN(clean + 1, 20);
        }
        if (r.payload_bytes)
            s->est_bytes = r.payload_bytes;
        json_t *fj = json_array();
        char line[1024];
        int ll = 0;
        for (int e = 0; e < nev; e++) {
            s->tried[ev[e].kind]++;
            s->fired[ev[e].kind] += ev[e].fired != 0;
            json_t *x = json_object();
            json_object_set_new(x, "kind", json_string(sk_kind_name[ev[e].kind]));
            json_object_set_new(x, "fired", json_boolean(ev[e].fired));
            json_object_set_new(x, "what", json_string(ev[e].detail));
            json_array_append_new(fj, x);
            ll += snprintf(line + ll, sizeof(line) - (size_t)ll, "%s%s%s", e ? ", " : "",
                           sk_kind_name[ev[e].kind], ev[e].fired ? "" : " (did not fire)");
            if (ll >= (int)sizeof(line))
                ll = (int)sizeof(line) - 1;
        }
        const char *outcome = r.hang        ? "hang"
                              : r.committed ? "committed"
                              : r.aborted   ? "aborted"
                                            : "failed";
        int ok = !r.hang && r.exact && (r.committed || r.aborted) && !r.crashed[0];
        exact_versions += ok && r.committed;
        aborted += ok && r.aborted;
        failed += !ok;
        repair_bytes += r.repair_bytes;
        repairs += r.repairs;
        max_s = DC_MAX(max_s, r.seconds);
        json_t *rec = json_object();
        json_object_set_new(rec, "attempt", json_integer(a));
        json_object_set_new(rec, "version", json_integer((json_int_t)v));
        json_object_set_new(rec, "outcome", json_string(outcome));
        json_object_set_new(rec, "exact", json_boolean(ok));
        json_object_set_new(rec, "seconds", json_real(r.seconds));
        json_object_set_new(rec, "coordinator_exit", json_integer(r.root_exit));
        json_object_set_new(rec, "receivers_checked", json_integer(r.checked));
        if (r.unchecked[0])
            json_object_set_new(rec, "killed_not_checked", json_string(r.unchecked));
        json_object_set_new(rec, "repair_bytes", json_integer((json_int_t)r.repair_bytes));
        json_object_set_new(rec, "payload_bytes", json_integer((json_int_t)r.payload_bytes));
        if (r.crashed[0])
            json_object_set_new(rec, "crashed", json_string(r.crashed));
        if (r.lingering)
            json_object_set_new(rec, "lingering_nodes_killed", json_integer(r.lingering));
        if (r.reason[0])
            json_object_set_new(rec, "reason", json_string(r.reason));
        json_object_set_new(rec, "faults", fj);
        json_array_append_new(recs, rec);
        const char *verdict = ok ? " exact" : r.hang ? "" : r.crashed[0] ? " CRASH" : " NOT EXACT";
        sk_say(s, "  [%u/%u] v%llu %s%s %.2f s, %d receivers checked; faults: %s%s%s%s%s\n", a,
               s->o.versions, (unsigned long long)v, outcome, verdict, r.seconds, r.checked,
               nev ? line : "none", r.reason[0] ? "; " : "", r.reason, r.crashed[0] ? "; " : "",
               r.crashed);
        if (!ok) {
            sk_say(s, "  stopping: logs and files kept in %s\n", c->dir);
            s->o.keep = 1;
            break;
        }
    }
    double secs = dc_now_s() - t_start;
    uint32_t ran = (uint32_t)json_array_size(recs);

    json_t *out = json_object();
    json_object_set_new(out, "versions", json_integer(ran));
    json_object_set_new(out, "versions_requested", json_integer(s->o.versions));
    json_object_set_new(out, "exact_versions", json_integer(exact_versions));
    json_object_set_new(out, "aborted_versions", json_integer(aborted));
    json_object_set_new(out, "failed_versions", json_integer(failed));
    json_object_set_new(out, "committed_version", json_integer((json_int_t)s->committed));
    json_object_set_new(out, "faults", sk_kinds_json(s->fired, s->o.kinds));
    json_object_set_new(out, "faults_tried", sk_kinds_json(s->tried, s->o.kinds));
    json_object_set_new(out, "repair_bytes", json_integer((json_int_t)repair_bytes));
    json_object_set_new(out, "repairs", json_integer((json_int_t)repairs));
    json_object_set_new(out, "seconds", json_real(secs));
    json_object_set_new(out, "max_version_seconds", json_real(max_s));
    json_object_set_new(out, "timeout_per_version_seconds", json_real(s->o.timeout_s));
    json_object_set_new(out, "abort_ms", json_integer((json_int_t)s->o.abort_ms));
    json_object_set_new(out, "timeout_ms", json_integer((json_int_t)s->o.timeout_ms));
    json_object_set_new(out, "receivers", json_integer(s->o.receivers));
    json_object_set_new(out, "regions", json_integer(s->o.regions));
    json_object_set_new(out, "params", json_integer((json_int_t)s->o.params));
    json_object_set_new(out, "change_rate", json_real(s->o.rate));
    json_object_set_new(out, "seed", json_integer((json_int_t)s->o.seed));
    json_object_set_new(out, "network", json_string(c->netns ? "netns+tbf" : "loopback-unshaped"));
    json_object_set_new(out, "wan_rate_bps", c->netns ? json_real(s->o.wan_bps) : json_null());
    json_object_set_new(out, "workdir",
                        s->o.keep || s->o.workdir ? json_string(c->dir) : json_null());
    json_object_set_new(out, "per_version", recs);
    if (s->o.json) {
        dc_perf_json_print(out);
    } else {
        char fb[256] = "";
        for (int k = 0; k < SK_NKINDS; k++)
            if (s->o.kinds & (1u << k)) {
                size_t l = strlen(fb);
                snprintf(fb + l, sizeof(fb) - l, "%s%s %llu/%llu", l ? ", " : "", sk_kind_name[k],
                         (unsigned long long)s->fired[k], (unsigned long long)s->tried[k]);
            }
        printf("versions %u: %u committed exact, %u aborted (survivors back at the baseline), "
               "%u failed\n",
               ran, exact_versions, aborted, failed);
        printf("faults fired/tried: %s\n", fb[0] ? fb : "none");
        printf("repairs %llu (%llu bytes); %.1f s in all, slowest version %.2f s (timeout %.0f s); "
               "%s\n",
               (unsigned long long)repairs, (unsigned long long)repair_bytes, secs, max_s,
               s->o.timeout_s, c->netns ? "netns + tbf" : "loopback, unshaped");
    }
    json_decref(out);
    rb_job_close(c, s->o.keep || s->o.workdir);
    if (failed) {
        fprintf(stderr, "deltacast %s: error: %u of %u versions not exact or hung (logs in %s)\n",
                cmd, failed, ran, c->dir);
        return DC_EXIT_FAIL;
    }
    return DC_EXIT_OK;

fail:
    for (int i = 0; i < c->nnodes; i++) {
        int ws;
        sk_kill(s, i, &ws);
    }
    rb_net_teardown(c);
    return dc_cli_fail(cmd, st, "work directory %s", c->dir);
}
