/*
 * refit_job.h - a refit job on this machine, shared by `perf refit` (and
 * `deltacast demo`) and `perf soak`: the options and state of the job, its
 * work directory and secret, the regions as network namespaces joined by
 * shaped veth pairs (or loopback), the topology file and the job's paths,
 * the first versions and the receivers' copies, the launch of the nodes and
 * the byte comparison of a receiver with a version.
 */
#ifndef DC_PERF_REFIT_JOB_H
#define DC_PERF_REFIT_JOB_H

#include "testkit/cmdline.h"
#include "testkit/gen.h"

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#define RB_MAX_NODES 256

typedef struct rb_opts {
    uint32_t receivers, regions, versions;
    uint32_t senders;   /* trainer shards: senders 0..K-1 own one shard each */
    uint64_t params;
    double rate;
    int inject;
    double wan_bps;
    const char *wan_text;
    int json, keep, no_dense, netns_off, demo;
    int from_memory;    /* the root sends from memory through the library */
    uint64_t chunk_size;
    const char *workdir;
    const char *plot;
    const char *transport;
    uint64_t seed;
} rb_opts_t;

typedef struct rb_ctx {
    rb_opts_t o;
    char dir[PATH_MAX];
    char self[PATH_MAX];
    char ns_prefix[32];
    int netns;
    int nnodes;
    char secret[65];
    uint32_t region_of[RB_MAX_NODES];
} rb_ctx_t;

/** Run a shell command (formatted); its exit status, 128 if killed, -1. */
int rb_sh(const char *fmt, ...) DC_PRINTF(1, 2);
/** Progress on stderr (quiet with --json, except for the demo). */
void rb_say(const rb_ctx_t *c, const char *fmt, ...) DC_PRINTF(2, 3);
/** Where the job's files go by default: /dev/shm when it has room for
 *  versions 0..K and the receivers' copies, else $TMPDIR or /tmp. */
const char *rb_default_base(const rb_opts_t *o);
/** As root (and unless --no-netns): one network namespace per region and
 *  one for the trainer, each region's veth pair shaped to the WAN rate;
 *  names start with c->ns_prefix ("dcPID": PREFIXt, PREFIXrI, veth
 *  PREFIXtI in the trainer's namespace, PREFIXrI in region I's).  1 when
 *  built, 0 for loopback. */
int rb_net_setup(rb_ctx_t *c);
void rb_net_teardown(rb_ctx_t *c);
/** SIGINT / SIGTERM handler: tears rb_active's namespaces down, exits. */
extern rb_ctx_t *rb_active;
void rb_on_signal(int sig);
/** c->dir/<formatted>; -1 when too long. */
int rb_path(char *buf, size_t len, const rb_ctx_t *c, const char *fmt, ...) DC_PRINTF(4, 5);
/** c->dir/topo.yaml: the trainer (senders) in region "train", the
 *  receivers spread evenly over regions r0..; sets c->nnodes, c->region_of. */
dc_status_t rb_write_topo(rb_ctx_t *c);

/* --- the job: open, start, close ------------------------------------------------ */

/** c->self (this binary), c->dir (c->o.workdir, created, emptied first when
 *  `clear`; else a new DEFAULT_BASE/deltacast-NAME-XXXXXX) and c->secret
 *  (32 random bytes in hex).  DC_OK, or an error naming what failed. */
dc_status_t rb_job_open(rb_ctx_t *c, const char *name, int clear);
/** The network (rb_net_setup; rb_active = c and the SIGINT / SIGTERM
 *  handler that tears it down) and the topology file (rb_write_topo). */
dc_status_t rb_job_start(rb_ctx_t *c);
/** Progress line: the WAN each region's veth is shaped to, or a NOTE that
 *  the links are loopback and unshaped, `unshaped` appended (" (...)"). */
void rb_say_network(const rb_ctx_t *c, const char *unshaped);
/** The network torn down, rb_active cleared; c->dir deleted unless `keep`. */
void rb_job_close(rb_ctx_t *c, int keep);

/* --- versions and receivers ------------------------------------------------------ */

/** c->dir/ver/v0.safetensors and v1 (testkit/gen.h: c->o.params BF16
 *  values, c->o.rate, optimizer or --model inject, c->o.seed); a progress
 *  line on a terminal when `progress`.  *gr: what was written. */
dc_status_t rb_gen_first(rb_ctx_t *c, int progress, dc_gen_result_t *gr);
/** Every receiver's weights (c->dir/wRANK.st) a copy of v0. */
dc_status_t rb_receivers_at_v0(const rb_ctx_t *c);
/** 1 when receiver `rank`'s weights are the bytes of version v, else 0 (a
 *  file missing or unreadable is 0). */
int rb_receiver_is(const rb_ctx_t *c, int rank, uint64_t v);

/* --- the nodes ------------------------------------------------------------------- */

/** Called in a node's child process before the exec (the job's environment:
 *  transport, faults...); non-zero: the child exits 127 instead. */
typedef int (*rb_child_fn)(void *arg, int rank);
/** Start node `rank`: sh -c "exec [ip netns exec NS ]SELF node --topology
 *  DIR/topo.yaml --rank RANK ARGS", NS the trainer's namespace for a sender,
 *  its region's for a receiver; ARGS (formatted) the node's own options and
 *  redirections.  In the child DELTACAST_SECRET is the job's secret and
 *  child(arg, rank) ran (NULL: none).  Its pid, or -1. */
pid_t rb_spawn(const rb_ctx_t *c, int rank, rb_child_fn child, void *arg, const char *fmt, ...)
    DC_PRINTF(5, 6);
/** rb_spawn of a receiver: --weights DIR/wRANK.st --state DIR/state/RANK,
 *  its output appended to DIR/logRANK. */
pid_t rb_spawn_receiver(const rb_ctx_t *c, int rank, rb_child_fn child, void *arg);
/** Start every node as a launcher would: the coordinator (rank 0) first,
 *  the others 100 ms later; spawn(arg, rank) starts one and returns its pid
 *  (<= 0: it did not start).  pids (may be NULL) gets the pids of the
 *  c->nnodes nodes, 0 for those not started.  DC_OK, or an error naming
 *  the node that did not start; the nodes started are left running. */
dc_status_t rb_launch(const rb_ctx_t *c, pid_t (*spawn)(void *arg, int rank), void *arg,
                      pid_t *pids);

#endif /* DC_PERF_REFIT_JOB_H */
