/*
 * rdma.h - the `rdma` transport (verbs/rdma.c, compiled when DC_HAVE_VERBS).
 *
 * Reached through the registry (transport.h: dc_verbs_find("rdma")).  On a
 * machine without an RDMA device, init() fails with DC_ERR_UNSUPPORTED and
 * a detail line saying why, so that "auto" selection can report it.
 */
#ifndef DC_VERBS_RDMA_H
#define DC_VERBS_RDMA_H

#include "verbs/transport.h"

#if DC_HAVE_VERBS
extern const dc_verbs_ops_t dc_rdma_ops;

/** Strong reference used by transport.c so that rdma.o is linked out of the
 *  static archive. */
const dc_verbs_ops_t *dc_rdma_ops_get(void);

/** For `deltacast info`: one line per RDMA device port ("mlx5_0:1: PORT_ACTIVE,
 *  Ethernet (RoCE), 100 Gb/s, mtu 4096; GID[0] fe80::..., ...") in `out`;
 *  DC_ERR_UNSUPPORTED saying why when there is no RDMA device. */
dc_status_t dc_rdma_describe(char *out, size_t len);
#endif

#endif /* DC_VERBS_RDMA_H */
