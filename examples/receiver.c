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
 * every node loaded).  A receiver handle (dc_refit_receiver_open) runs the
 * node on a thread of the library; this program plays a rollout engine
 * that swaps weights only between generation batches: its weights are
 * held (dc_refit_receiver_hold: a version that arrives is staged, not
 * written under the generation), the callback holds them again the moment
 * a version is committed (so they stay exactly that version), and the
 * main loop, at each BEGIN (a batch boundary here), releases the staged
 * version.  Every committed version is checked against the toy model byte
 * for byte.  At the sender's BYE (ENDED) the weights go to OUT (optional).
 * Exit status 0 when every version matched.
 */
#include "example.h"

#include <deltacast.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* On the node's thread: hold at each commit (before the node takes any
 * frame of the next version), and queue every event for the main loop. */
static int hold_at_commit(const dc_refit_event_t *ev, void *user)
{
    if (ev->type == DC_REFIT_EVENT_COMMITTED)
        dc_refit_receiver_hold(user);
    return 1;
}

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
    opts.initial_version = 0; /* what the buffer holds when state_dir is new */
    dc_refit_receiver_t *r = NULL;
    dc_status_t st = dc_refit_receiver_open(&opts, &r); /* the node runs on its own thread */
    if (st != DC_OK) {
        fprintf(stderr, "receiver %u: %s: %s\n", rank, dc_status_name(st), dc_last_error());
        goto free_topo;
    }
    dc_refit_receiver_hold(r); /* generating on version 0 */
    dc_refit_receiver_on_event(r, hold_at_commit, r);
    int bad = 0, ended = 0;
    uint64_t version = 0;
    while (!ended) {
        dc_refit_event_t ev = {.size = sizeof(ev)};
        st = dc_refit_receiver_wait(r, 120000, &ev);
        if (st != DC_OK) {
            fprintf(stderr, "receiver %u: %s\n", rank, dc_last_error());
            bad = 1;
            break;
        }
        switch (ev.type) {
        case DC_REFIT_EVENT_BEGIN:
            /* a batch boundary: swap in the staged version */
            printf("receiver %u: %s\n", rank, ev.message);
            dc_refit_receiver_release(r);
            break;
        case DC_REFIT_EVENT_COMMITTED:
            version = ev.version;
            toy_model_at(&want, version);
            if (memcmp(m.buf, want.buf, m.bytes) != 0) {
                size_t i = 0;
                while (m.buf[i] == want.buf[i])
                    i++;
                fprintf(stderr, "receiver %u: version %llu differs from the model at byte %zu\n",
                        rank, (unsigned long long)version, i);
                bad = 1;
            }
            break;
        case DC_REFIT_EVENT_ABORTED:
            fprintf(stderr, "receiver %u: %s\n", rank, ev.message);
            break;
        case DC_REFIT_EVENT_ENDED:
            ended = 1;
            if (ev.status != DC_OK) {
                fprintf(stderr, "receiver %u: %s: %s\n", rank, dc_status_name(ev.status),
                        ev.message);
                bad = 1;
            }
            break;
        }
    }
    dc_refit_receiver_stats_t rs = {.size = sizeof(rs)};
    dc_refit_receiver_stats(r, &rs);
    st = dc_refit_receiver_close(r);
    if (bad || st != DC_OK)
        goto free_topo;
    /* the state directory's record says the same */
    uint64_t recorded = 0;
    st = dc_refit_committed(state_dir, &recorded, NULL, NULL);
    if (st != DC_OK || recorded != version) {
        fprintf(stderr, "receiver %u: commit record in %s: %s\n", rank, state_dir,
                st != DC_OK ? dc_last_error() : "names another version");
        goto free_topo;
    }
    printf("receiver %u: holds version %llu, byte-exact (%zu bytes; %llu versions, %.3f s "
           "applying)\n", rank, (unsigned long long)version, m.bytes,
           (unsigned long long)rs.versions_committed, rs.apply_s);
    rc = out[0] && toy_model_save(&m, out) != 0 ? 1 : 0;
free_topo:
    dc_topo_free(topo);
free_want:
    toy_model_free(&want);
free_model:
    toy_model_free(&m);
    return rc;
}
