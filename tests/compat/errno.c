/* Failing verbs report their error the way rdma-core's do: an `int` verb returns the errno
 * value and leaves the same value in errno; one documented as "-1 and errno" does that; a
 * pointer-returning verb gives NULL with errno set. Run by tests/compat/load.sh against uroce's
 * libibverbs (UROCE_DEVICES with one device); it checks its own results, prints one line per
 * check and exits non-zero if any failed. Built with rdma-core's <infiniband/verbs.h>. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

static int failures, checks;

#define CHECK(cond, ...)                                              \
	do {                                                          \
		checks++;                                             \
		if (!(cond)) {                                        \
			fprintf(stderr, "errno: FAIL line %d: ", __LINE__); \
			fprintf(stderr, __VA_ARGS__);                 \
			fprintf(stderr, "\n");                        \
			failures++;                                   \
		}                                                     \
	} while (0)

/* An `int` verb that failed with `want`: returned it and left it in errno. */
#define EXPECT_INT(call, want)                                                 \
	do {                                                                   \
		int rc_;                                                       \
		errno = 0;                                                     \
		rc_ = (call);                                                  \
		CHECK(rc_ == (want) && errno == (want),                        \
		      "%s: returned %d, errno %d; want %d (%s) in both", #call, \
		      rc_, errno, (want), strerror(want));                     \
	} while (0)

/* A verb documented as returning -1 with errno. */
#define EXPECT_MINUS1(call, want)                                                  \
	do {                                                                       \
		int rc_;                                                           \
		errno = 0;                                                         \
		rc_ = (call);                                                      \
		CHECK(rc_ == -1 && errno == (want), "%s: returned %d, errno %d; want -1, %s", \
		      #call, rc_, errno, strerror(want));                          \
	} while (0)

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_device_attr dattr;
	union ibv_gid gid;
	__be16 pkey;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "errno: no device (%s)\n", strerror(errno));
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx || ibv_query_device(ctx, &dattr)) {
		fprintf(stderr, "errno: cannot open/query %s\n", ibv_get_device_name(list[0]));
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	qp = pd && cq ? ibv_create_qp(pd, &qia) : NULL;
	if (!qp) {
		fprintf(stderr, "errno: setup failed: %s\n", strerror(errno));
		return 1;
	}

	/* Pointer-returning verbs: NULL and errno. */
	errno = 0;
	CHECK(ibv_create_cq(ctx, dattr.max_cqe + 1, NULL, NULL, 0) == NULL && errno == EINVAL,
	      "ibv_create_cq(max_cqe + 1): errno %d, want EINVAL", errno);
	struct ibv_qp_init_attr bad = qia;
	bad.cap.max_send_wr = dattr.max_qp_wr + 1;
	errno = 0;
	CHECK(ibv_create_qp(pd, &bad) == NULL && errno == EINVAL,
	      "ibv_create_qp(max_qp_wr + 1): errno %d, want EINVAL", errno);

	/* int verbs: the errno value, also in errno. */
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTS };
	EXPECT_INT(ibv_modify_qp(qp, &qa, IBV_QP_STATE), EINVAL); /* RESET -> RTS */
	EXPECT_INT(ibv_resize_cq(cq, dattr.max_cqe + 1), EINVAL);
	EXPECT_INT(ibv_dealloc_pd(pd), EBUSY);     /* the QP uses it */
	EXPECT_INT(ibv_destroy_cq(cq), EBUSY);     /* the QP uses it */
	memset(&gid, 0, sizeof(gid));
	EXPECT_INT(ibv_attach_mcast(qp, &gid, 0), EOPNOTSUPP);
	EXPECT_INT(ibv_detach_mcast(qp, &gid, 0), EOPNOTSUPP);
	/* ECE (docs/wire.md section 5.6): vendor_id 0 is libibverbs' EOPNOTSUPP, another
	 * vendor's ID or a comp_mask EINVAL (as mlx5); uroce's own is taken. */
	struct ibv_ece ece = { .vendor_id = 0, .options = 1, .comp_mask = 0 };
	EXPECT_INT(ibv_set_ece(qp, &ece), EOPNOTSUPP);
	ece.vendor_id = 0x02c9;
	EXPECT_INT(ibv_set_ece(qp, &ece), EINVAL);
	ece.vendor_id = 0x027572;
	ece.comp_mask = 1;
	EXPECT_INT(ibv_set_ece(qp, &ece), EINVAL);
	ece.comp_mask = 0;
	CHECK(ibv_set_ece(qp, &ece) == 0, "ibv_set_ece with uroce's vendor ID: errno %d", errno);
	memset(&ece, 0xff, sizeof(ece));
	CHECK(ibv_query_ece(qp, &ece) == 0 && ece.vendor_id == 0x027572 && ece.options == 1 &&
		      ece.comp_mask == 0,
	      "ibv_query_ece: vendor_id %#x options %#x comp_mask %u", ece.vendor_id,
	      ece.options, ece.comp_mask);
	struct ibv_port_attr pa;
	EXPECT_INT(ibv_query_port(ctx, 77, &pa), EINVAL);

	/* A send on a QP that is not ready to send fails and names the WR. */
	char buf[8];
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = 0 };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad_wr = NULL;
	int rc;
	errno = 0;
	rc = ibv_post_send(qp, &wr, &bad_wr);
	CHECK(rc > 0 && errno == rc && bad_wr == &wr,
	      "ibv_post_send on a RESET QP: returned %d, errno %d, bad_wr %s", rc, errno,
	      bad_wr == &wr ? "set" : "not set");

	/* -1 and errno. */
	EXPECT_MINUS1(ibv_query_gid(ctx, 1, 100000, &gid), EINVAL);
	EXPECT_MINUS1(ibv_query_pkey(ctx, 1, 100000, &pkey), EINVAL);

	/* ibv_create_qp_ex takes what rxe takes without the ibv_wr_* interface: comp_mask
	 * PD | CREATE_FLAGS with create_flags 0; other flags and fields are EOPNOTSUPP. */
	struct ibv_qp_init_attr_ex qx = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = qia.cap,
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
		.pd = pd,
	};
	struct ibv_qp *qp2 = ibv_create_qp_ex(ctx, &qx);
	CHECK(qp2 != NULL && qx.cap.max_send_wr >= 4,
	      "ibv_create_qp_ex(PD | CREATE_FLAGS, flags 0): %s", strerror(errno));
	if (qp2)
		CHECK(ibv_destroy_qp(qp2) == 0, "destroying the ibv_create_qp_ex QP");
	qx.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &qx) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_qp_ex(create_flags SCATTER_FCS): errno %d, want EOPNOTSUPP", errno);
	qx.create_flags = 0;
	qx.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &qx) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_qp_ex(MAX_TSO_HEADER): errno %d, want EOPNOTSUPP", errno);
	qx.comp_mask = IBV_QP_INIT_ATTR_CREATE_FLAGS;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &qx) == NULL && errno == EINVAL,
	      "ibv_create_qp_ex without a PD: errno %d, want EINVAL", errno);

	/* Features a software RoCE device does not have: EOPNOTSUPP. */
	errno = 0;
	CHECK(ibv_import_pd(ctx, 1) == NULL && errno == EOPNOTSUPP,
	      "ibv_import_pd: errno %d, want EOPNOTSUPP", errno);

	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) ||
	    ibv_close_device(ctx)) {
		fprintf(stderr, "errno: teardown failed: %s\n", strerror(errno));
		failures++;
	}
	ibv_free_device_list(list);
	printf("errno: %d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
