/* Memory windows through the drop-in libibverbs, built with rdma-core's own
 * <infiniband/verbs.h> (so ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw are rdma-core's
 * inlines). Two RC QPs (one device, or uroce0 and uroce1): a type 1 window bound with
 * ibv_bind_mw and a type 2 window bound with an IBV_WR_BIND_MW work request, RDMA WRITEs
 * through their R_Keys landing inside the window only, a write past the window's end
 * (REM_ACCESS_ERR), LOCAL_INV and a peer's SEND_WITH_INV killing a type 2 window (the
 * receive completion reports the invalidated R_Key), the bind errors (MR without MW_BIND:
 * IBV_WC_MW_BIND_ERR; MR of another PD: EPERM from rdma-core's inline), DEREG_MR of an MR
 * with a bound window (EBUSY), a window type that does not exist (EINVAL).
 * Prints one line per failed check and a summary; exits non-zero on any failure. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define TEST_NAME "mw"
#define RC_PAIR_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#include "rc_pair.h"

static struct ibv_wc post_one(struct end *e, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc = { 0 };
	double end = now() + 60;
	int n = 0;

	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(e->qp, wr, &bad))
		DIE("post_send: %s", strerror(errno));
	while (n == 0 && now() < end)
		n = ibv_poll_cq(e->cq, 1, &wc);
	if (n != 1)
		DIE("no completion");
	return wc;
}

static struct ibv_wc poll_one(struct end *e)
{
	struct ibv_wc wc = { 0 };
	double end = now() + 60;
	int n = 0;

	while (n == 0 && now() < end)
		n = ibv_poll_cq(e->cq, 1, &wc);
	if (n != 1)
		DIE("no completion");
	return wc;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ca, *cb;
	struct end a, b;
	struct ibv_send_wr wr;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct ibv_mw *mw1, *mw2;
	struct ibv_mr *ms, *md, *plain, *other_mr;
	struct ibv_pd *other;
	uint8_t *src, *dst, *rbuf;
	uint32_t k, old;

	if (!list || !list[0])
		DIE("no device");
	ca = ibv_open_device(list[0]);
	cb = list[1] ? ibv_open_device(list[1]) : ca;
	if (!ca || !cb)
		DIE("open: %s", strerror(errno));
	setup(&a, ca);
	setup(&b, cb);
	connect_pair(&a, &b);
	src = aligned_alloc(4096, LEN);
	dst = aligned_alloc(4096, 2 * LEN);
	rbuf = aligned_alloc(4096, LEN);
	memset(src, 0x5a, LEN);
	memset(dst, 0, 2 * LEN);
	ms = ibv_reg_mr(a.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	md = ibv_reg_mr(b.pd, dst, 2 * LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	plain = ibv_reg_mr(b.pd, rbuf, LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!ms || !md || !plain)
		DIE("reg_mr: %s", strerror(errno));

	errno = 0;
	CHECK(ibv_alloc_mw(b.pd, 3) == NULL && errno == EINVAL, "MW type 3: errno %d", errno);

	/* Type 1: ibv_bind_mw, then writes through its R_Key. */
	mw1 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
	if (!mw1)
		DIE("alloc_mw type 1: %s", strerror(errno));
	CHECK(mw1->type == IBV_MW_TYPE_1 && mw1->pd == b.pd && mw1->context == cb, "ibv_mw fields");
	old = mw1->rkey;
	struct ibv_mw_bind bind = { .wr_id = 11, .send_flags = IBV_SEND_SIGNALED,
				    .bind_info = { .mr = md, .addr = (uintptr_t)dst + 1024,
						   .length = 1024,
						   .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	CHECK(ibv_bind_mw(b.qp, mw1, &bind) == 0, "ibv_bind_mw: %s", strerror(errno));
	CHECK(mw1->rkey == ibv_inc_rkey(old), "mw->rkey %#x after bind, want %#x", mw1->rkey,
	      ibv_inc_rkey(old));
	wc = poll_one(&b);
	CHECK(wc.wr_id == 11 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	      "bind completion: id %lu status %d opcode %d", (unsigned long)wc.wr_id, wc.status,
	      wc.opcode);
	CHECK(write_to(&a, ms, (uintptr_t)dst + 1024, mw1->rkey, 1024) == IBV_WC_SUCCESS,
	      "write through a type 1 window");
	CHECK(all(dst + 1024, 1024, 0x5a) && all(dst, 1024, 0) && all(dst + 2048, 2 * LEN - 2048, 0),
	      "data of the write through a type 1 window");
	CHECK(write_to(&a, ms, (uintptr_t)dst + 1025, mw1->rkey, 1024) == IBV_WC_REM_ACCESS_ERR,
	      "write past the window's end");
	CHECK(all(dst + 2048, 2 * LEN - 2048, 0), "written past the window");
	/* A bound window holds its MR. */
	CHECK(ibv_dereg_mr(md) == EBUSY, "dereg of an MR with a bound window");
	/* ibv_bind_mw's own check: the MR must be the window's PD's. */
	other = ibv_alloc_pd(cb);
	other_mr = other ? ibv_reg_mr(other, rbuf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)
			 : NULL;
	if (!other_mr)
		DIE("other pd/mr: %s", strerror(errno));
	bind.bind_info.mr = other_mr;
	bind.bind_info.addr = (uintptr_t)rbuf;
	CHECK(ibv_bind_mw(b.qp, mw1, &bind) == EPERM, "bind to an MR of another PD");
	connect_pair(&a, &b);

	/* Type 2: IBV_WR_BIND_MW, LOCAL_INV. */
	mw2 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
	if (!mw2)
		DIE("alloc_mw type 2: %s", strerror(errno));
	k = ibv_inc_rkey(mw2->rkey);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 21;
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = k;
	wr.bind_mw.bind_info.mr = md;
	wr.bind_mw.bind_info.addr = (uintptr_t)dst + LEN;
	wr.bind_mw.bind_info.length = LEN;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	wc = post_one(&b, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "type 2 bind: %d",
	      wc.status);
	CHECK(mw2->rkey == k, "mw->rkey after a WR bind");
	memset(dst, 0, 2 * LEN);
	CHECK(write_to(&a, ms, (uintptr_t)dst + LEN, k, LEN) == IBV_WC_SUCCESS,
	      "write through a type 2 window");
	CHECK(all(dst + LEN, LEN, 0x5a) && all(dst, LEN, 0), "data through a type 2 window");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 22;
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.invalidate_rkey = k;
	wc = post_one(&b, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "LOCAL_INV: %d",
	      wc.status);
	CHECK(write_to(&a, ms, (uintptr_t)dst + LEN, k, 64) == IBV_WC_REM_ACCESS_ERR,
	      "write through an invalidated window");
	connect_pair(&a, &b);

	/* Rebound, then killed by the peer's SEND_WITH_INV. */
	k = ibv_inc_rkey(mw2->rkey);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 23;
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = k;
	wr.bind_mw.bind_info.mr = md;
	wr.bind_mw.bind_info.addr = (uintptr_t)dst;
	wr.bind_mw.bind_info.length = LEN;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK(post_one(&b, &wr).status == IBV_WC_SUCCESS, "type 2 rebind");
	sge = (struct ibv_sge){ .addr = (uintptr_t)rbuf, .length = 64, .lkey = plain->lkey };
	rwr = (struct ibv_recv_wr){ .wr_id = 31, .sg_list = &sge, .num_sge = 1 };
	if (ibv_post_recv(b.qp, &rwr, &rbad))
		DIE("post_recv: %s", strerror(errno));
	struct ibv_sge ssge = { .addr = (uintptr_t)src, .length = 16, .lkey = ms->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 32;
	wr.opcode = IBV_WR_SEND_WITH_INV;
	wr.sg_list = &ssge;
	wr.num_sge = 1;
	wr.invalidate_rkey = k;
	CHECK(post_one(&a, &wr).status == IBV_WC_SUCCESS, "SEND_WITH_INV");
	wc = poll_one(&b);
	CHECK(wc.wr_id == 31 && wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_INV) &&
		      wc.invalidated_rkey == k,
	      "receive of SEND_WITH_INV: status %d flags %#x rkey %#x", wc.status, wc.wc_flags,
	      wc.invalidated_rkey);
	CHECK(write_to(&a, ms, (uintptr_t)dst, k, 64) == IBV_WC_REM_ACCESS_ERR,
	      "write through a remotely invalidated window");
	connect_pair(&a, &b);

	/* An MR without MW_BIND: the bind completes with IBV_WC_MW_BIND_ERR. */
	k = ibv_inc_rkey(mw2->rkey);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 41;
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = k;
	wr.bind_mw.bind_info.mr = plain;
	wr.bind_mw.bind_info.addr = (uintptr_t)rbuf;
	wr.bind_mw.bind_info.length = 64;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	wc = post_one(&b, &wr);
	CHECK(wc.wr_id == 41 && wc.status == IBV_WC_MW_BIND_ERR, "bind to an MR without MW_BIND: %d",
	      wc.status);

	CHECK(ibv_dealloc_mw(mw1) == 0 && ibv_dealloc_mw(mw2) == 0, "dealloc_mw");
	CHECK(ibv_dereg_mr(md) == 0, "dereg after the windows are gone");
	ibv_dereg_mr(ms);
	ibv_dereg_mr(plain);
	ibv_dereg_mr(other_mr);
	ibv_dealloc_pd(other);
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	ibv_destroy_cq(a.cq);
	ibv_destroy_cq(b.cq);
	ibv_dealloc_pd(a.pd);
	ibv_dealloc_pd(b.pd);
	if (cb != ca)
		ibv_close_device(cb);
	ibv_close_device(ca);
	ibv_free_device_list(list);
	free(src);
	free(dst);
	free(rbuf);
	printf("mw: %d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
