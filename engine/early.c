/* early.c - a receiver that fails before it joins says why, at once.
 *
 * Its weights file missing, too small for its tensors or on a full disk,
 * its state directory not creatable: without this the root learns it only
 * from its silence (the join wait, --wait-ms, 60 s by default), and its
 * error names the node, not the reason.  Here the receiver dials its
 * parents as it would to attach (attach.c: the same plan, transport and
 * authentication, SUB on each link) and, where its HELLO would go, sends
 * a FAIL (DC_FAIL_START, version 0, its error as the reason, bounded by
 * DC_FAIL_TEXT_MAX); a relay forwards it up like any FAIL.  The root's
 * join wait ends on it and fails naming the node, its address and the
 * reason (coord.c).  The receiver then waits for the root's BYE (or its
 * link closing) and returns its own error: the process exits non-zero.
 *
 * Bounded: it keeps dialling for timeout_ms (config; the root may not
 * listen yet), then gives up and returns its error all the same.  An
 * embedded receiver (the library's dc_refit_receiver_open, which returns
 * only once the node serves or failed) tries for 1 s at most, so that
 * open() fails promptly.
 */
#include "engine/node_internal.h"

#include <stdio.h>
#include <string.h>

/* The parent our FAIL went up to has answered: its BYE or ABORT
 * (dc_node_handle sets fail_heard), or its link closed after the FAIL. */
static int dc_early_answered(const dc_node_t *n)
{
    if (n->rx.fail_heard)
        return 1;
    return n->rx.fail_sent && (!n->net.up || n->net.up->dead);
}

void dc_early_fail(dc_node_t *n)
{
    dc_status_t st = dc_last_status() != DC_OK ? dc_last_status() : DC_ERR_IO;
    char why[DC_FAIL_TEXT_MAX + 1];
    snprintf(why, sizeof(why), "%s", dc_last_error());
    dc_fail_t f = {.node = n->me, .code = DC_FAIL_START, .version = 0,
                   .chunk_size = n->chunk_size, .ntensors = 0,
                   .text_len = (uint32_t)strlen(why), .text = (const uint8_t *)why, .n = 0};
    size_t len = dc_fail_size(f.text_len, 0);
    dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
    if (!b) {
        dc_error(st, "%s", why);
        return;
    }
    dc_fail_pack(&f, b->data);
    b->len = len;
    n->rx.early = b;
    n->finished = 0;
    uint32_t tell_ms = n->timeout_ms;
    if (n->cfg->sink && tell_ms > 1000)
        tell_ms = 1000;
    DC_LOG_INFO("node %u: could not start; telling the root why (for up to %u ms)", n->me,
                tell_ms);
    uint64_t t0 = dc_now_ns(), dl = t0 + (uint64_t)tell_ms * 1000000ull;
    while (!n->finished && !dc_early_answered(n) && dc_now_ns() < dl)
        dc_node_step(n, 20);
    /* what is still queued to the parent goes out before the links close */
    uint64_t dl2 = dc_now_ns() + 1000000000ull;
    while (n->rx.fail_sent && !dc_early_answered(n) && dc_node_tx_pending(n) &&
           dc_now_ns() < dl2)
        dc_node_step(n, 5);
    if (!n->rx.fail_sent)
        DC_LOG_WARN("node %u: could not reach a parent within %u ms to say why it stops",
                    n->me, tell_ms);
    else
        DC_LOG_INFO("node %u: the root %s its reason after %.2f s", n->me,
                    n->rx.fail_heard ? "took" : "was sent", (double)(dc_now_ns() - t0) / 1e9);
    n->rx.early = NULL;
    dc_nbuf_unref(n, b);
    n->finished = 1;
    dc_error(st, "%s", why);
}
