/*
 * topo.h - the topology model shared by topology/ and tree/ (internal).
 *
 * Plain arrays indexed by region/node number; all strings owned by the
 * dc_topo_t (freed by dc_topo_free()).
 */
#ifndef DC_TOPO_H
#define DC_TOPO_H

#include "util/dc_util.h"

#include <stdbool.h>
#include <stdint.h>

#define DC_TOPO_DEFAULT_LAN_BPS 400e9
#define DC_TOPO_DEFAULT_WAN_BPS 5e9
#define DC_TOPO_DEFAULT_LAN_LAT 5e-6
#define DC_TOPO_DEFAULT_WAN_LAT 30e-3

typedef struct dc_topo_region {
    char *name;
    double lan_bps;   /* default per-node LAN rate of its nodes */
    double wan_bps;   /* default per-node WAN share of its nodes */
    double lan_lat_s; /* one-way latency inside the region */
    uint32_t line;    /* line in the topology file (0: none) */
} dc_topo_region_t;

typedef struct dc_topo_rlink {
    uint32_t a, b;    /* region indices, a < b */
    double bps;       /* aggregate capacity each way (0: unlimited) */
    double lat_s;     /* one-way latency */
} dc_topo_rlink_t;

typedef struct dc_topo_node {
    char *name;
    char *addr;
    char *cluster;
    uint32_t region;
    uint32_t role;    /* dc_topo_role_t */
    double lan_bps;   /* effective */
    double wan_bps;   /* effective */
    uint64_t shards;  /* owned (sender) or needed (receiver) */
    char **nics;
    uint32_t n_nics;
    char **gpus;
    uint32_t n_gpus;
    uint32_t line;
} dc_topo_node_t;

struct dc_topo {
    dc_topo_region_t *regions;
    uint32_t n_regions, cap_regions;
    dc_topo_node_t *nodes;
    uint32_t n_nodes, cap_nodes;
    dc_topo_rlink_t *rlinks;
    uint32_t n_rlinks, cap_rlinks;
    uint32_t n_shards;
    double wan_lat_s;  /* default one-way latency between regions */
    char *source;      /* file name or "synthetic" */
    int port0_ok;      /* addresses with port 0 pass (a rendezvous fills them:
                          dc_topo_fill_port0) */
};

/* Building (topo.c).  All return DC_ERR_NOMEM on allocation failure. */
dc_topo_t *dc_topo_new(const char *source);
dc_status_t dc_topo_add_region(dc_topo_t *t, const char *name, double lan_bps,
                               double wan_bps, uint32_t *idx);
dc_status_t dc_topo_add_node(dc_topo_t *t, const char *name, const char *addr,
                             uint32_t region, uint32_t role, uint32_t *idx);
dc_status_t dc_topo_set_rlink(dc_topo_t *t, uint32_t a, uint32_t b, double bps, double lat_s);
int dc_topo_region_find(const dc_topo_t *t, const char *name);
/* Region-pair link (NULL when none declared). */
const dc_topo_rlink_t *dc_topo_rlink(const dc_topo_t *t, uint32_t a, uint32_t b);
double dc_topo_wan_latency(const dc_topo_t *t, uint32_t a, uint32_t b);

/* Check invariants and fill defaults (shard ownership, rates): every file
 * or generator ends with this.  Errors name the source and line. */
dc_status_t dc_topo_finish(dc_topo_t *t);

char *dc_topo_strdup(const char *s);

/* A topology file whose nodes may have port 0 in their address ("HOST:0":
 * each binds a free port, published with --rendezvous): dc_topo_load
 * with DC_TOPO_LOAD_PORT0 lets them pass; dc_topo_fill_port0 then sets
 * the address of every such node to addrs[i] (its rendezvous entry, one
 * per node) and checks the addresses again (fixed ports, no two alike). */
enum { DC_TOPO_LOAD_PORT0 = 1 };
dc_status_t dc_topo_load_flags(const char *path, uint32_t flags, dc_topo_t **out);
/* 1 when node i's address is HOST:0. */
int dc_topo_node_port0(const dc_topo_t *t, uint32_t i);
dc_status_t dc_topo_fill_port0(dc_topo_t *t, char *const *addrs);

/* Where each task of a launched job runs (slurm.c): the expanded host list,
 * and per task (rank) its host's index, its rank among the tasks on that
 * host (local rank: the port offset) and how many tasks share that host. */
typedef struct dc_launch_place {
    char **hosts;
    size_t n_hosts;
    uint32_t n_tasks;
    uint32_t *host_of, *local_of, *on_host;
} dc_launch_place_t;

/* Place `tasks` tasks (0: one per host list entry) on a Slurm host list:
 * by `tasks_per_node` ("2(x3),1", SLURM_TASKS_PER_NODE) when given, else
 * in blocks (Slurm's default: the first tasks % hosts hosts get one more).
 * A host named twice ("a,a,b") counts as one host.  Errors name the
 * numbers that disagree. */
dc_status_t dc_launch_place(const char *nodelist, const char *tasks_per_node, uint32_t tasks,
                            dc_launch_place_t *out);
void dc_launch_place_free(dc_launch_place_t *p);

/* The topology of a placed job: node r is task r, named HOST (HOST#L when
 * tasks share the host), address HOST:base_port+L, or addrs[r] when addrs
 * is given (a rendezvous' map); region from `region_map` (see
 * dc_topo_region_for_host); the first n_senders tasks are senders. */
dc_status_t dc_topo_from_place(const dc_launch_place_t *p, const char *region_map,
                               uint32_t n_senders, uint16_t base_port, char *const *addrs,
                               dc_topo_t **out);

/* Rendezvous in a shared directory (rendezvous.c): each rank publishes
 * the HOST:PORT it listens on as DIR/rank-R; every rank then waits (up to
 * timeout_ms) for all n, and gets them in rank order (freed with
 * dc_rendezvous_free).  A timeout names the ranks that never published.
 * The key (the launcher's job id: SLURM_JOB_ID.SLURM_STEP_ID,
 * OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE, else
 * "-") tells this job's files from an earlier job's. */
const char *dc_rendezvous_key(char *buf, size_t cap);
dc_status_t dc_rendezvous_publish(const char *dir, const char *key, uint32_t rank,
                                  const char *addr);
dc_status_t dc_rendezvous_wait(const char *dir, const char *key, uint32_t n, uint32_t timeout_ms,
                               char ***addrs);
void dc_rendezvous_free(char **addrs, uint32_t n);
/* One rank's file, n bytes of data (hostile: any bytes), named `path` in
 * errors: 1 and *addr (malloc'd) when it is "deltacast-rendezvous 1 KEY
 * HOST:PORT\n" with this key, fewer than 512 bytes, a port 1..65535 and
 * host characters; 0 and *stale when it is another job's key; -1 and
 * dc_error (DC_ERR_FORMAT naming path) otherwise.  Fuzzed by
 * tests/fuzz/fuzz_rendezvous.c. */
int dc_rendezvous_parse(const char *data, size_t n, const char *path, const char *key,
                        char **addr, bool *stale);

/* Parse "30ms", "5us", "0.1s", "2e-3" (seconds). */
dc_status_t dc_parse_duration(const char *s, double *out);

#endif /* DC_TOPO_H */
