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
 *   - binding to an address no device has is -1/ENODEV; RDMA_PS_IB is -1/EOPNOTSUPP;
 *   - a UDP-port-space lookup gives a UD result; a UD ID's QP is ready (RTS) at once;
 *   - a NULL channel makes a synchronous ID: resolve_addr/route return with the event at
 *     id->event; rdma_create_ep makes the QP, CQs and completion channels (cq_context = the
 *     ID); its rdma_connect to a port nobody listens on is -1/ECONNREFUSED; rdma_get_request
 *     on an asynchronous ID is -1/EINVAL;
 *   - RDMA_OPTION_ID_ACK_TIMEOUT takes one byte 0..31 (else -1/EINVAL); rdma_get_remote_ece
 *     on an ID without a QP answers "no ECE" (vendor_id 0), with a QP -1/EINVAL;
 *     rdma_set_local_ece checks its arguments (-1/EINVAL), then takes any vendor's ECE;
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

	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_UDP;
	r = rdma_getaddrinfo(local, "7174", &hints, &res);
	CHECK(r == 0 && res && res->ai_dst_addr && res->ai_qp_type == IBV_QPT_UD &&
		      res->ai_port_space == RDMA_PS_UDP,
	      "rdma_getaddrinfo UDP: %d", r);
	if (r == 0)
		rdma_freeaddrinfo(res);

	CHECK(rdma_create_id(NULL, &none, NULL, RDMA_PS_IB) == -1 && errno == EOPNOTSUPP,
	      "RDMA_PS_IB: errno %d", errno);

	/* Synchronous: no channel. */
	memset(&dst, 0, sizeof dst);
	dst.sin_family = AF_INET;
	dst.sin_port = htons(7471);
	inet_pton(AF_INET, local, &dst.sin_addr);
	CHECK(rdma_create_id(NULL, &none, NULL, RDMA_PS_TCP) == 0 && none && none->channel,
	      "synchronous rdma_create_id: errno %d", errno);
	if (none) {
		CHECK(rdma_resolve_addr(none, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
			      none->event && none->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
		      "synchronous resolve_addr: errno %d", errno);
		CHECK(rdma_resolve_route(none, 2000) == 0 && none->event &&
			      none->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
		      "synchronous resolve_route: errno %d", errno);
		CHECK(rdma_get_request(none, &id) == -1 && errno == EINVAL,
		      "rdma_get_request on a non-listening ID: errno %d", errno);
		{
			uint8_t t = 14;
			uint32_t wide = 14;
			struct ibv_ece ece = { .vendor_id = 0x15b3, .options = 1, .comp_mask = 0 };

			CHECK(rdma_set_option(none, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t,
					      sizeof t) == 0,
			      "ACK_TIMEOUT 14: errno %d", errno);
			CHECK(rdma_set_option(none, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &wide,
					      sizeof wide) == -1 && errno == EINVAL,
			      "ACK_TIMEOUT with optlen 4: errno %d", errno);
			t = 32;
			CHECK(rdma_set_option(none, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t,
					      sizeof t) == -1 && errno == EINVAL,
			      "ACK_TIMEOUT 32: errno %d", errno);
			CHECK(rdma_get_remote_ece(none, &ece) == 0 && ece.vendor_id == 0 &&
				      ece.options == 0 && ece.comp_mask == 0,
			      "rdma_get_remote_ece without a QP: errno %d vendor_id %u", errno,
			      ece.vendor_id);
			ece.vendor_id = 0;
			CHECK(rdma_set_local_ece(none, &ece) == -1 && errno == EINVAL,
			      "rdma_set_local_ece with vendor_id 0: errno %d", errno);
			ece.vendor_id = 0x15b3;
			CHECK(rdma_set_local_ece(none, &ece) == 0, "rdma_set_local_ece: errno %d",
			      errno);
		}
		CHECK(rdma_destroy_id(none) == 0, "destroying a synchronous ID");
		none = NULL;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	r = rdma_getaddrinfo(local, "7479", &hints, &res);
	CHECK(r == 0, "rdma_getaddrinfo active: %d", r);
	if (r == 0) {
		memset(&attr, 0, sizeof attr);
		attr.cap.max_send_wr = 2;
		attr.cap.max_recv_wr = 2;
		attr.cap.max_send_sge = 1;
		attr.cap.max_recv_sge = 1;
		attr.sq_sig_all = 1;
		CHECK(rdma_create_ep(&none, res, NULL, &attr) == 0 && none,
		      "rdma_create_ep: errno %d", errno);
		if (none) {
			CHECK(none->qp && none->send_cq && none->recv_cq &&
				      none->send_cq_channel && none->recv_cq_channel &&
				      none->send_cq->cq_context == none && none->qp_type == IBV_QPT_RC,
			      "rdma_create_ep's QP, CQs and completion channels");
			{
				struct ibv_ece ece;

				CHECK(rdma_get_remote_ece(none, &ece) == -1 && errno == EINVAL,
				      "rdma_get_remote_ece on an ID with a QP: errno %d", errno);
			}
			CHECK(rdma_connect(none, NULL) == -1 && errno == ECONNREFUSED,
			      "synchronous connect to no listener: errno %d", errno);
			CHECK(none->event && none->event->event == RDMA_CM_EVENT_REJECTED &&
				      none->event->status == 8,
			      "REJECTED (8) at id->event");
			rdma_destroy_ep(none);
			none = NULL;
		}
		rdma_freeaddrinfo(res);
	}

	ch = rdma_create_event_channel();
	CHECK(ch != NULL && ch->fd >= 0, "rdma_create_event_channel");
	if (!ch)
		goto out;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && id, "rdma_create_id");

	memset(&nodev, 0, sizeof nodev);
	nodev.sin_family = AF_INET;
	inet_pton(AF_INET, "192.0.2.99", &nodev.sin_addr);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&nodev) == -1 && errno == ENODEV,
	      "bind to an address no device has: errno %d", errno);

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

	{
		/* rdma_get_devices: the contexts the IDs carry, NULL-terminated. */
		int n = -1, i, seen = 0;
		struct ibv_context **list = rdma_get_devices(&n);
		CHECK(list && n >= 1 && list[n] == NULL, "rdma_get_devices: %d device(s)", n);
		for (i = 0; list && i < n; i++)
			seen |= list[i] == id->verbs;
		CHECK(seen, "rdma_get_devices lists the ID's context");
		rdma_free_devices(list);
	}
	{
		/* A loopback address no device has binds to the first device (the kernel's
		 * cma_bind_loopback). */
		struct rdma_cm_id *lo = NULL;
		struct sockaddr_in la;
		memset(&la, 0, sizeof la);
		la.sin_family = AF_INET;
		inet_pton(AF_INET, "127.99.99.99", &la.sin_addr);
		CHECK(rdma_create_id(ch, &lo, NULL, RDMA_PS_TCP) == 0 && lo, "an ID to bind");
		if (lo) {
			CHECK(rdma_bind_addr(lo, (struct sockaddr *)&la) == 0 && lo->verbs == id->verbs,
			      "bind to a loopback address: errno %d", errno);
			rdma_destroy_id(lo);
		}
	}
	{
		/* rdma_getaddrinfo without node and service: the hints' addresses. */
		struct rdma_addrinfo h2, *r2 = NULL;
		struct sockaddr_in src;
		memset(&h2, 0, sizeof h2);
		memset(&src, 0, sizeof src);
		src.sin_family = AF_INET;
		src.sin_port = htons(4242);
		inet_pton(AF_INET, local, &src.sin_addr);
		h2.ai_family = AF_INET;
		h2.ai_port_space = RDMA_PS_TCP;
		h2.ai_src_len = sizeof src;
		h2.ai_src_addr = (struct sockaddr *)&src;
		CHECK(rdma_getaddrinfo(NULL, NULL, &h2, &r2) == 0 && r2 && r2->ai_src_addr &&
			      memcmp(r2->ai_src_addr, &src, sizeof src) == 0 && !r2->ai_dst_addr &&
			      r2->ai_qp_type == IBV_QPT_RC,
		      "rdma_getaddrinfo from the hints' source address");
		if (r2)
			rdma_freeaddrinfo(r2);
		r2 = NULL;
		h2.ai_src_len = 0;
		h2.ai_src_addr = NULL;
		CHECK(rdma_getaddrinfo(NULL, NULL, &h2, &r2) != 0 && !r2,
		      "rdma_getaddrinfo with nothing to look up fails");
	}

	{
		struct rdma_cm_id *ud = NULL;
		CHECK(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0 && ud &&
			      ud->qp_type == IBV_QPT_UD && ud->ps == RDMA_PS_UDP,
		      "a UD ID");
		if (ud) {
			CHECK(rdma_resolve_addr(ud, NULL, (struct sockaddr *)&dst, 2000) == 0,
			      "UD resolve_addr");
			e = next_event(ch);
			if (e)
				rdma_ack_cm_event(e);
			memset(&attr, 0, sizeof attr);
			attr.qp_type = IBV_QPT_UD;
			attr.cap.max_send_wr = 4;
			attr.cap.max_recv_wr = 4;
			attr.cap.max_send_sge = 1;
			attr.cap.max_recv_sge = 1;
			CHECK(rdma_create_qp(ud, NULL, &attr) == 0 && ud->qp &&
				      ud->qp->state == IBV_QPS_RTS,
			      "a UD QP is in RTS at once: errno %d", errno);
			rdma_destroy_qp(ud);
			rdma_destroy_id(ud);
		}
	}

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
