/*
 * ucx.h - the `ucx` transport (verbs/ucx*.c, compiled when DC_HAVE_UCX).
 *
 * The ops table is reached through the registry (transport.h:
 * dc_verbs_find("ucx")).  This header adds what the generic interface has no
 * slot for: which UCX transports a connection actually runs over, so that
 * `deltacast perf link` can say which path was chosen.
 *
 * Tuning (the configuration table, util/config.c, read when a connection is
 * made; see the wire notes at the top of ucx.c, and docs/ucx-notes.md for
 * the measurements behind the defaults): ucx_piece
 * (DELTACAST_UCX_PIECE), the piece size a message is sent in, each piece
 * with its own CRC32C (64KiB..1GiB, default 512KiB); ucx_ahead
 * (DELTACAST_UCX_AHEAD), how many bytes of pieces a connection posts to UCP
 * ahead of the transfer (default 1MiB, 0: no limit); ucx_spin_us
 * (DELTACAST_UCX_SPIN_US), how long a blocking wait polls before it sleeps
 * (default 200, 0: never); ucx_err_mode (DELTACAST_UCX_ERR_MODE: peer /
 * none).
 *
 * Network devices: unless UCX_NET_DEVICES is set, a listener uses only the
 * interface of its bind address and a client only the interface that
 * routes to its server (each with every RDMA device), one UCP context per
 * such device list: UCX 1.13 otherwise moved an accepted connection's lanes
 * to an interface the client could not reach on multi-homed hosts (see
 * ucx.c).  TCP multi-rail across interfaces then needs UCX_NET_DEVICES set
 * to the interfaces wanted, on both sides.
 */
#ifndef DC_VERBS_UCX_H
#define DC_VERBS_UCX_H

#include "verbs/transport.h"

#if DC_HAVE_UCX
extern const dc_verbs_ops_t dc_ucx_ops;

/** Strong reference used by transport.c so that ucx.o is linked out of the
 *  static archive (the registry's weak reference alone would not pull it). */
const dc_verbs_ops_t *dc_ucx_ops_get(void);

/**
 * The UCX transports/devices an established ucx connection uses, from
 * ucp_ep_print_info(), e.g. "tcp/lo,posix/memory,cma/memory" (deduplicated,
 * in lane order).  Writes a NUL-terminated string into buf[len].
 * DC_ERR_INVALID if `c` is not a ucx connection, DC_ERR_AGAIN while it is
 * still connecting.
 */
dc_status_t dc_ucx_conn_transports(dc_verbs_conn_t *c, char *buf, size_t len);

/**
 * UCX choosing TCP although RDMA is there is the silent slow path users of
 * UCX-based systems most often report.  When no lane of an established
 * connection is an RDMA transport (rc_*, ud_*, dc_*, srd) nor a node-local
 * one (shared memory, self) while this process's UCX context has RDMA
 * resources, the connection says so: a warning when it is made, and the
 * sentence in its stats' path_note (transport.h).
 *
 * The pure parts of that, for tests.  dc_ucx_rdma_resources(): the
 * RDMA resources ("tl/dev", comma-separated) in the text of
 * ucp_context_print_info().  dc_ucx_rdma_unused(): the sentence for a
 * connection over `lanes` ("tl/dev,...") when RDMA resources `local_rdma`
 * exist and no lane uses them or is node-local, in buf[len]; else NULL.
 * dc_ucx_rdma_devices(): the devices of such resources, each once
 * ("mlx5_0:1,mlx5_1:1"), as many as fit out[len]: what a connection's
 * context adds to its interface. */
dc_status_t dc_ucx_rdma_resources(const char *info, char *out, size_t len);
void dc_ucx_rdma_devices(const char *res, char *out, size_t len);
const char *dc_ucx_rdma_unused(const char *lanes, const char *local_rdma, char *buf, size_t len);

/** For `deltacast info`: this UCX's version (always) and the transports
 *  its context found ("tl/dev" comma separated, as `ucx_info -d` lists
 *  them); an error saying why when UCX cannot run here. */
dc_status_t dc_ucx_describe(char *version, size_t vlen, char *res, size_t rlen);
#endif

#endif /* DC_VERBS_UCX_H */
