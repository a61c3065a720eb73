/* node_launch.h - `deltacast node`'s topology from the launcher: the host
 * list (--slurm, --nodelist), ports (--port, 0 with --rendezvous), and
 * the world-size and rank checks against the topology. */
#ifndef DC_NODE_LAUNCH_H
#define DC_NODE_LAUNCH_H

#include "deltacast.h"

typedef struct dc_node_launch {
    int slurm;              /* --slurm: SLURM_STEP_NODELIST / SLURM_JOB_NODELIST */
    const char *nodelist;   /* --nodelist LIST */
    const char *region_map; /* --region-map MAP (NULL: one region) */
    uint32_t senders;       /* --senders N (0: 1) */
    int64_t port;           /* --port P (-1: 7300; 0: ephemeral, needs rendezvous) */
    const char *rendezvous; /* --rendezvous DIR */
    uint32_t world;         /* --world-size N (0: the launcher's, else the list's) */
    uint32_t wait_ms;       /* rendezvous timeout (0: 60 s) */
    const char *transport;  /* --transport (NULL: config transport) */
} dc_node_launch_t;

/* Build the topology of a launched job for `rank` (the launcher's when
 * *rank < 0; set on return).  `li`: the launcher's environment.  On
 * return with DC_OK, hold[] are sockets holding the rendezvous port (and
 * for ucx its region port, port + lan_port_offset), or -1; close them after
 * the node ran.  Errors name the numbers or ranks. */
dc_status_t dc_node_launch_topo(const dc_node_launch_t *o, const dc_launch_info_t *li,
                                int64_t *rank, dc_topo_t **out, int hold[2]);

/* Close the sockets dc_node_launch_topo() left in hold[]. */
/* --topology FILE --rendezvous DIR: node `rank` of topo (loaded with
 * DC_TOPO_LOAD_PORT0) publishes its address, with a free port bound (held
 * in hold[], as dc_node_launch_topo) when the file gives it port 0; every
 * node waits (o->wait_ms, 0: 60 s) for all, and each port-0 address of
 * topo becomes its node's published one (dc_topo_fill_port0). */
dc_status_t dc_node_launch_rendezvous(const dc_node_launch_t *o, uint32_t rank, dc_topo_t *topo,
                                      int hold[2]);

void dc_node_launch_release(int hold[2]);

/* The launcher's world size and the rank against a topology's nodes. */
dc_status_t dc_node_launch_check(const dc_launch_info_t *li, const dc_topo_t *topo,
                                 const char *what, uint32_t rank);

#endif /* DC_NODE_LAUNCH_H */
