/*
 * refit_job.h - a refit job on this machine, shared by `perf refit` (and
 * `deltacast demo`) and `perf soak`: the options and state of the job, the
 * regions as network namespaces joined by shaped veth pairs (or loopback),
 * the topology file and the job's paths.
 */
#ifndef DC_PERF_REFIT_JOB_H
#define DC_PERF_REFIT_JOB_H

#include "testkit/cmdline.h"

#include <limits.h>
#include <stdint.h>

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

#endif /* DC_PERF_REFIT_JOB_H */
