/* api_internal.h - what the public refit API's files share (api.c: the
 * node and the sender handle, recv_api.c: the receiver handle). */
#ifndef DC_ENGINE_API_INTERNAL_H
#define DC_ENGINE_API_INTERNAL_H

#include "deltacast.h"
#include "engine/layout.h"
#include "engine/node.h"

/* The public tensor list as the layout's descriptors (names borrowed). */
dc_status_t dc_api_tensors(const dc_refit_tensor_t *t, size_t n, dc_layout_desc_t **out);
/* Public segments as placement segments (tensor names resolved). */
dc_status_t dc_api_segments(const dc_layout_desc_t *d, size_t nt, const dc_refit_segment_t *g,
                            size_t n, dc_place_seg_t **out);
/* The caller's config as this library's (the size rule), checked; `who`
 * starts its error messages. */
dc_status_t dc_api_check_cfg(const dc_refit_node_opts_t *in, dc_refit_node_opts_t *cfg,
                             const char *who);
/* The engine's node config of a checked public one (pointers borrowed). */
void dc_api_node_cfg(const dc_refit_node_opts_t *cfg, dc_node_cfg_t *n);

#endif /* DC_ENGINE_API_INTERNAL_H */
