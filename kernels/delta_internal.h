/*
 * delta_internal.h - what delta.c (grid, digests, reader, diff) and
 * delta_apply.c (apply) share: the codec context pool, the options and
 * stats of a call under the header's size rule, tensor matching.  Private
 * to kernels/; delta.h is the folder's interface.
 */
#ifndef DC_KERNELS_DELTA_INTERNAL_H
#define DC_KERNELS_DELTA_INTERNAL_H

#include "kernels/codec.h"
#include "kernels/delta.h"
#include "kernels/safetensors.h"

#include <pthread.h>

/** Codec contexts reused across tasks (one per concurrently running task). */
typedef struct {
    pthread_mutex_t mu;
    dc_codec_t *items[1024];
    size_t n;
    size_t max_bytes;
} dc_pool_t;

void dc_delta_pool_init(dc_pool_t *p, size_t max_bytes);
/** A context from the pool, or a new one for chunks of max_bytes. */
dc_status_t dc_delta_pool_get(dc_pool_t *p, dc_codec_t **out);
/** Back to the pool (freed when the pool is full; NULL is fine). */
void dc_delta_pool_put(dc_pool_t *p, dc_codec_t *c);
void dc_delta_pool_destroy(dc_pool_t *p);

/** The size rule of include/deltacast.h for a call's options and stats:
 *  `opts` (may be NULL) copied into `o`, the fields an older caller lacks
 *  zeroed; a newer caller's unknown non-zero fields refused. */
dc_status_t dc_delta_args(const dc_delta_opts_t *opts, dc_delta_opts_t *o,
                          const dc_delta_stats_t *stats);
/** opts->strict_base, and opts->threads or one per CPU (`o` through
 *  dc_delta_args()). */
int dc_delta_opts_strict(const dc_delta_opts_t *o);
unsigned dc_delta_opts_threads(const dc_delta_opts_t *o);
/** Copy a call's figures to the caller's stats (NULL: none), as far as
 *  its size reaches. */
void dc_delta_stats_out(dc_delta_stats_t *out, const dc_delta_stats_t *s);

/** Per target tensor, the base tensor of the same name, dtype and element
 *  count (SIZE_MAX: none), and per base tensor whether one matched; both
 *  arrays malloc'd. */
dc_status_t dc_delta_match(const dc_st_file_t *base, const dc_st_file_t *tgt, size_t **bidx,
                           uint8_t **used);

/** "dir/.name.tmp.XXXXXX" beside path, for mkstemp (malloc'd; NULL: out of
 *  memory). */
char *dc_delta_tmp_beside(const char *path);

#endif /* DC_KERNELS_DELTA_INTERNAL_H */
