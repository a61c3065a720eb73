/* test_proto.c - engine messages (hostile parsing) and the chunk layout /
 * placement maps. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layout.h"
#include "engine/proto.h"

Test(proto, simple_roundtrip_and_garbage)
{
    uint8_t b[DC_MSG_HDR_SIZE];
    dc_msg_simple(DC_MSG_ACK, 0, 7, 6, 3, 10, 5, b);
    dc_msg_t m;
    cr_assert_eq(dc_msg_parse(b, sizeof(b), &m), DC_OK, "%s", dc_last_error());
    cr_assert_eq(m.type, DC_MSG_ACK);
    cr_assert_eq(m.version, 7);
    cr_assert_eq(m.baseline, 6);
    cr_assert_eq(m.node, 3);
    cr_assert_eq(m.chunk, 10);
    cr_assert_eq(m.count, 5);
    cr_assert_eq(dc_msg_parse(b, sizeof(b) - 1, &m), DC_ERR_FORMAT);
    uint8_t big[DC_MSG_HDR_SIZE + 4];
    memcpy(big, b, sizeof(b));
    cr_assert_eq(dc_msg_parse(big, sizeof(big), &m), DC_ERR_FORMAT); /* body len mismatch */
    b[4] = 99;
    cr_assert_eq(dc_msg_parse(b, sizeof(b), &m), DC_ERR_FORMAT);
    dc_msg_simple(DC_MSG_ACK, 0, 7, 6, 3, 10, 0, b); /* empty range */
    cr_assert_eq(dc_msg_parse(b, sizeof(b), &m), DC_ERR_FORMAT);
    for (int i = 0; i < 2000; i++) {
        uint8_t r[96];
        size_t n = (size_t)rand() % sizeof(r);
        for (size_t k = 0; k < n; k++)
            r[k] = (uint8_t)rand();
        if (n >= 4 && i % 2)
            dc_store_le32(r, DC_MSG_MAGIC);
        if (dc_msg_parse(r, n, &m) == DC_OK) {
            dc_begin_t bg;
            dc_hello_t h;
            (void)dc_begin_parse(&m, &bg);
            (void)dc_hello_parse(&m, &h);
        }
    }
}

Test(proto, begin_and_hello)
{
    dc_begin_t b = {.version = 5, .baseline = 4, .layout_id = 77, .nchunks = 3,
                    .mode = DC_MODE_DELTA, .base_ckpt = {9, 10}};
    size_t n = DC_BEGIN_SIZE;
    uint8_t *buf = malloc(n);
    dc_begin_pack(&b, buf);
    dc_msg_t m;
    cr_assert_eq(dc_msg_parse(buf, n, &m), DC_OK);
    dc_begin_t g;
    cr_assert_eq(dc_begin_parse(&m, &g), DC_OK);
    cr_assert_eq(g.nchunks, 3);
    cr_assert_eq(g.layout_id, 77);
    cr_assert(dc_digest_eq(g.base_ckpt, b.base_ckpt));
    /* unknown mode; baseline not below version */
    dc_store_le32(buf + DC_MSG_HDR_SIZE + 12, 9);
    cr_assert_eq(dc_msg_parse(buf, n, &m), DC_OK);
    cr_assert_eq(dc_begin_parse(&m, &g), DC_ERR_FORMAT);
    b.baseline = 5;
    dc_begin_pack(&b, buf);
    cr_assert_eq(dc_msg_parse(buf, n, &m), DC_OK);
    cr_assert_eq(dc_begin_parse(&m, &g), DC_ERR_FORMAT);
    free(buf);

    uint8_t st[4] = {0, 1, 2, 0};
    dc_hello_t h = {.node = 9, .committed = 3, .j_target = 4, .j_baseline = 3,
                    .layout_id = 77, .flags = DC_HELLO_F_JOURNAL, .nstates = 4, .states = st};
    n = dc_hello_size(4);
    buf = malloc(n);
    dc_hello_pack(DC_MSG_HELLO, &h, buf);
    cr_assert_eq(dc_msg_parse(buf, n, &m), DC_OK);
    dc_hello_t g2;
    cr_assert_eq(dc_hello_parse(&m, &g2), DC_OK);
    cr_assert_eq(g2.node, 9);
    cr_assert_eq(g2.committed, 3);
    cr_assert_eq(memcmp(g2.states, st, 4), 0);
    buf[n - 1] = 7; /* unknown state */
    cr_assert_eq(dc_msg_parse(buf, n, &m), DC_OK);
    cr_assert_eq(dc_hello_parse(&m, &g2), DC_ERR_FORMAT);
    free(buf);
}

/* SUB (stream ids) and SENT (chunk + digest entries): the entry count must
 * match the body exactly. */
Test(proto, sub_and_sent_sizes)
{
    uint8_t b[DC_MSG_HDR_SIZE + 3 * DC_SENT_ENTRY];
    dc_msg_t m;
    dc_msg_t h = {.type = DC_MSG_SUB, .node = 4, .chunk = 2, .count = 3, .body_len = 12};
    dc_msg_pack(&h, b);
    memset(b + DC_MSG_HDR_SIZE, 0, 12);
    cr_assert_eq(dc_msg_parse(b, DC_MSG_HDR_SIZE + 12, &m), DC_OK, "%s", dc_last_error());
    cr_assert_eq(m.type, DC_MSG_SUB);
    cr_assert_eq(m.count, 3);
    h.count = 4; /* 4 ids in 12 bytes */
    dc_msg_pack(&h, b);
    cr_assert_eq(dc_msg_parse(b, DC_MSG_HDR_SIZE + 12, &m), DC_ERR_FORMAT);
    h.count = DC_SUB_MAX + 1;
    h.body_len = 0;
    dc_msg_pack(&h, b);
    cr_assert_eq(dc_msg_parse(b, DC_MSG_HDR_SIZE, &m), DC_ERR_FORMAT);
    h = (dc_msg_t){.type = DC_MSG_SENT, .node = 1, .version = 3, .count = 3,
                   .body_len = 3 * DC_SENT_ENTRY, .flags = DC_SENT_F_LAST};
    dc_msg_pack(&h, b);
    cr_assert_eq(dc_msg_parse(b, sizeof(b), &m), DC_OK, "%s", dc_last_error());
    cr_assert_eq(m.count, 3);
    cr_assert_eq(m.flags, DC_SENT_F_LAST);
    h.count = 2;
    dc_msg_pack(&h, b);
    cr_assert_eq(dc_msg_parse(b, sizeof(b), &m), DC_ERR_FORMAT);
    dc_msg_simple(DC_MSG_SUBOK, 0, 0, 0, 4, 2, 0, b);
    cr_assert_eq(dc_msg_parse(b, DC_MSG_HDR_SIZE, &m), DC_OK);
    cr_assert_str_eq(dc_msg_type_name(m.type), "SUBOK");
}

/* SUB, SENT and DONE bodies: what is packed parses back; every length the
 * body cannot have is refused with a message naming the node. */
Test(proto, sub_sent_done_bodies)
{
    uint32_t streams[3] = {0, 7, 0xfffffff0u};
    uint8_t b[DC_MSG_HDR_SIZE + DC_DONE_BODY + (DC_DONE_MAX_LINKS + 1) * DC_DONE_LINK];
    dc_msg_t m;
    dc_sub_pack(5, 9, streams, 3, b);
    cr_assert_eq(dc_msg_parse(b, dc_sub_size(3), &m), DC_OK, "%s", dc_last_error());
    dc_sub_t sb;
    cr_assert_eq(dc_sub_parse(&m, &sb), DC_OK, "%s", dc_last_error());
    cr_assert_eq(sb.node, 5);
    cr_assert_eq(sb.gen, 9);
    cr_assert_eq(sb.nstreams, 3);
    for (uint32_t k = 0; k < 3; k++)
        cr_assert_eq(dc_sub_stream(&sb, k), streams[k]);
    cr_assert_eq(dc_sub_stream(&sb, 3), UINT32_MAX); /* past the end: no read */
    m.count = 4;                                     /* a body parser does not trust the header */
    cr_assert_eq(dc_sub_parse(&m, &sb), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "SUB message from node 5"), "%s", dc_last_error());
    m.count = 3;
    m.type = DC_MSG_SENT;
    cr_assert_eq(dc_sub_parse(&m, &sb), DC_ERR_FORMAT);

    dc_sent_t s = {.node = 2, .version = 11, .payload_bytes = 12345, .last = 1, .n = 2};
    dc_sent_pack(&s, b);
    dc_sent_put(b, 0, 4, (dc_digest_t){1, 2});
    dc_sent_put(b, 1, 0xffffffffu, (dc_digest_t){3, 4});
    cr_assert_eq(dc_msg_parse(b, dc_sent_size(2), &m), DC_OK, "%s", dc_last_error());
    dc_sent_t g;
    cr_assert_eq(dc_sent_parse(&m, &g), DC_OK, "%s", dc_last_error());
    cr_assert(g.node == 2 && g.version == 11 && g.payload_bytes == 12345 && g.last && g.n == 2);
    uint32_t c;
    dc_digest_t d;
    dc_sent_entry(&g, 1, &c, &d);
    cr_assert(c == 0xffffffffu && d.lo == 3 && d.hi == 4);
    dc_sent_entry(&g, 2, &c, &d); /* past the end */
    cr_assert(c == UINT32_MAX && dc_digest_zero(d));
    m.body_len -= 1;
    cr_assert_eq(dc_sent_parse(&m, &g), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "SENT message from node 2"), "%s", dc_last_error());

    dc_done_t dn = {.node = 3,
                    .flags = DC_DONE_F_DENSE,
                    .version = 8,
                    .committed = 7,
                    .apply_ns = 99,
                    .bytes = 1000,
                    .up_parent = 1,
                    .nlinks = DC_DONE_MAX_LINKS};
    for (uint32_t k = 0; k < DC_DONE_MAX_LINKS; k++) {
        dn.link_parent[k] = k + 1;
        dn.link_bytes[k] = 100u * k;
    }
    dc_done_pack(&dn, b);
    size_t n = dc_done_size(DC_DONE_MAX_LINKS);
    cr_assert_eq(dc_msg_parse(b, n, &m), DC_OK, "%s", dc_last_error());
    dc_done_t dg;
    cr_assert_eq(dc_done_parse(&m, &dg), DC_OK, "%s", dc_last_error());
    cr_assert(dg.node == 3 && dg.flags == DC_DONE_F_DENSE && dg.version == 8 && dg.committed == 7 &&
              dg.apply_ns == 99 && dg.bytes == 1000 && dg.up_parent == 1);
    cr_assert_eq(dg.nlinks, DC_DONE_MAX_LINKS);
    for (uint32_t k = 0; k < DC_DONE_MAX_LINKS; k++)
        cr_assert(dg.link_parent[k] == k + 1 && dg.link_bytes[k] == 100u * k);
    /* a body between the fixed part and a whole link, one link too many,
     * and a body shorter than the fixed part are all refused */
    dc_msg_t h = m;
    h.body_len = DC_DONE_BODY + 5;
    cr_assert_eq(dc_done_parse(&h, &dg), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "DONE message from node 3"), "%s", dc_last_error());
    h.body_len = DC_DONE_BODY + (DC_DONE_MAX_LINKS + 1) * DC_DONE_LINK;
    cr_assert_eq(dc_done_parse(&h, &dg), DC_ERR_FORMAT);
    h.body_len = 20;
    cr_assert_eq(dc_done_parse(&h, &dg), DC_ERR_FORMAT);
    h.body_len = DC_DONE_BODY;
    cr_assert_eq(dc_done_parse(&h, &dg), DC_OK);
    cr_assert_eq(dg.nlinks, 0);
    h.node = DC_NODE_ALL;
    cr_assert_eq(dc_done_parse(&h, &dg), DC_ERR_FORMAT);
}

Test(layout, chunks_and_placement)
{
    dc_layout_desc_t d[] = {
        {"a", DC_DTYPE_BF16, 1000}, /* 2000 B */
        {"empty", DC_DTYPE_F32, 0},
        {"b", DC_DTYPE_F32, 3},     /* 12 B */
        {"c", DC_DTYPE_I64, 100},   /* 800 B */
    };
    dc_layout_t *l;
    cr_assert_eq(dc_layout_from_list(d, 4, 510, &l), DC_OK, "%s", dc_last_error());
    /* bf16: 510-byte chunks -> 4 chunks; f32: 508 -> 1; i64: 504 -> 2 */
    cr_assert_eq(l->nchunks, 4 + 0 + 1 + 2);
    cr_assert_eq(l->chunks[3].len, 2000 - 3 * 510);
    cr_assert_eq(l->chunks[4].tensor, 2);
    cr_assert_eq(l->chunks[5].len, 504);
    cr_assert_eq(l->chunks[6].len, 296);
    cr_assert_eq(l->total_bytes, 2812);
    dc_layout_t *l2;
    cr_assert_eq(dc_layout_from_list(d, 4, 512, &l2), DC_OK);
    cr_assert_neq(l->id, l2->id);
    dc_layout_free(l2);

    /* tensor a split into two segments at an odd place; others whole */
    uint8_t *a1 = malloc(777), *a2 = malloc(2000 - 777), *bb = malloc(12), *cc = malloc(800);
    dc_place_t p;
    dc_place_init(&p, l);
    cr_assert_eq(dc_place_add(&p, 3, 0, 800, cc), DC_OK);
    cr_assert_eq(dc_place_add(&p, 0, 777, 2000 - 777, a2), DC_OK);
    cr_assert_eq(dc_place_add(&p, 0, 0, 777, a1), DC_OK);
    cr_assert_eq(dc_place_finish(&p), DC_ERR_INVALID); /* b missing */
    cr_assert_eq(dc_place_add(&p, 2, 0, 12, bb), DC_OK);
    cr_assert_eq(dc_place_finish(&p), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_place_add(&p, 2, 4, 12, bb), DC_ERR_INVALID); /* out of tensor */
    cr_assert_not_null(dc_place_chunk_ptr(&p, 0));
    cr_assert_null(dc_place_chunk_ptr(&p, 1)); /* 510..1020 spans 777 */
    uint8_t buf[510], back[510];
    for (int i = 0; i < 510; i++)
        buf[i] = (uint8_t)(i * 7);
    dc_place_write(&p, 1, buf);
    cr_assert_eq(a1[776], buf[776 - 510]);
    cr_assert_eq(a1[510], buf[0]);
    cr_assert_eq(a2[0], buf[777 - 510]);
    cr_assert_eq(a2[1019 - 777], buf[509]);
    dc_place_read(&p, 1, back);
    cr_assert_eq(memcmp(buf, back, 510), 0);
    uint8_t scratch[512];
    dc_digest_t pd;
    cr_assert_eq(dc_place_digest(&p, 1, scratch, &pd), DC_OK);
    cr_assert(dc_digest_eq(pd, dc_digest128(buf, 510)));
    dc_place_fini(&p);

    /* overlap refused */
    dc_place_init(&p, l);
    dc_place_add(&p, 0, 0, 1000, a1);
    dc_place_add(&p, 0, 999, 1001, a2);
    dc_place_add(&p, 2, 0, 12, bb);
    dc_place_add(&p, 3, 0, 800, cc);
    cr_assert_eq(dc_place_finish(&p), DC_ERR_INVALID);
    dc_place_fini(&p);
    free(a1); free(a2); free(bb); free(cc);
    dc_layout_free(l);
}
