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

#define TEST_NAME "rereg"
#define RC_PAIR_ACCESS IBV_ACCESS_REMOTE_WRITE
#include "rc_pair.h"

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
