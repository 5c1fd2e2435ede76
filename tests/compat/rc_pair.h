/* Two RC QPs connected to each other (one device, or two), for the C tests of memory
 * registration: `struct end` (context, PD, CQ, QP, GID), setup, to_rts, connect_pair, a
 * signaled RDMA WRITE and its completion status (write_to), and a byte-range check (all).
 * Define TEST_NAME, and RC_PAIR_ACCESS (the QPs' remote access flags), before including. */
#ifndef UROCE_COMPAT_RC_PAIR_H
#define UROCE_COMPAT_RC_PAIR_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "check.h"

#define LEN 4096

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
};

static inline void setup(struct end *e, struct ibv_context *ctx)
{
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	e->ctx = ctx;
	e->pd = ibv_alloc_pd(ctx);
	e->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!e->pd || !e->cq)
		DIE("pd/cq: %s", strerror(errno));
	qa.send_cq = qa.recv_cq = e->cq;
	e->qp = ibv_create_qp(e->pd, &qa);
	if (!e->qp)
		DIE("qp: %s", strerror(errno));
	if (ibv_query_gid(ctx, 1, 0, &e->gid))
		DIE("gid: %s", strerror(errno));
}

static inline void to_rts(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid *dgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		DIE("RESET: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = RC_PAIR_ACCESS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
		DIE("INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER))
		DIE("RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS: %s", strerror(errno));
}

static inline void connect_pair(struct end *a, struct end *b)
{
	to_rts(a->qp, b->qp->qp_num, &b->gid);
	to_rts(b->qp, a->qp->qp_num, &a->gid);
}

/* RDMA WRITE `len` bytes of `src` (lkey) to (raddr, rkey); the completion status. */
static inline enum ibv_wc_status write_to(struct end *a, struct ibv_mr *src, uint64_t raddr,
				   uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = len, .lkey = src->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	struct ibv_wc wc;
	double end = now() + 60;
	int n = 0;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(a->qp, &wr, &bad))
		DIE("post_send: %s", strerror(errno));
	while (n == 0 && now() < end)
		n = ibv_poll_cq(a->cq, 1, &wc);
	if (n != 1)
		DIE("no completion");
	return wc.status;
}

static inline int all(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

/* Post one WR on `e` and return its completion. */

#endif
