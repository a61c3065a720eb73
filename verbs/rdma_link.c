/*
 * rdma_link.c - one link of the rdma transport: everything that lives and
 * dies with one RC queue pair (CQ, QP, our registered rings and control
 * buffers, posted receives), set up on the route's device and torn down
 * when the link breaks; the connection private data that carries our
 * ring's address and key, session and epoch (version 2), and the reasons
 * a connect request is rejected with.  The protocol is described in rdma.c.
 */
#include "verbs/rdma_internal.h"

static uint32_t dc_rdma_mtu_bytes(enum ibv_mtu m)
{
    switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
    }
}
static void *dc_rdma_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n) != 0)
        return NULL;
    memset(p, 0, n);
    return p;
}
int dc_rdma_post_recv(dc_rdma_conn_t *c, uint32_t i)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(c->lk.crecv + (size_t)i * DC_RDMA_CTRL_SIZE),
        .length = DC_RDMA_CTRL_SIZE,
        .lkey = c->lk.crecv_mr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(c->lk.qp, &wr, &bad);
}
/*
 * The link's CQ, QP, registered buffers and posted receives on `id` (its
 * device).  The protection domain is c->pd when set (a re-dial, or the
 * listener's), else a new one the connection owns.  On error what was
 * created stays in c->lk for dc_rdma_drop_link().
 */
dc_status_t dc_rdma_setup(dc_rdma_conn_t *c, struct rdma_cm_id *id)
{
    struct ibv_context *v = id->verbs;
    if (!v)
        return dc_error(DC_ERR_UNSUPPORTED, "rdma %s: the route has no RDMA device", c->peer);
    if (!c->pd) {
        if (!(c->pd = ibv_alloc_pd(v)))
            return dc_error_errno(DC_ERR_IO, errno, "rdma %s: ibv_alloc_pd", c->peer);
        c->own_pd = 1;
    } else if (c->pd->context != v) {
        /* Memory registered by the caller lives in the old device's PD. */
        return dc_error(DC_ERR_UNSUPPORTED,
                        "rdma %s: the route now leads through another RDMA device (%s) than "
                        "the one the connection's memory is registered with (%s)",
                        c->peer, ibv_get_device_name(v->device),
                        ibv_get_device_name(c->pd->context->device));
    }
    if (!(c->lk.cc = ibv_create_comp_channel(v)))
        return dc_error_errno(DC_ERR_IO, errno, "rdma %s: ibv_create_comp_channel", c->peer);
    dc_net_nonblock(c->lk.cc->fd);
    c->lk.cq = ibv_create_cq(v, DC_RDMA_SQ_DEPTH + DC_RDMA_RQ_DEPTH + 16, c, c->lk.cc, 0);
    if (!c->lk.cq)
        return dc_error_errno(DC_ERR_IO, errno, "rdma %s: ibv_create_cq", c->peer);
    if (ibv_req_notify_cq(c->lk.cq, 0))
        return dc_error(DC_ERR_IO, "rdma %s: ibv_req_notify_cq failed", c->peer);
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = c->lk.cq;
    qa.recv_cq = c->lk.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = DC_RDMA_SQ_DEPTH;
    qa.cap.max_recv_wr = DC_RDMA_RQ_DEPTH;
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = DC_RDMA_INLINE_WANT;
    if (rdma_create_qp(id, c->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0; /* some devices have no inline support */
        if (rdma_create_qp(id, c->pd, &qa) != 0)
            return dc_error_errno(DC_ERR_IO, errno, "rdma %s: rdma_create_qp (RC, %u/%u WRs)",
                                  c->peer, DC_RDMA_SQ_DEPTH, DC_RDMA_RQ_DEPTH);
    }
    c->lk.qp = id->qp;
    c->lk.max_inline = qa.cap.max_inline_data;
    struct ibv_port_attr pa;
    if (ibv_query_port(v, id->port_num ? id->port_num : 1, &pa) == 0)
        c->lk.mtu = dc_rdma_mtu_bytes(pa.active_mtu);

    c->lk.ring = dc_rdma_alloc(DC_RDMA_RING_BYTES);
    c->lk.crecv = dc_rdma_alloc((size_t)DC_RDMA_RQ_DEPTH * DC_RDMA_CTRL_SIZE);
    c->lk.csend = dc_rdma_alloc((size_t)DC_RDMA_SQ_DEPTH * DC_RDMA_CTRL_SIZE);
    c->lk.stage = dc_rdma_alloc(DC_RDMA_STAGE_BYTES);
    if (!c->lk.ring || !c->lk.crecv || !c->lk.csend || !c->lk.stage)
        return dc_error(DC_ERR_NOMEM, "rdma %s: out of memory for the rings", c->peer);
    c->lk.ring_mr = ibv_reg_mr(c->pd, c->lk.ring, DC_RDMA_RING_BYTES,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->lk.crecv_mr = ibv_reg_mr(c->pd, c->lk.crecv, (size_t)DC_RDMA_RQ_DEPTH * DC_RDMA_CTRL_SIZE,
                                IBV_ACCESS_LOCAL_WRITE);
    c->lk.csend_mr =
        ibv_reg_mr(c->pd, c->lk.csend, (size_t)DC_RDMA_SQ_DEPTH * DC_RDMA_CTRL_SIZE, 0);
    c->lk.stage_mr = ibv_reg_mr(c->pd, c->lk.stage, DC_RDMA_STAGE_BYTES, 0);
    if (!c->lk.ring_mr || !c->lk.crecv_mr || !c->lk.csend_mr || !c->lk.stage_mr)
        return dc_error_errno(DC_ERR_IO, errno,
                              "rdma %s: ibv_reg_mr of the rings failed (locked-memory limit? "
                              "check `ulimit -l`)",
                              c->peer);
    for (uint32_t i = 0; i < DC_RDMA_RQ_DEPTH; i++)
        if (dc_rdma_post_recv(c, i) != 0)
            return dc_error(DC_ERR_IO, "rdma %s: ibv_post_recv failed", c->peer);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->lk.cc->fd, &ev);
    return DC_OK;
}
/*
 * Tear the link down: disconnect, destroy the QP (after which the HCA reads
 * no buffer of ours any more, so no work request references a request's
 * buffer), the CQ with whatever completions it still held, the rdmacm id and
 * its channel, the rings.  The transmit queue, the half-parsed message and
 * queued ACKs go too: a message is only done when ACKed, so the peer re-sends
 * what we did not ACK, and we re-send what it did not.  The PD, the window
 * and the receive slots stay.  Idempotent.  Never call it from an rdmacm
 * event handler (rdma_destroy_id waits for the event's acknowledgement).
 */
void dc_rdma_drop_link(dc_rdma_conn_t *c)
{
    dc_rdma_link_t *k = &c->lk;
    if (k->id && k->qp && !k->disconnected)
        rdma_disconnect(k->id); /* the peer sees DISCONNECTED at once */
    if (k->ch && c->epfd >= 0)
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->ch->fd, NULL);
    if (k->cc && c->epfd >= 0)
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->cc->fd, NULL);
    if (k->qp)
        rdma_destroy_qp(k->id);
    if (k->ring_mr)
        ibv_dereg_mr(k->ring_mr);
    if (k->crecv_mr)
        ibv_dereg_mr(k->crecv_mr);
    if (k->csend_mr)
        ibv_dereg_mr(k->csend_mr);
    if (k->stage_mr)
        ibv_dereg_mr(k->stage_mr);
    if (k->cq)
        ibv_destroy_cq(k->cq);
    if (k->cc)
        ibv_destroy_comp_channel(k->cc);
    if (k->id)
        rdma_destroy_id(k->id);
    if (k->ch)
        rdma_destroy_event_channel(k->ch);
    free(k->ring);
    free(k->crecv);
    free(k->csend);
    free(k->stage);
    memset(k, 0, sizeof(*k));

    for (dc_rdma_req_t *r = c->reqs; r; r = r->next) {
        r->wrs = 0;
        r->queued = 0;
    }
    c->txq_head = 0;
    c->txq_len = 0;
    c->tx_off = 0;
    c->hgot = 0;
    c->in_payload = 0;
    c->discard = 0;
    c->pay_done = 0;
    c->nctrl = 0;
    c->auth_out_len = 0;
}
void dc_rdma_pdata_pack(const dc_rdma_conn_t *c, uint8_t out[DC_RDMA_PDATA_SIZE])
{
    dc_rdma_pdata_t pd = {.mtu = c->lk.mtu,
                          .ring_addr = (uintptr_t)c->lk.ring,
                          .rkey = c->lk.ring_mr->rkey,
                          .ring_bytes = DC_RDMA_RING_BYTES,
                          .rq_depth = DC_RDMA_RQ_DEPTH,
                          .session = c->sess.id,
                          .epoch = c->sess.epoch};
    dc_rdma_pdata_encode(&pd, out);
}
/* Target the peer's ring of `pd` (after dc_rdma_setup: our MTU is known). */
void dc_rdma_pdata_apply(dc_rdma_conn_t *c, const dc_rdma_pdata_t *pd)
{
    if (pd->mtu && c->lk.mtu && pd->mtu != c->lk.mtu)
        DC_LOG_WARN("rdma %s: MTU mismatch: local active MTU %u, peer %u; the path uses the "
                    "smaller one, and on RoCE a switch or NIC MTU below it drops frames "
                    "(symptom: retry-exceeded errors); align the MTUs",
                    c->peer, c->lk.mtu, pd->mtu);
    c->lk.peer_ring_addr = pd->ring_addr;
    c->lk.peer_rkey = pd->rkey;
    c->lk.peer_ring_bytes = pd->ring_bytes;
    c->lk.peer_rq_depth = pd->rq_depth;
}
/* Reject a connection request with a reason the client can act on. */
void dc_rdma_reject(struct rdma_cm_id *id, uint16_t reason)
{
    uint8_t b[DC_RDMA_REJ_SIZE];
    dc_rdma_rej_encode(reason, b);
    rdma_reject(id, b, sizeof(b));
}
/* The reason in a REJECTED event's private data, 0 when absent/foreign. */
uint16_t dc_rdma_reject_reason(const struct rdma_cm_event *ev)
{
    return dc_rdma_rej_decode(ev->param.conn.private_data, ev->param.conn.private_data_len);
}
