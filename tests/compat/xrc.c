/* XRC (IBTA Vol 1, XRC annex) through the drop-in libibverbs, built with rdma-core's own
 * <infiniband/verbs.h> so the inline ibv_open_xrcd, ibv_create_srq_ex, ibv_get_srq_num,
 * ibv_create_qp_ex and ibv_wr_set_xrc_srqn are rdma-core's. Each end opens an XRC domain
 * (one through a file with O_CREAT, one anonymous with fd -1), makes an XRC SRQ completing
 * to its CQ, an XRC target QP (IBV_QPT_XRC_RECV) and an XRC initiator QP
 * (IBV_QPT_XRC_SEND), brought to RTS with the kernel's XRC attribute masks. Then: a
 * three-packet SEND with ibv_post_send and qp_type.xrc.remote_srqn, a SEND with immediate
 * through ibv_wr_* and ibv_wr_set_xrc_srqn, RDMA WRITE, READ and FETCH_AND_ADD, every byte
 * checked and each receive completion on the SRQ's CQ naming the target QP; a SEND to an
 * SRQ number that names no SRQ completes with IBV_WC_REM_INV_REQ_ERR; ibv_close_xrcd is
 * EBUSY while the domain's SRQ exists. Run by tests/compat/load.sh on one device and
 * between two embedded devices. Prints one line per failed check and a summary; exits
 * non-zero on any failure. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define TEST_NAME "xrc"
#include "check.h"
#include "two_devices.h"

#define BUF 8192
#define MSG 3000

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t *buf;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_xrcd *xrcd;
	struct ibv_srq *srq;
	uint32_t srqn;
	struct ibv_qp *tgt, *ini;
	struct ibv_qp_ex *inix;
	union ibv_gid gid;
	int fd;
};

static void setup(struct end *e, struct ibv_context *ctx, int use_file)
{
	memset(e, 0, sizeof(*e));
	e->ctx = ctx;
	e->fd = -1;
	e->pd = ibv_alloc_pd(ctx);
	e->buf = calloc(1, BUF);
	if (!e->pd || !e->buf)
		DIE("alloc_pd: %s", strerror(errno));
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	e->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!e->mr || !e->cq)
		DIE("reg_mr / create_cq: %s", strerror(errno));
	if (use_file) {
		char path[] = "/tmp/uroce-xrc-XXXXXX";
		e->fd = mkstemp(path);
		if (e->fd < 0)
			DIE("mkstemp: %s", strerror(errno));
		unlink(path);
	}
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = e->fd,
		.oflags = O_CREAT,
	};
	e->xrcd = ibv_open_xrcd(ctx, &xa);
	if (!e->xrcd)
		DIE("ibv_open_xrcd: %s", strerror(errno));
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC,
		.pd = e->pd,
		.xrcd = e->xrcd,
		.cq = e->cq,
	};
	e->srq = ibv_create_srq_ex(ctx, &sa);
	if (!e->srq)
		DIE("ibv_create_srq_ex: %s", strerror(errno));
	if (ibv_get_srq_num(e->srq, &e->srqn))
		DIE("ibv_get_srq_num: %s", strerror(errno));
	struct ibv_qp_init_attr_ex ta = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = e->xrcd,
	};
	e->tgt = ibv_create_qp_ex(ctx, &ta);
	if (!e->tgt)
		DIE("create XRC_RECV QP: %s", strerror(errno));
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = e->cq,
		.cap = { .max_send_wr = 16, .max_send_sge = 1 },
		.qp_type = IBV_QPT_XRC_SEND,
		.sq_sig_all = 1,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	e->ini = ibv_create_qp_ex(ctx, &ia);
	if (!e->ini)
		DIE("create XRC_SEND QP: %s", strerror(errno));
	e->inix = ibv_qp_to_qp_ex(e->ini);
	if (!e->inix)
		DIE("ibv_qp_to_qp_ex: NULL");
	if (ibv_query_gid(ctx, 1, 0, &e->gid))
		DIE("query_gid: %s", strerror(errno));
}

/* RESET -> INIT -> RTR -> RTS with the masks the kernel's qp_state_table asks of XRC QPs:
 * an initiator's RTR has no responder attributes, a target's RTS only TIMEOUT and SQ_PSN. */
static void to_rts(struct ibv_qp *qp, int target, uint32_t dest_qpn, union ibv_gid *dgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (target)
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
		DIE("INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (target)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (ibv_modify_qp(qp, &a, mask))
		DIE("RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
	if (!target)
		mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	if (ibv_modify_qp(qp, &a, mask))
		DIE("RTS: %s", strerror(errno));
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int got = 0;
	double end = now() + 60;

	while (got < n && now() < end) {
		int rc = ibv_poll_cq(cq, n - got, wc + got);
		if (rc < 0) {
			CHECK(0, "ibv_poll_cq: %d", rc);
			return got;
		}
		got += rc;
	}
	CHECK(got == n, "polled %d completions, want %d", got, n);
	return got;
}

static void post_srq(struct end *e, uint64_t id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_srq_recv(e->srq, &wr, &bad) == 0, "post_srq_recv: %s", strerror(errno));
}

/* One WR from `a`'s initiator to XRC SRQ `srqn`: its completion status. */
static enum ibv_wc_status post1(struct end *a, struct ibv_send_wr *wr, uint32_t srqn)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	wr->qp_type.xrc.remote_srqn = srqn;
	CHECK(ibv_post_send(a->ini, wr, &bad) == 0, "post_send: %s", strerror(errno));
	if (poll_n(a->cq, &wc, 1) != 1)
		return IBV_WC_GENERAL_ERR;
	CHECK(wc.wr_id == wr->wr_id, "wr_id %lu, want %lu", (unsigned long)wc.wr_id,
	      (unsigned long)wr->wr_id);
	return wc.status;
}

static void traffic(struct end *a, struct end *b)
{
	struct ibv_wc wc[2];
	struct ibv_sge sge;
	struct ibv_send_wr wr;

	/* SEND, three packets, with ibv_post_send. */
	for (int i = 0; i < MSG; i++)
		a->buf[i] = (uint8_t)(i * 7 + 1);
	memset(b->buf, 0, BUF);
	post_srq(b, 1, 0, MSG);
	sge = (struct ibv_sge){ (uintptr_t)a->buf, MSG, a->mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 10, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND };
	CHECK(post1(a, &wr, b->srqn) == IBV_WC_SUCCESS, "XRC SEND failed");
	if (poll_n(b->cq, wc, 1) == 1) {
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 1, "recv: %s id %lu",
		      ibv_wc_status_str(wc[0].status), (unsigned long)wc[0].wr_id);
		CHECK(wc[0].byte_len == MSG, "byte_len %u", wc[0].byte_len);
		CHECK(wc[0].qp_num == b->tgt->qp_num, "qp_num %u, want the target's %u",
		      wc[0].qp_num, b->tgt->qp_num);
		CHECK(wc[0].opcode == IBV_WC_RECV, "opcode %d", wc[0].opcode);
	}
	CHECK(memcmp(a->buf, b->buf, MSG) == 0, "SEND data differs");

	/* SEND with immediate through ibv_wr_* and ibv_wr_set_xrc_srqn. */
	post_srq(b, 2, MSG, 64);
	ibv_wr_start(a->inix);
	a->inix->wr_id = 11;
	a->inix->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(a->inix, htobe32(0x1234));
	ibv_wr_set_xrc_srqn(a->inix, b->srqn);
	ibv_wr_set_sge(a->inix, a->mr->lkey, (uintptr_t)a->buf + 100, 64);
	CHECK(ibv_wr_complete(a->inix) == 0, "wr_complete: %s", strerror(errno));
	if (poll_n(a->cq, wc, 1) == 1)
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 11, "wr_send_imm: %s",
		      ibv_wc_status_str(wc[0].status));
	if (poll_n(b->cq, wc, 1) == 1) {
		CHECK(wc[0].wr_id == 2 && wc[0].byte_len == 64, "recv 2: id %lu len %u",
		      (unsigned long)wc[0].wr_id, wc[0].byte_len);
		CHECK((wc[0].wc_flags & IBV_WC_WITH_IMM) && be32toh(wc[0].imm_data) == 0x1234,
		      "immediate missing or wrong");
	}
	CHECK(memcmp(a->buf + 100, b->buf + MSG, 64) == 0, "SEND_WITH_IMM data differs");

	/* RDMA WRITE into b, READ it back, FETCH_AND_ADD: no receive consumed. */
	memset(b->buf + 4096, 0, 1024);
	sge = (struct ibv_sge){ (uintptr_t)a->buf, 1024, a->mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 12, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_RDMA_WRITE };
	wr.wr.rdma.remote_addr = (uintptr_t)b->buf + 4096;
	wr.wr.rdma.rkey = b->mr->rkey;
	CHECK(post1(a, &wr, b->srqn) == IBV_WC_SUCCESS, "XRC WRITE failed");
	CHECK(memcmp(a->buf, b->buf + 4096, 1024) == 0, "WRITE data differs");
	memset(a->buf + 6000, 0, 1024);
	sge = (struct ibv_sge){ (uintptr_t)a->buf + 6000, 1024, a->mr->lkey };
	wr.wr_id = 13;
	wr.opcode = IBV_WR_RDMA_READ;
	CHECK(post1(a, &wr, b->srqn) == IBV_WC_SUCCESS, "XRC READ failed");
	CHECK(memcmp(a->buf + 6000, b->buf + 4096, 1024) == 0, "READ data differs");
	uint64_t v = 40;
	memcpy(b->buf + 7168, &v, 8);
	sge = (struct ibv_sge){ (uintptr_t)a->buf + 7168, 8, a->mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 14, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD };
	wr.wr.atomic.remote_addr = (uintptr_t)b->buf + 7168;
	wr.wr.atomic.rkey = b->mr->rkey;
	wr.wr.atomic.compare_add = 2;
	CHECK(post1(a, &wr, b->srqn) == IBV_WC_SUCCESS, "XRC FETCH_AND_ADD failed");
	memcpy(&v, a->buf + 7168, 8);
	CHECK(v == 40, "fetched %lu, want 40", (unsigned long)v);
	memcpy(&v, b->buf + 7168, 8);
	CHECK(v == 42, "remote %lu, want 42", (unsigned long)v);
	CHECK(ibv_poll_cq(b->cq, 1, wc) == 0, "a WRITE, READ or atomic completed at the target");
}

int main(void)
{
	struct ibv_context *ctx[2];
	struct end a, b;
	int n = open_devices(ctx);

	setup(&a, ctx[0], 1);
	setup(&b, n > 1 ? ctx[1] : ctx[0], 0);
	to_rts(a.ini, 0, b.tgt->qp_num, &b.gid);
	to_rts(b.tgt, 1, a.ini->qp_num, &a.gid);
	to_rts(b.ini, 0, a.tgt->qp_num, &a.gid);
	to_rts(a.tgt, 1, b.ini->qp_num, &b.gid);

	traffic(&a, &b);
	traffic(&b, &a);

	/* A domain with an SRQ cannot close. */
	errno = 0;
	CHECK(ibv_close_xrcd(a.xrcd) == EBUSY, "close_xrcd with an SRQ: want EBUSY");

	/* An SRQ number that names no SRQ: the target NAKs Invalid Request. */
	struct ibv_sge sge = { (uintptr_t)a.buf, 64, a.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 99, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND };
	enum ibv_wc_status st = post1(&a, &wr, b.srqn + 1000);
	CHECK(st == IBV_WC_REM_INV_REQ_ERR, "SEND to a wrong SRQ number: %s, want %s",
	      ibv_wc_status_str(st), ibv_wc_status_str(IBV_WC_REM_INV_REQ_ERR));

	struct end *ends[2] = { &a, &b };
	for (int i = 0; i < 2; i++) {
		struct end *e = ends[i];
		CHECK(ibv_destroy_qp(e->ini) == 0, "destroy ini: %s", strerror(errno));
		CHECK(ibv_destroy_qp(e->tgt) == 0, "destroy tgt: %s", strerror(errno));
		CHECK(ibv_destroy_srq(e->srq) == 0, "destroy srq: %s", strerror(errno));
		CHECK(ibv_close_xrcd(e->xrcd) == 0, "close_xrcd: %s", strerror(errno));
		CHECK(ibv_destroy_cq(e->cq) == 0, "destroy cq");
		CHECK(ibv_dereg_mr(e->mr) == 0, "dereg_mr");
		CHECK(ibv_dealloc_pd(e->pd) == 0, "dealloc_pd");
		if (e->fd >= 0)
			close(e->fd);
		free(e->buf);
	}
	return close_devices(ctx, n);
}
