/* tree_int.h - the relay tree's internals, shared by tree.c, print.c, sim.c. */
#ifndef DC_TREE_INT_H
#define DC_TREE_INT_H

#include "topology/topo.h"

struct dc_tree {
    const dc_topo_t *topo;
    dc_tree_opts_t opts;
    uint32_t n_nodes;
    uint8_t *dead;            /* n_nodes flags */
    dc_tree_stream_t *streams;
    uint32_t n_streams;
    uint32_t stream_base[DC_TOPO_MAX_SHARDS]; /* UINT32_MAX: shard unused */
    dc_tree_edge_t *edges;    /* grouped by stream, parents before children */
    uint32_t n_edges, cap_edges;
    /* node views (CSR) */
    uint32_t *par_off, *chi_off;   /* n_nodes + 1 */
    dc_tree_link_t *par_links, *chi_links;
    uint32_t *link_streams;        /* stream lists of all links */
};

/* Bytes one stream carries for a version of `payload` bytes. */
double dc_tree_stream_bytes(const dc_tree_t *t, uint32_t stream, uint64_t payload);

/** The tree options the engine plans with (and `deltacast plan` shows by
 *  default): chunk_bytes from config chunk_size, one stripe per shard
 *  (max_stripes 1), the default payload and degree.  The one place these
 *  defaults live: the engine (engine/attach.c, node.c) and the plan
 *  command (cli/cmd_plan.c) both start from here. */
void dc_tree_opts_engine(dc_tree_opts_t *o);

#endif
