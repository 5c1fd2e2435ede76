/*
 * uroce's librdmacm.so.1 through rdma-core's own <rdma/rdma_cma.h>: what a program sees
 * before any peer is involved, and what it gets for misuse.
 *
 *   - rdma_getaddrinfo converts a passive lookup into ai_src_addr (port kept);
 *   - an ID resolves a loopback destination to the process's device: ADDR_RESOLVED then
 *     ROUTE_RESOLVED on the channel, id->verbs and id->pd set, port_num 1;
 *   - rdma_create_qp without CQs makes them (id->send_cq/recv_cq, cq_context = the ID) and
 *     leaves id->qp in INIT; rdma_destroy_qp takes them all;
 *   - an empty channel made non-blocking gives -1/EAGAIN;
 *   - binding to an address no device has is -1/ENODEV; a NULL channel is -1/EOPNOTSUPP;
 *   - a destroyed ID and a destroyed (twice) channel give -1/EINVAL, never a crash.
 *
 * Run with LD_LIBRARY_PATH=target/compat and UROCE_DEVICES naming one device; prints
 * "N checks, M failed" and exits 1 if any failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

static int checks, failed;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		checks++;                                                    \
		if (!(cond)) {                                               \
			failed++;                                            \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);          \
			printf(__VA_ARGS__);                                 \
			printf("\n");                                        \
		}                                                            \
	} while (0)

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *e = NULL;
	if (rdma_get_cm_event(ch, &e))
		return NULL;
	return e;
}

int main(int argc, char **argv)
{
	const char *local = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_event_channel *ch;
	struct rdma_cm_event *e;
	struct rdma_cm_id *id = NULL, *none = NULL;
	struct sockaddr_in dst, nodev;
	struct ibv_qp_init_attr attr;
	int r, flags;

	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	r = rdma_getaddrinfo(local, "7471", &hints, &res);
	CHECK(r == 0 && res && res->ai_src_addr, "rdma_getaddrinfo passive: %d", r);
	if (r == 0 && res && res->ai_src_addr) {
		struct sockaddr_in *s = (struct sockaddr_in *)res->ai_src_addr;
		CHECK(s->sin_family == AF_INET && ntohs(s->sin_port) == 7471,
		      "passive address family %d port %d", s->sin_family, ntohs(s->sin_port));
		CHECK(res->ai_dst_addr == NULL, "passive lookup has no destination");
		rdma_freeaddrinfo(res);
	}

	CHECK(rdma_create_id(NULL, &none, NULL, RDMA_PS_TCP) == -1 && errno == EOPNOTSUPP,
	      "NULL channel: errno %d", errno);

	ch = rdma_create_event_channel();
	CHECK(ch != NULL && ch->fd >= 0, "rdma_create_event_channel");
	if (!ch)
		goto out;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && id, "rdma_create_id");

	memset(&nodev, 0, sizeof nodev);
	nodev.sin_family = AF_INET;
	inet_pton(AF_INET, "127.99.99.99", &nodev.sin_addr);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&nodev) == -1 && errno == ENODEV,
	      "bind to an address no device has: errno %d", errno);

	memset(&dst, 0, sizeof dst);
	dst.sin_family = AF_INET;
	dst.sin_port = htons(7471);
	inet_pton(AF_INET, local, &dst.sin_addr);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0,
	      "rdma_resolve_addr: errno %d", errno);
	e = next_event(ch);
	CHECK(e && e->event == RDMA_CM_EVENT_ADDR_RESOLVED && e->id == id,
	      "ADDR_RESOLVED for the ID (got %s)", e ? rdma_event_str(e->event) : "none");
	if (e)
		rdma_ack_cm_event(e);
	CHECK(id->verbs != NULL && id->pd != NULL && id->port_num == 1,
	      "id->verbs, id->pd, id->port_num after resolve");
	CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	e = next_event(ch);
	CHECK(e && e->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED (got %s)",
	      e ? rdma_event_str(e->event) : "none");
	if (e)
		rdma_ack_cm_event(e);

	memset(&attr, 0, sizeof attr);
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = 4;
	attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, NULL, &attr) == 0, "rdma_create_qp without CQs: errno %d", errno);
	CHECK(id->qp && id->send_cq && id->recv_cq && id->send_cq_channel,
	      "the ID's QP, CQs and channels");
	if (id->qp) {
		CHECK(id->qp->state == IBV_QPS_INIT, "QP in INIT (state %d)", id->qp->state);
		CHECK(id->send_cq->cq_context == id, "cq_context is the ID");
	}
	rdma_destroy_qp(id);
	CHECK(id->qp == NULL && id->send_cq == NULL, "rdma_destroy_qp took the QP and CQs");

	flags = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
	e = NULL;
	CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN,
	      "empty non-blocking channel: errno %d", errno);

	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == -1 && errno == EINVAL,
	      "a destroyed ID: errno %d", errno);
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL, "destroying it again: errno %d", errno);
	rdma_destroy_event_channel(ch);
	rdma_destroy_event_channel(ch);
	CHECK(rdma_create_id(ch, &none, NULL, RDMA_PS_TCP) == -1 && errno == EINVAL,
	      "a destroyed channel: errno %d", errno);

	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0,
	      "rdma_event_str");
out:
	printf("%d checks, %d failed\n", checks, failed);
	return failed ? 1 : 0;
}
