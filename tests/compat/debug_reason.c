/* A deliberately failing ibv_modify_qp through the drop-in libibverbs: INIT -> RTR without
 * IBV_QP_DEST_QPN. The C caller must see exactly rdma-core's contract (the errno value as
 * the return value, EINVAL); with UROCE_DEBUG=1 the library also writes one line with the
 * verb, the errno and the control plane's reason to stderr, which tests/compat/load.sh
 * checks. Exits non-zero on the first mismatch. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

static int fail(const char *what)
{
	fprintf(stdout, "FAIL %s (errno %d)\n", what, errno);
	return 1;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		return fail("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return fail("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	if (!cq)
		return fail("pd/cq");
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
		return fail("ibv_create_qp");

	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					   IBV_QP_ACCESS_FLAGS))
		return fail("to INIT");

	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return fail("ibv_query_gid");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	errno = 0;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					       IBV_QP_MIN_RNR_TIMER);
	if (rc != EINVAL) {
		fprintf(stdout, "FAIL modify without DEST_QPN returned %d, want %d\n", rc, EINVAL);
		return 1;
	}
	fflush(stderr);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("ok modify_qp returned EINVAL\n");
	return 0;
}
