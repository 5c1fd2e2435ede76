/* A deliberately illegal QP transition through the drop-in libibverbs: a new RC QP (RESET)
 * modified straight to RTS. The IBTA state table (Vol 1 §10.3.1) has no RESET -> RTS edge,
 * so ibv_modify_qp must fail with EINVAL and leave the QP in RESET. Under `uroce trace` the
 * failing MODIFY_QP is printed with the control plane's reason (ILLEGAL_TRANSITION);
 * crates/cli/tests/capture_trace.rs checks both. Exits non-zero on the first mismatch. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

static int fail(const char *what, int err)
{
	fprintf(stdout, "FAIL %s (%d)\n", what, err);
	return 1;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		return fail("no device", errno);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return fail("ibv_open_device", errno);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	if (!cq)
		return fail("pd/cq", errno);
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return fail("ibv_create_qp", errno);

	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	if (rc != EINVAL)
		return fail("RESET -> RTS did not fail with EINVAL", rc);

	struct ibv_qp_init_attr qia;
	memset(&a, 0, sizeof(a));
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &qia))
		return fail("ibv_query_qp", errno);
	if (a.qp_state != IBV_QPS_RESET)
		return fail("QP left RESET", a.qp_state);

	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) ||
	    ibv_close_device(ctx))
		return fail("teardown", errno);
	ibv_free_device_list(list);
	printf("ok: RESET -> RTS refused with EINVAL, QP still RESET\n");
	return 0;
}
