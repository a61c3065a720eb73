/* api_util.h - helpers for tests that run refit nodes in-process through the
 * C API (dc_refit_sender_open, dc_refit_receiver_open, dc_refit_node_run)
 * beside `deltacast node` processes of a refit_util.h job. */
#ifndef DC_TEST_API_UTIL_H
#define DC_TEST_API_UTIL_H

#include "refit_util.h"

#include "deltacast.h"

/* This process joins job j as its nodes do: the job's secret, a 1 s
 * timeout, tcp. */
static inline void job_api_env(const job_t *j)
{
    setenv("DELTACAST_SECRET", j->secret, 1);
    setenv("DELTACAST_TIMEOUT_MS", "1000", 1);
    setenv("DELTACAST_TRANSPORT", "tcp", 1);
}

/* Node options of rank `rank` of topo with state directory sd, the job's
 * tensors and 64 KiB chunks; the rest zero (segments, waits: the caller's). */
static inline void job_node_opts(dc_refit_node_opts_t *c, dc_topo_t *topo, uint32_t rank,
                                 const char *sd, const dc_refit_tensor_t *tens, size_t nt)
{
    memset(c, 0, sizeof(*c));
    c->size = sizeof(*c);
    c->topo = topo;
    c->rank = rank;
    c->state_dir = sd;
    c->tensors = tens;
    c->n_tensors = nt;
    c->chunk_size = 64 * 1024;
}

#endif
