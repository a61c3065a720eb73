/*
 * test_node_stop.c - a node that stops keeps its first failure
 * (engine/node.c dc_node_stop, dc_node_outcome): the status and the text
 * of the first stop are what the run returns, whatever errors the node's
 * closing connections set after it; a clean stop returns DC_OK; a node
 * that has not stopped has no outcome yet.  (python_torch's receiver once
 * returned "connection ... closed by the peer" instead of the layout
 * mismatch it had reported.)
 */
#include <criterion/criterion.h>

#include "engine/node_internal.h"

#include <stdlib.h>
#include <string.h>

static dc_node_t *node(void)
{
    dc_node_t *n = calloc(1, sizeof(*n));
    cr_assert(n);
    n->me = 3;
    return n;
}

Test(node_stop, first_failure_is_the_outcome)
{
    dc_node_t *n = node();
    cr_assert_eq(dc_node_outcome(n), DC_OK, "a running node has no outcome");
    dc_error(DC_ERR_RESET, "node 3: lost sender 0 for 2000 ms");
    dc_node_stop(n, DC_ERR_RESET);
    cr_assert(n->finished);
    /* what the closing links say afterwards */
    dc_error(DC_ERR_IO, "tcp: connection to 127.0.0.1:1: closed by the peer");
    dc_node_stop(n, DC_ERR_RESET);
    cr_assert_eq(dc_node_outcome(n), DC_ERR_RESET);
    cr_assert_str_eq(dc_last_error(), "node 3: lost sender 0 for 2000 ms");
    free(n);
}

Test(node_stop, a_later_other_result_is_returned_as_it_is)
{
    dc_node_t *n = node();
    dc_error(DC_ERR_INVALID, "node 3: parent 1 has no address");
    dc_node_stop(n, DC_ERR_INVALID);
    /* a later stop with another status (the job's verdict) wins the
     * status; the first failure's text is not pinned to it */
    dc_error(DC_ERR_VERIFY, "node 3: the job ended at version 2");
    dc_node_stop(n, DC_ERR_VERIFY);
    cr_assert_eq(dc_node_outcome(n), DC_ERR_VERIFY);
    cr_assert_str_eq(dc_last_error(), "node 3: the job ended at version 2");
    free(n);
}

Test(node_stop, clean_stop_and_textless_failure)
{
    dc_node_t *n = node();
    dc_node_stop(n, DC_OK);
    cr_assert_eq(dc_node_outcome(n), DC_OK);
    free(n);
    n = node();
    dc_error(DC_OK, "%s", ""); /* no error set */
    dc_node_stop(n, DC_ERR_INTERNAL);
    dc_error(DC_ERR_IO, "unrelated");
    cr_assert_eq(dc_node_outcome(n), DC_ERR_INTERNAL);
    cr_assert(strstr(dc_last_error(), "node 3 stopped"), "%s", dc_last_error());
    free(n);
}
