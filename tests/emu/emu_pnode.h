/*
 * emu_pnode.h - a device receiver of one chunk for the emu tests: a node
 * whose layout is one tensor of n elements of w bytes in one chunk, placed
 * in device memory (p->dchunk), with the device path open
 * (engine/devpath.c: dc_devpath_apply_test applies a payload to it as a
 * frame's would be).  Included once per test program.
 */
#ifndef DC_TEST_EMU_PNODE_H
#define DC_TEST_EMU_PNODE_H

#include <criterion/criterion.h>

#include "engine/devpath.h"
#include "engine/layout.h"
#include "engine/node_internal.h"
#include "kernels/codec.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

static const dc_dtype_t dtype_of_w[9] = {[1] = DC_DTYPE_U8, [2] = DC_DTYPE_BF16,
                                         [4] = DC_DTYPE_F32, [8] = DC_DTYPE_F64};

typedef struct {
    dc_node_t *n;
    dc_layout_t *l;
    uint8_t *dchunk;
    size_t n_el, bytes;
    unsigned w;
    uint8_t *base, *want, *back;
} pnode_t;

static void pnode_open(pnode_t *p, size_t n, unsigned w)
{
    memset(p, 0, sizeof(*p));
    p->n_el = n;
    p->w = w;
    p->bytes = n * w;
    dc_layout_desc_t d = {"t", dtype_of_w[w], n};
    cr_assert_eq(dc_layout_from_list(&d, 1, p->bytes, &p->l), DC_OK, "%s", dc_last_error());
    cr_assert_eq(p->l->nchunks, 1);
    p->n = calloc(1, sizeof(*p->n));
    p->n->layout = p->l;
    cr_assert_eq(dc_codec_create(p->bytes, &p->n->rx.codec), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&p->dchunk, p->bytes), DC_OK);
    cr_assert_eq(dc_place_init(&p->n->rx.place, p->l), DC_OK);
    cr_assert_eq(dc_place_add(&p->n->rx.place, 0, 0, p->bytes, p->dchunk), DC_OK);
    cr_assert_eq(dc_place_finish(&p->n->rx.place), DC_OK, "%s", dc_last_error());
    p->n->rx.place.dev = 1;
    cr_assert_eq(dc_devpath_open(p->n), DC_OK, "%s", dc_last_error());
    cr_assert_not_null(p->n->rx.dev);
    p->base = malloc(p->bytes);
    p->want = malloc(p->bytes);
    p->back = malloc(p->bytes);
}

static void pnode_close(pnode_t *p)
{
    dc_devpath_close(p->n);
    dc_place_fini(&p->n->rx.place);
    dc_codec_free(p->n->rx.codec);
    dc_kern_cuda_free(p->dchunk);
    dc_layout_free(p->l);
    free(p->n);
    free(p->base);
    free(p->want);
    free(p->back);
}

#endif /* DC_TEST_EMU_PNODE_H */
