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

/* Parse "30ms", "5us", "0.1s", "2e-3" (seconds). */
dc_status_t dc_parse_duration(const char *s, double *out);

#endif /* DC_TOPO_H */
