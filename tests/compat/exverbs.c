/* The extended verbs through the drop-in libibverbs, built with rdma-core's own
 * <infiniband/verbs.h> so the inline ibv_create_cq_ex, ibv_start_poll, ibv_wc_read_*,
 * ibv_create_qp_ex and ibv_wr_* are rdma-core's: CQs from ibv_create_cq_ex polled both with
 * the start_poll/next_poll/end_poll interface and with ibv_poll_cq, and RC and UD QPs from
 * ibv_create_qp_ex posting with ibv_wr_* (SEND, SEND with immediate, RDMA WRITE (with
 * immediate), RDMA READ, both atomics; gather lists and inline data; wr_abort), every
 * transfer checked byte for byte. Run twice by tests/compat/load.sh: once with one device
 * (both QPs on uroce0) and once with two embedded devices (uroce0 and uroce1 on two loopback
 * addresses, one QP on each). Also the refusals: wc_flags outside IBV_WC_STANDARD_FLAGS, an
 * unknown creation flag, send_ops_flags the QP type or uroce does not support, an opcode not
 * in send_ops_flags, a UD WR without an address, inline data over max_inline_data.
 * Prints one line per failed check and a summary; exits non-zero on any failure. */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define TEST_NAME "exverbs"
#include "check.h"
#include "two_devices.h"

#define BUF 4096
#define STD_FLAGS                                                                   \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |      \
	 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |           \
	 IBV_WC_EX_WITH_DLID_PATH_BITS)

/* One end: a context, a PD, a registered buffer, an extended CQ and a QP. */
struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t *buf;
	struct ibv_mr *mr;
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	union ibv_gid gid;
};

/* A completion as read through the ibv_wc_read_* inlines. */
struct comp {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp, imm, wc_flags;
	uint8_t sl;
};

static void read_comp(struct ibv_cq_ex *cq, struct comp *c)
{
	c->wr_id = cq->wr_id;
	c->status = cq->status;
	c->opcode = ibv_wc_read_opcode(cq);
	c->byte_len = ibv_wc_read_byte_len(cq);
	c->qp_num = ibv_wc_read_qp_num(cq);
	c->src_qp = ibv_wc_read_src_qp(cq);
	c->wc_flags = ibv_wc_read_wc_flags(cq);
	c->imm = (c->wc_flags & IBV_WC_WITH_IMM) ? be32toh(ibv_wc_read_imm_data(cq)) : 0;
	c->sl = ibv_wc_read_sl(cq);
}

/* Polls `n` completions with start_poll/next_poll/end_poll (generous deadline: the test
 * must pass on a busy machine; it only bounds a hang). */
static int poll_ex(struct ibv_cq_ex *cq, struct comp *out, int n)
{
	struct ibv_poll_cq_attr attr = { 0 };
	int got = 0;
	double end = now() + 60;

	while (got < n && now() < end) {
		int rc = ibv_start_poll(cq, &attr);
		if (rc == ENOENT)
			continue;
		if (rc) {
			CHECK(0, "ibv_start_poll: %d", rc);
			return got;
		}
		/* Read no further than `n`: ibv_end_poll leaves the rest on the CQ. */
		for (;;) {
			read_comp(cq, &out[got++]);
			if (got == n)
				break;
			rc = ibv_next_poll(cq);
			if (rc)
				break;
		}
		CHECK(rc == 0 || rc == ENOENT, "ibv_next_poll: %d", rc);
		ibv_end_poll(cq);
	}
	CHECK(got == n, "polled %d completions, want %d", got, n);
	return got;
}

/* Polls `n` completions with the plain ibv_poll_cq on the same CQ. */
static int poll_plain(struct ibv_cq_ex *cq, struct ibv_wc *wc, int n)
{
	int got = 0;
	double end = now() + 60;

	while (got < n && now() < end) {
		int rc = ibv_poll_cq(ibv_cq_ex_to_cq(cq), n - got, wc + got);
		if (rc < 0) {
			CHECK(0, "ibv_poll_cq: %d", rc);
			return got;
		}
		got += rc;
	}
	CHECK(got == n, "ibv_poll_cq got %d completions, want %d", got, n);
	return got;
}

static struct ibv_cq_ex *make_cq(struct ibv_context *ctx, uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex a = { .cqe = 64, .wc_flags = wc_flags };
	return ibv_create_cq_ex(ctx, &a);
}

static struct ibv_qp *make_qp(struct end *e, enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(e->cq),
		.recv_cq = ibv_cq_ex_to_cq(e->cq),
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4,
			 .max_recv_sge = 4, .max_inline_data = 64 },
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->pd,
		.send_ops_flags = ops,
	};
	return ibv_create_qp_ex(e->ctx, &a);
}

static void setup(struct end *e, struct ibv_context *ctx)
{
	memset(e, 0, sizeof(*e));
	e->ctx = ctx;
	e->pd = ibv_alloc_pd(ctx);
	e->buf = calloc(1, BUF);
	if (!e->pd || !e->buf)
		DIE("alloc_pd: %s", strerror(errno));
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	e->cq = make_cq(ctx, STD_FLAGS);
	if (!e->mr || !e->cq)
		DIE("reg_mr / create_cq_ex: %s", strerror(errno));
	if (ibv_query_gid(ctx, 1, 0, &e->gid))
		DIE("query_gid: %s", strerror(errno));
}

static void teardown(struct end *e)
{
	if (e->qp)
		CHECK(ibv_destroy_qp(e->qp) == 0, "destroy_qp: %s", strerror(errno));
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(e->cq)) == 0, "destroy cq_ex: %s", strerror(errno));
	CHECK(ibv_dereg_mr(e->mr) == 0, "dereg_mr");
	CHECK(ibv_dealloc_pd(e->pd) == 0, "dealloc_pd");
	free(e->buf);
}

static void to_rts_rc(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid *dgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
		DIE("INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.hop_limit = 64;
	/* All 32 bits set, as UCX 1.13 passes it: the device keeps the low 20. */
	a.ah_attr.grh.flow_label = 0xffffffff;
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
	a.sq_psn = 0;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS: %s", strerror(errno));
}

static void to_rts_ud(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		DIE("UD INIT: %s", strerror(errno));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		DIE("UD RTR: %s", strerror(errno));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		DIE("UD RTS: %s", strerror(errno));
}

static void post_recv(struct end *e, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)(e->buf + off), .length = len, .lkey = e->mr->lkey };
	struct ibv_recv_wr w = { .wr_id = wr_id, .sg_list = &s, .num_sge = 1 }, *bad;
	if (ibv_post_recv(e->qp, &w, &bad))
		DIE("post_recv: %s", strerror(errno));
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

/* RC between a and b with every ibv_wr_* opcode uroce offers. */
static void rc_tests(struct end *a, struct end *b)
{
	const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			     IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			     IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	struct comp c[8];
	struct ibv_wc wc[8];

	a->qp = make_qp(a, IBV_QPT_RC, ops);
	b->qp = make_qp(b, IBV_QPT_RC, IBV_QP_EX_WITH_SEND);
	if (!a->qp || !b->qp)
		DIE("ibv_create_qp_ex(RC, send_ops_flags): %s", strerror(errno));
	a->qpx = ibv_qp_to_qp_ex(a->qp);
	b->qpx = ibv_qp_to_qp_ex(b->qp);
	CHECK(a->qpx && b->qpx, "ibv_qp_to_qp_ex gave NULL for an extended QP");
	CHECK((void *)a->qpx == (void *)a->qp, "qp_ex->qp_base is not the QP");
	to_rts_rc(a->qp, b->qp->qp_num, &b->gid);
	to_rts_rc(b->qp, a->qp->qp_num, &a->gid);

	/* 1. SEND (two-element gather list), SEND with immediate (inline data), RDMA WRITE,
	 * RDMA WRITE with immediate: one batch, one doorbell. */
	fill(a->buf, 1024, 1);
	memset(b->buf, 0, BUF);
	post_recv(b, 100, 0, 256);
	post_recv(b, 101, 256, 256);
	post_recv(b, 102, 512, 256);
	static const char inl[] = "inline data via ibv_wr_set_inline_data_list";
	struct ibv_data_buf parts[2] = { { (void *)inl, 20 }, { (void *)(inl + 20), sizeof(inl) - 20 } };
	struct ibv_sge two[2] = { { (uintptr_t)a->buf, 100, a->mr->lkey },
				  { (uintptr_t)a->buf + 200, 50, a->mr->lkey } };
	struct ibv_qp_ex *x = a->qpx;
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 2, two);
	x->wr_id = 2;
	ibv_wr_send_imm(x, htobe32(0xabcd1234));
	ibv_wr_set_inline_data_list(x, 2, parts);
	x->wr_id = 3;
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 1024);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 300, 300);
	x->wr_id = 4;
	ibv_wr_rdma_write_imm(x, b->mr->rkey, (uintptr_t)b->buf + 2048, htobe32(77));
	ibv_wr_set_inline_data(x, (void *)inl, 10);
	int rc = ibv_wr_complete(x);
	CHECK(rc == 0, "wr_complete of 4 WRs: %d", rc);

	if (poll_ex(a->cq, c, 4) == 4) {
		static const enum ibv_wc_opcode want[4] = { IBV_WC_SEND, IBV_WC_SEND, IBV_WC_RDMA_WRITE,
							    IBV_WC_RDMA_WRITE };
		for (int i = 0; i < 4; i++) {
			CHECK(c[i].wr_id == (uint64_t)i + 1 && c[i].status == IBV_WC_SUCCESS &&
				      c[i].opcode == want[i] && c[i].qp_num == a->qp->qp_num,
			      "send completion %d: wr_id %llu status %d opcode %d qp %u", i,
			      (unsigned long long)c[i].wr_id, c[i].status, c[i].opcode, c[i].qp_num);
		}
	}
	/* b's receives, read half through start_poll and half through ibv_poll_cq. */
	if (poll_ex(b->cq, c, 1) == 1)
		CHECK(c[0].wr_id == 100 && c[0].status == IBV_WC_SUCCESS && c[0].opcode == IBV_WC_RECV &&
			      c[0].byte_len == 150 && !(c[0].wc_flags & IBV_WC_WITH_IMM) &&
			      c[0].qp_num == b->qp->qp_num,
		      "recv 1: wr_id %llu status %d opcode %d len %u flags %#x",
		      (unsigned long long)c[0].wr_id, c[0].status, c[0].opcode, c[0].byte_len,
		      c[0].wc_flags);
	if (poll_plain(b->cq, wc, 2) == 2) {
		CHECK(wc[0].wr_id == 101 && wc[0].status == IBV_WC_SUCCESS &&
			      wc[0].opcode == IBV_WC_RECV && wc[0].byte_len == sizeof(inl) &&
			      (wc[0].wc_flags & IBV_WC_WITH_IMM) && be32toh(wc[0].imm_data) == 0xabcd1234,
		      "recv 2 (send_imm): wr_id %llu len %u flags %#x imm %#x",
		      (unsigned long long)wc[0].wr_id, wc[0].byte_len, wc[0].wc_flags,
		      be32toh(wc[0].imm_data));
		CHECK(wc[1].wr_id == 102 && wc[1].status == IBV_WC_SUCCESS &&
			      wc[1].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
			      (wc[1].wc_flags & IBV_WC_WITH_IMM) && be32toh(wc[1].imm_data) == 77,
		      "recv 3 (write_imm): wr_id %llu opcode %d flags %#x imm %u",
		      (unsigned long long)wc[1].wr_id, wc[1].opcode, wc[1].wc_flags,
		      be32toh(wc[1].imm_data));
	}
	CHECK(memcmp(b->buf, a->buf, 100) == 0 && memcmp(b->buf + 100, a->buf + 200, 50) == 0,
	      "SEND gather list data differs");
	CHECK(memcmp(b->buf + 256, inl, sizeof(inl)) == 0, "inline SEND data differs");
	CHECK(memcmp(b->buf + 1024, a->buf + 300, 300) == 0, "RDMA WRITE data differs");
	CHECK(memcmp(b->buf + 2048, inl, 10) == 0, "inline RDMA WRITE with immediate data differs");

	/* 2. RDMA READ and the atomics; wr_flags 0 on the READ (unsignaled), so only the two
	 * atomics complete — and the READ is done before them (ordered on the QP). */
	fill(b->buf + 3000, 200, 9);
	uint64_t *remote = (uint64_t *)(b->buf + 3584);
	*remote = 1000;
	memset(a->buf + 3000, 0, 1096);
	ibv_wr_start(x);
	x->wr_id = 10;
	x->wr_flags = 0;
	ibv_wr_rdma_read(x, b->mr->rkey, (uintptr_t)b->buf + 3000);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 3000, 200);
	x->wr_id = 11;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_cmp_swp(x, b->mr->rkey, (uintptr_t)remote, 1000, 5000);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 3584, 8);
	x->wr_id = 12;
	ibv_wr_atomic_fetch_add(x, b->mr->rkey, (uintptr_t)remote, 3);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 3592, 8);
	rc = ibv_wr_complete(x);
	CHECK(rc == 0, "wr_complete of READ + atomics: %d", rc);
	if (poll_ex(a->cq, c, 2) == 2) {
		CHECK(c[0].wr_id == 11 && c[0].status == IBV_WC_SUCCESS &&
			      c[0].opcode == IBV_WC_COMP_SWAP && c[1].wr_id == 12 &&
			      c[1].status == IBV_WC_SUCCESS && c[1].opcode == IBV_WC_FETCH_ADD,
		      "atomic completions: %llu/%d/%d %llu/%d/%d", (unsigned long long)c[0].wr_id,
		      c[0].status, c[0].opcode, (unsigned long long)c[1].wr_id, c[1].status,
		      c[1].opcode);
	}
	CHECK(memcmp(a->buf + 3000, b->buf + 3000, 200) == 0, "RDMA READ data differs");
	uint64_t old1, old2;
	memcpy(&old1, a->buf + 3584, 8);
	memcpy(&old2, a->buf + 3592, 8);
	CHECK(old1 == 1000 && old2 == 5000 && *remote == 5003,
	      "atomics: cmp_swp returned %llu (want 1000), fetch_add %llu (want 5000), remote %llu "
	      "(want 5003)",
	      (unsigned long long)old1, (unsigned long long)old2, (unsigned long long)*remote);

	/* 3. wr_abort posts nothing; the next batch works. */
	post_recv(b, 200, 0, 256);
	ibv_wr_start(x);
	x->wr_id = 20;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "aborted", 7);
	ibv_wr_abort(x);
	memset(b->buf, 0, 256);
	ibv_wr_start(x);
	x->wr_id = 21;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "kept", 4);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete after an abort");
	if (poll_ex(a->cq, c, 1) == 1)
		CHECK(c[0].wr_id == 21, "after wr_abort the completion is wr_id %llu, want 21",
		      (unsigned long long)c[0].wr_id);
	if (poll_ex(b->cq, c, 1) == 1)
		CHECK(c[0].wr_id == 200 && c[0].byte_len == 4 && memcmp(b->buf, "kept", 4) == 0,
		      "after wr_abort the receive got %u bytes", c[0].byte_len);

	/* 4. Refusals on the QP: an opcode not in b's send_ops_flags (SEND only), too much
	 * inline data, a wr_set_* before any WR; each fails the batch and posts nothing. */
	struct ibv_qp_ex *y = b->qpx;
	ibv_wr_start(y);
	y->wr_id = 30;
	y->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(y, a->mr->rkey, (uintptr_t)a->buf);
	ibv_wr_set_sge(y, b->mr->lkey, (uintptr_t)b->buf, 8);
	errno = 0;
	rc = ibv_wr_complete(y);
	CHECK(rc == EINVAL && errno == EINVAL,
	      "RDMA WRITE on a QP with send_ops_flags SEND: wr_complete %d errno %d, want EINVAL",
	      rc, errno);
	char big[512] = { 0 };
	ibv_wr_start(x);
	x->wr_id = 31;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, big, sizeof(big));
	rc = ibv_wr_complete(x);
	CHECK(rc == ENOSPC, "inline data over max_inline_data: wr_complete %d, want ENOSPC", rc);
	ibv_wr_start(x);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 8);
	rc = ibv_wr_complete(x);
	CHECK(rc == EINVAL, "wr_set_sge before any WR: wr_complete %d, want EINVAL", rc);
	/* An opcode not in this QP's send_ops_flags (local invalidate) fails the same way. */
	ibv_wr_start(x);
	x->wr_id = 32;
	ibv_wr_local_inv(x, 0x1234);
	rc = ibv_wr_complete(x);
	CHECK(rc == EINVAL, "wr_local_inv: wr_complete %d, want EINVAL", rc);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK(ibv_start_poll(a->cq, &pa) == ENOENT && ibv_start_poll(b->cq, &pa) == ENOENT,
	      "a refused batch produced completions");

	CHECK(ibv_destroy_qp(a->qp) == 0 && ibv_destroy_qp(b->qp) == 0, "destroy RC QPs");
	a->qp = b->qp = NULL;
}

/* UD from a to b through ibv_wr_set_ud_addr. */
static void ud_tests(struct end *a, struct end *b)
{
	struct comp c[2];
	a->qp = make_qp(a, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
	b->qp = make_qp(b, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
	if (!a->qp || !b->qp)
		DIE("ibv_create_qp_ex(UD, send_ops_flags): %s", strerror(errno));
	to_rts_ud(a->qp);
	to_rts_ud(b->qp);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	aa.grh.dgid = b->gid;
	aa.grh.hop_limit = 64;
	/* All 32 bits set, as UCX 1.13 passes it: providers keep the low 20 bits. */
	aa.grh.flow_label = 0xffffffff;
	struct ibv_ah *ah = ibv_create_ah(a->pd, &aa);
	if (!ah)
		DIE("create_ah: %s", strerror(errno));
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a->qp);

	memset(b->buf, 0, 512);
	fill(a->buf, 64, 3);
	post_recv(b, 300, 0, 40 + 256);
	ibv_wr_start(x);
	x->wr_id = 40;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htobe32(4242));
	ibv_wr_set_ud_addr(x, ah, b->qp->qp_num, 0x11111111);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 64);
	CHECK(ibv_wr_complete(x) == 0, "UD wr_complete: %s", strerror(errno));
	if (poll_ex(a->cq, c, 1) == 1)
		CHECK(c[0].wr_id == 40 && c[0].status == IBV_WC_SUCCESS, "UD send completion");
	if (poll_ex(b->cq, c, 1) == 1)
		CHECK(c[0].wr_id == 300 && c[0].status == IBV_WC_SUCCESS && c[0].byte_len == 40 + 64 &&
			      c[0].src_qp == a->qp->qp_num && (c[0].wc_flags & IBV_WC_GRH) &&
			      (c[0].wc_flags & IBV_WC_WITH_IMM) && c[0].imm == 4242,
		      "UD receive: wr_id %llu status %d len %u src_qp %u flags %#x imm %u",
		      (unsigned long long)c[0].wr_id, c[0].status, c[0].byte_len, c[0].src_qp,
		      c[0].wc_flags, c[0].imm);
	CHECK(memcmp(b->buf + 40, a->buf, 64) == 0, "UD payload differs");
	/* wc.sl of a UD receive is the RoCE L3 header type, as mlx5 reports it (UCX 1.13 reads
	 * it): 2 for IPv4, 1 for IPv6. */
	int v4 = b->gid.raw[10] == 0xff && b->gid.raw[11] == 0xff;
	CHECK(c[0].sl == (v4 ? 2 : 1), "UD receive wc.sl %u, want %u", c[0].sl, v4 ? 2 : 1);

	/* A UD WR without an address is refused. */
	ibv_wr_start(x);
	x->wr_id = 41;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 8);
	CHECK(ibv_wr_complete(x) == EINVAL, "UD WR without wr_set_ud_addr: want EINVAL");

	CHECK(ibv_destroy_ah(ah) == 0, "destroy_ah");
	CHECK(ibv_destroy_qp(a->qp) == 0 && ibv_destroy_qp(b->qp) == 0, "destroy UD QPs");
	a->qp = b->qp = NULL;
}

/* Creation checks, as rdma-core 44's rxe answers them. */
static void create_checks(struct end *a)
{
	struct ibv_cq_ex *cq;

	errno = 0;
	cq = make_cq(a->ctx, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
	CHECK(!cq && errno == EOPNOTSUPP,
	      "create_cq_ex with COMPLETION_TIMESTAMP: errno %d, want EOPNOTSUPP", errno);
	errno = 0;
	cq = make_cq(a->ctx, IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_FLOW_TAG);
	CHECK(!cq && errno == EOPNOTSUPP, "create_cq_ex with FLOW_TAG: errno %d", errno);
	struct ibv_cq_init_attr_ex ca = { .cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					  .flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN };
	errno = 0;
	CHECK(!ibv_create_cq_ex(a->ctx, &ca) && errno == EOPNOTSUPP,
	      "create_cq_ex with IGNORE_OVERRUN: errno %d, want EOPNOTSUPP", errno);
	ca.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	cq = ibv_create_cq_ex(a->ctx, &ca);
	CHECK(cq != NULL, "create_cq_ex with SINGLE_THREADED: %s", strerror(errno));
	if (cq) {
		/* wc_flags 0: as rxe, only the read functions always present are set. */
		CHECK(cq->read_opcode && cq->read_wc_flags && cq->read_vendor_err &&
			      !cq->read_byte_len && !cq->read_imm_data && !cq->read_sl &&
			      !cq->read_completion_ts,
		      "read_* slots of a CQ created with wc_flags 0");
		CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq_ex");
	}

	errno = 0;
	CHECK(!make_qp(a, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE) && errno == EOPNOTSUPP,
	      "UD QP with RDMA_WRITE in send_ops_flags: errno %d, want EOPNOTSUPP", errno);
	errno = 0;
	CHECK(!make_qp(a, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW) &&
		      errno == EOPNOTSUPP,
	      "UD QP with BIND_MW: errno %d, want EOPNOTSUPP", errno);
	errno = 0;
	CHECK(!make_qp(a, IBV_QPT_RC, IBV_QP_EX_WITH_TSO) && errno == EOPNOTSUPP,
	      "RC QP with TSO: errno %d, want EOPNOTSUPP", errno);

	/* A QP made with ibv_create_qp has no ibv_qp_ex. */
	struct ibv_qp_init_attr pa = { .send_cq = ibv_cq_ex_to_cq(a->cq),
				       .recv_cq = ibv_cq_ex_to_cq(a->cq),
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						.max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(a->pd, &pa);
	CHECK(qp && !ibv_qp_to_qp_ex(qp), "ibv_qp_to_qp_ex of a plain QP is not NULL");
	if (qp)
		ibv_destroy_qp(qp);
}

int main(void)
{
	struct ibv_context *ctx[2];
	struct end a, b;
	int n = open_devices(ctx);

	setup(&a, ctx[0]);
	setup(&b, n > 1 ? ctx[1] : ctx[0]);

	create_checks(&a);
	rc_tests(&a, &b);
	ud_tests(&a, &b);

	teardown(&a);
	teardown(&b);
	return close_devices(ctx, n);
}
