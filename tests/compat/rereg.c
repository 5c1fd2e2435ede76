/* ibv_rereg_mr and context->cmd_fd through the drop-in libibverbs, built with rdma-core's
 * own <infiniband/verbs.h>. Two RC QPs of one context (same device, or uroce0 and uroce1
 * with two devices in UROCE_DEVICES) with an RDMA WRITE target that is re-registered:
 * access taken away (REM_ACCESS_ERR, nothing written), a new translation (the write lands
 * in the new buffer, the QPs restated through RESET), a PD change (the old PD deallocates,
 * the new one is EBUSY), keys and handle kept; rdma-core's return values and errno for
 * refused calls (IBV_REREG_MR_ERR_INPUT -1, IBV_REREG_MR_ERR_CMD -4). cmd_fd is a socket
 * that dup()s, and ibv_import_device on it fails with EOPNOTSUPP.
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

static int failures, checks;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		checks++;                                                 \
		if (!(cond)) {                                            \
			fprintf(stderr, "rereg: FAIL line %d: ", __LINE__); \
			fprintf(stderr, __VA_ARGS__);                     \
			fprintf(stderr, "\n");                            \
			failures++;                                       \
		}                                                         \
	} while (0)

#define DIE(...)                                             \
	do {                                                 \
		fprintf(stderr, "rereg: FATAL: " __VA_ARGS__); \
		fprintf(stderr, "\n");                       \
		exit(2);                                     \
	} while (0)

#define LEN 4096

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void setup(struct end *e, struct ibv_context *ctx)
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

static void to_rts(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid *dgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		DIE("RESET: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
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

static void connect_pair(struct end *a, struct end *b)
{
	to_rts(a->qp, b->qp->qp_num, &b->gid);
	to_rts(b->qp, a->qp->qp_num, &a->gid);
}

/* RDMA WRITE `len` bytes of `src` (lkey) to (raddr, rkey); the completion status. */
static enum ibv_wc_status write_to(struct end *a, struct ibv_mr *src, uint64_t raddr,
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

static int all(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ca, *cb;
	struct end a, b;
	struct stat st;
	uint8_t *src, *dst, *dst2;
	struct ibv_mr *ms, *md;
	struct ibv_pd *pd2;
	uint32_t key;
	int rc, fd;

	if (!list || !list[0])
		DIE("no device");
	ca = ibv_open_device(list[0]);
	cb = list[1] ? ibv_open_device(list[1]) : ca;
	if (!ca || !cb)
		DIE("open: %s", strerror(errno));
	setup(&a, ca);
	setup(&b, cb);
	connect_pair(&a, &b);

	/* cmd_fd: a live socket for the context's life; importing is not offered. */
	CHECK(ca->cmd_fd >= 0, "cmd_fd %d", ca->cmd_fd);
	fd = dup(ca->cmd_fd);
	CHECK(fd >= 0, "dup(cmd_fd): %s", strerror(errno));
	CHECK(fstat(ca->cmd_fd, &st) == 0 && S_ISSOCK(st.st_mode), "cmd_fd is not a socket");
	errno = 0;
	CHECK(ibv_import_device(fd) == NULL && errno == EOPNOTSUPP,
	      "ibv_import_device: errno %d, want EOPNOTSUPP", errno);
	if (fd >= 0)
		close(fd);

	src = aligned_alloc(4096, LEN);
	dst = aligned_alloc(4096, LEN);
	dst2 = aligned_alloc(4096, 2 * LEN);
	memset(src, 0x5a, LEN);
	memset(dst, 0, LEN);
	memset(dst2, 0, 2 * LEN);
	ms = ibv_reg_mr(a.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	md = ibv_reg_mr(b.pd, dst, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!ms || !md)
		DIE("reg_mr: %s", strerror(errno));
	key = md->rkey;
	CHECK(write_to(&a, ms, (uintptr_t)dst, key, 256) == IBV_WC_SUCCESS, "first write");
	CHECK(all(dst, 256, 0x5a), "first write's data");

	/* The refusals rdma-core makes itself: IBV_REREG_MR_ERR_INPUT, errno EINVAL. */
	errno = 0;
	rc = ibv_rereg_mr(md, 8, NULL, NULL, 0, 0);
	CHECK(rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "unknown flag: %d errno %d", rc,
	      errno);
	errno = 0;
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, dst2, 0, 0);
	CHECK(rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "length 0: %d errno %d", rc, errno);
	errno = 0;
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_PD, b.pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	CHECK(rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "access without CHANGE_ACCESS: %d",
	      rc);
	/* Refused by the device: IBV_REREG_MR_ERR_CMD with its errno, the MR unchanged. */
	errno = 0;
	rc = ibv_rereg_mr(md, 0, NULL, NULL, 0, 0);
	CHECK(rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "flags 0: %d errno %d", rc, errno);
	errno = 0;
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
	CHECK(rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "REMOTE_WRITE alone: %d errno %d",
	      rc, errno);
	errno = 0;
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0);
	CHECK(rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "NULL PD: %d errno %d", rc, errno);
	CHECK(md->rkey == key && md->addr == dst && md->pd == b.pd, "MR changed by a refusal");

	/* Access taken away: the peer's write is refused and writes nothing. */
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	CHECK(rc == 0, "rereg access: %d errno %d", rc, errno);
	CHECK(md->rkey == key && md->lkey == key, "keys changed: %#x", md->rkey);
	memset(dst, 0, LEN);
	CHECK(write_to(&a, ms, (uintptr_t)dst, key, 256) == IBV_WC_REM_ACCESS_ERR,
	      "write without REMOTE_WRITE");
	CHECK(all(dst, LEN, 0), "written without REMOTE_WRITE");

	/* New translation (and access back): the same rkey now names dst2. */
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL,
			  dst2, 2 * LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(rc == 0, "rereg translation: %d errno %d", rc, errno);
	CHECK(md->addr == dst2 && md->length == 2 * LEN && md->rkey == key,
	      "mr fields after translation");
	connect_pair(&a, &b);
	CHECK(write_to(&a, ms, (uintptr_t)dst2 + LEN, key, LEN) == IBV_WC_SUCCESS,
	      "write into the new translation");
	CHECK(all(dst2 + LEN, LEN, 0x5a) && all(dst2, LEN, 0) && all(dst, LEN, 0),
	      "data of the write into the new translation");

	/* PD change: QPs of the old PD lose it; the PDs' users follow the MR. */
	pd2 = ibv_alloc_pd(cb);
	if (!pd2)
		DIE("pd2: %s", strerror(errno));
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0);
	CHECK(rc == 0 && md->pd == pd2, "rereg pd: %d errno %d", rc, errno);
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "PD with an MR deallocated");
	CHECK(write_to(&a, ms, (uintptr_t)dst2, key, 64) == IBV_WC_REM_ACCESS_ERR,
	      "write through a QP of the MR's old PD");
	rc = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_PD, b.pd, NULL, 0, 0);
	CHECK(rc == 0 && md->pd == b.pd, "rereg pd back: %d errno %d", rc, errno);
	CHECK(ibv_dealloc_pd(pd2) == 0, "dealloc the PD the MR left");
	connect_pair(&a, &b);
	CHECK(write_to(&a, ms, (uintptr_t)dst2, key, 64) == IBV_WC_SUCCESS, "write after PD back");

	CHECK(ibv_dereg_mr(md) == 0 && ibv_dereg_mr(ms) == 0, "dereg");
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
	free(dst2);
	printf("rereg: %d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
