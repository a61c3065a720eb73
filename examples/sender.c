/*
 * sender.c - a trainer that refits its weights to rollout receivers, through
 * the public C API only.
 *
 *   sender TOPOLOGY VERSIONS STATE_DIR [OUT]
 *
 * TOPOLOGY: local:N:PORT (this process and N receivers on 127.0.0.1) or a
 * topology file; this process is node 0, the trainer.  Start one
 * `receiver TOPOLOGY RANK ...` per other node, before or after this.  The
 * sender opens on version 0 of the toy model (example.h), then takes
 * VERSIONS optimizer steps: each updates the weights in place, and push()
 * returns once every receiver applied, verified and committed the new
 * version.  OUT (optional) receives the final weights.
 *
 * Needs the job secret, as every deltacast node: DELTACAST_SECRET_FILE (or
 * DELTACAST_SECRET).  Exit status 0 when every version committed.
 */
#include "example.h"

#include <deltacast.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr,
                "usage: %s TOPOLOGY VERSIONS STATE_DIR [OUT]\n"
                "  TOPOLOGY: local:N:PORT or a topology file\n",
                argv[0]);
        return 2;
    }
    char *end;
    unsigned long versions = strtoul(argv[2], &end, 10);
    if (end == argv[2] || *end) {
        fprintf(stderr, "sender: VERSIONS '%s' is not a number\n", argv[2]);
        return 2;
    }
    const char *state_dir = argv[3], *out = argc > 4 ? argv[4] : NULL;
    printf("sender: libdeltacast %s (header %d.%d.%d)\n", dc_version_string(), DC_VERSION_MAJOR,
           DC_VERSION_MINOR, DC_VERSION_PATCH);

    int rc = 1;
    toy_model_t m;
    dc_topo_t *topo = NULL;
    dc_refit_sender_t *s = NULL;
    if (toy_model_init(&m) != 0) {
        fprintf(stderr, "sender: out of memory\n");
        return 1;
    }
    if (example_topology(argv[1], &topo) != 0)
        goto free_model;
    dc_refit_node_opts_t opts = {0};
    opts.size = sizeof(opts);
    opts.topo = topo;
    opts.rank = 0;
    opts.state_dir = state_dir;
    opts.tensors = m.tensors;
    opts.n_tensors = TOY_TENSORS;
    opts.segments = m.segments; /* version 0: what the receivers hold */
    opts.n_segments = TOY_TENSORS;
    opts.wait_ms = 60000; /* receivers have 60 s to join */
    dc_status_t st = dc_refit_sender_open(&opts, &s);
    if (st != DC_OK) {
        fprintf(stderr, "sender: open: %s: %s\n", dc_status_name(st), dc_last_error());
        goto free_topo;
    }
    for (unsigned long v = 1; v <= versions; v++) {
        toy_model_step(&m, v); /* the trainer updates its buffers in place */
        dc_refit_version_stats_t vs = {.size = sizeof(vs)};
        st = dc_refit_sender_push(s, NULL, 0, &vs); /* NULL: the buffers given to open */
        if (st != DC_OK) {
            fprintf(stderr, "sender: version %lu: %s: %s\n", v, dc_status_name(st),
                    dc_last_error());
            goto close_sender;
        }
        printf("sender: version %llu committed: %llu payload bytes for %llu (%.1fx), %.3f s\n",
               (unsigned long long)vs.version, (unsigned long long)vs.payload_bytes,
               (unsigned long long)vs.dense_bytes,
               vs.payload_bytes ? (double)vs.dense_bytes / (double)vs.payload_bytes : 0.0,
               vs.seconds);
    }
    rc = 0;
close_sender:
    st = dc_refit_sender_close(s); /* BYE: the receivers' dc_refit_node_run() returns */
    if (st != DC_OK) {
        fprintf(stderr, "sender: close: %s: %s\n", dc_status_name(st), dc_last_error());
        rc = 1;
    }
    if (rc == 0 && out && toy_model_save(&m, out) != 0)
        rc = 1;
free_topo:
    dc_topo_free(topo);
free_model:
    toy_model_free(&m);
    return rc;
}
