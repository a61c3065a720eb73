/*
 * receiver.c - a rollout node that holds the toy model (example.h) in its
 * own memory and lets deltacast refit it in place, through the public C
 * API only.
 *
 *   receiver TOPOLOGY RANK STATE_DIR [OUT]
 *
 * TOPOLOGY as given to `sender`; RANK is this node's index (1.. ; "auto":
 * the launcher's, from mpirun or srun).  %r in STATE_DIR and OUT is
 * replaced by the rank.  The node starts on version 0 (the checkpoint
 * every node loaded) and dc_refit_node_run() applies each version to the
 * buffer until the sender ends the job.  The receiver then checks its
 * weights against the toy model at the committed version
 * (dc_refit_committed) byte for byte and writes them to OUT (optional).
 * Exit status 0 when they match.
 */
#include "example.h"

#include <deltacast.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr,
                "usage: %s TOPOLOGY RANK STATE_DIR [OUT]\n"
                "  TOPOLOGY: local:N:PORT or a topology file; RANK: 1.. or auto\n",
                argv[0]);
        return 2;
    }
    uint32_t rank;
    char state_dir[4096], out[4096];
    if (example_rank(argv[2], &rank) != 0 ||
        example_path(argv[3], rank, state_dir, sizeof(state_dir)) != 0 ||
        example_path(argc > 4 ? argv[4] : "", rank, out, sizeof(out)) != 0)
        return 2;

    int rc = 1;
    toy_model_t m, want;
    dc_topo_t *topo = NULL;
    if (toy_model_init(&m) != 0)
        return 1;
    if (toy_model_init(&want) != 0)
        goto free_model;
    if (example_topology(argv[1], &topo) != 0)
        goto free_want;
    dc_refit_node_opts_t opts = {0};
    opts.size = sizeof(opts);
    opts.topo = topo;
    opts.rank = rank;
    opts.state_dir = state_dir;
    opts.tensors = m.tensors;
    opts.n_tensors = TOY_TENSORS;
    opts.segments = m.segments; /* written in place, version after version */
    opts.n_segments = TOY_TENSORS;
    opts.initial_version = 0;                  /* what the buffer holds when state_dir is new */
    dc_status_t st = dc_refit_node_run(&opts); /* blocks until the sender's BYE */
    if (st != DC_OK) {
        fprintf(stderr, "receiver %u: %s: %s\n", rank, dc_status_name(st), dc_last_error());
        goto free_topo;
    }
    uint64_t version = 0;
    st = dc_refit_committed(state_dir, &version, NULL, NULL);
    if (st != DC_OK) {
        fprintf(stderr, "receiver %u: commit record in %s: %s\n", rank, state_dir, dc_last_error());
        goto free_topo;
    }
    toy_model_at(&want, version);
    if (memcmp(m.buf, want.buf, m.bytes) != 0) {
        size_t i = 0;
        while (m.buf[i] == want.buf[i])
            i++;
        fprintf(stderr, "receiver %u: version %llu differs from the model at byte %zu\n", rank,
                (unsigned long long)version, i);
        goto free_topo;
    }
    printf("receiver %u: holds version %llu, byte-exact (%zu bytes)\n", rank,
           (unsigned long long)version, m.bytes);
    rc = out[0] && toy_model_save(&m, out) != 0 ? 1 : 0;
free_topo:
    dc_topo_free(topo);
free_want:
    toy_model_free(&want);
free_model:
    toy_model_free(&m);
    return rc;
}
