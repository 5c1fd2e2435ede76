/*
 * Selective repeat negotiated through the CM's ECE fields (docs/wire.md section 5.6), through
 * uroce's librdmacm and libibverbs with rdma-core's own headers: a client on one device
 * connects to a server on the other (one process, two devices), each side's QP offering
 * selective repeat with ibv_set_ece or not; after ESTABLISHED both QPs' ibv_query_ece says
 * uroce's vendor ID with option 1 exactly when both offered, 0 otherwise. With
 * UROCE_SELECTIVE_REPEAT=1 in the environment (argument "env") every QP offers it without
 * asking. Last, a server refusing with rdma_reject_ece: the client sees REJECTED, status 35.
 *
 *   rdmacm_ece SERVER_ADDR CLIENT_ADDR [env]
 *
 * Run with LD_LIBRARY_PATH=target/compat and UROCE_DEVICES naming both addresses; prints
 * "N checks, M failed" and exits 1 if any failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#define UROCE_ECE_VENDOR_ID 0x027572
#define ECE_SELECTIVE_REPEAT 1

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

/* The next event on `ch`, which must be `want` (NULL otherwise, after a FAIL line). */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e = NULL;
	if (rdma_get_cm_event(ch, &e)) {
		CHECK(0, "rdma_get_cm_event (want %s): errno %d", rdma_event_str(want), errno);
		return NULL;
	}
	CHECK(e->event == want, "event %s (status %d), want %s", rdma_event_str(e->event),
	      e->status, rdma_event_str(want));
	if (e->event != want) {
		rdma_ack_cm_event(e);
		return NULL;
	}
	return e;
}

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static int make_qp(struct rdma_cm_id *id, int ask)
{
	struct ibv_qp_init_attr qia;
	memset(&qia, 0, sizeof qia);
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = qia.cap.max_recv_wr = 4;
	qia.cap.max_send_sge = qia.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &qia)) {
		CHECK(0, "rdma_create_qp: errno %d", errno);
		return -1;
	}
	if (ask) {
		struct ibv_ece ece = { .vendor_id = UROCE_ECE_VENDOR_ID,
				       .options = ECE_SELECTIVE_REPEAT };
		CHECK(ibv_set_ece(id->qp, &ece) == 0, "ibv_set_ece: errno %d", errno);
	}
	return 0;
}

static unsigned options_of(struct ibv_qp *qp)
{
	struct ibv_ece ece;
	memset(&ece, 0xff, sizeof ece);
	if (ibv_query_ece(qp, &ece)) {
		CHECK(0, "ibv_query_ece: errno %d", errno);
		return ~0u;
	}
	CHECK(ece.vendor_id == UROCE_ECE_VENDOR_ID && ece.comp_mask == 0,
	      "ibv_query_ece: vendor_id %#x comp_mask %u", ece.vendor_id, ece.comp_mask);
	return ece.options;
}

/* One connection; `reject`: the server refuses with rdma_reject_ece. */
static void one(const char *sip, const char *cip, int port, int cask, int sask, int env,
		int reject)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *listen = NULL, *client = NULL, *conn = NULL;
	struct sockaddr_in sa = addr(sip, port), ca = addr(cip, 0);
	struct rdma_conn_param p;
	struct rdma_cm_event *e;
	unsigned want = ((cask || env) && (sask || env)) ? ECE_SELECTIVE_REPEAT : 0;

	memset(&p, 0, sizeof p);
	p.responder_resources = p.initiator_depth = 1;
	p.retry_count = p.rnr_retry_count = 7;
	if (!sch || !cch || rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP) ||
	    rdma_create_id(cch, &client, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen, (struct sockaddr *)&sa) || rdma_listen(listen, 4) ||
	    rdma_resolve_addr(client, (struct sockaddr *)&ca, (struct sockaddr *)&sa, 2000)) {
		CHECK(0, "setup on port %d: errno %d", port, errno);
		return;
	}
	if (!(e = expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED)))
		return;
	rdma_ack_cm_event(e);
	CHECK(rdma_resolve_route(client, 2000) == 0, "resolve_route: errno %d", errno);
	if (!(e = expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		return;
	rdma_ack_cm_event(e);
	if (make_qp(client, cask))
		return;
	CHECK(options_of(client->qp) == ((cask || env) ? ECE_SELECTIVE_REPEAT : 0u),
	      "port %d: the client's offer before connecting", port);
	CHECK(rdma_connect(client, &p) == 0, "rdma_connect: errno %d", errno);
	if (!(e = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST)))
		return;
	conn = e->id;
	rdma_ack_cm_event(e);
	if (reject) {
		struct ibv_ece ece;
		CHECK(rdma_get_remote_ece(conn, &ece) == 0 &&
			      ece.vendor_id == UROCE_ECE_VENDOR_ID &&
			      ece.options == ECE_SELECTIVE_REPEAT,
		      "the REQ's ECE: errno %d vendor_id %#x options %#x", errno, ece.vendor_id,
		      ece.options);
		CHECK(rdma_reject_ece(conn, NULL, 0) == 0, "rdma_reject_ece: errno %d", errno);
		if ((e = expect(cch, RDMA_CM_EVENT_REJECTED))) {
			CHECK(e->status == 35, "REJECTED status %d, want 35", e->status);
			rdma_ack_cm_event(e);
		}
	} else {
		if (make_qp(conn, sask))
			return;
		CHECK(rdma_accept(conn, &p) == 0, "rdma_accept: errno %d", errno);
		if ((e = expect(cch, RDMA_CM_EVENT_ESTABLISHED)))
			rdma_ack_cm_event(e);
		if ((e = expect(sch, RDMA_CM_EVENT_ESTABLISHED)))
			rdma_ack_cm_event(e);
		CHECK(options_of(client->qp) == want && options_of(conn->qp) == want,
		      "port %d (client %s, server %s%s): agreed options client %#x server %#x, "
		      "want %#x",
		      port, cask ? "asks" : "-", sask ? "asks" : "-", env ? ", env" : "",
		      options_of(client->qp), options_of(conn->qp), want);
		rdma_disconnect(client);
		if ((e = expect(sch, RDMA_CM_EVENT_DISCONNECTED)))
			rdma_ack_cm_event(e);
		rdma_disconnect(conn);
		rdma_destroy_qp(conn);
	}
	rdma_destroy_qp(client);
	rdma_destroy_id(conn);
	rdma_destroy_id(client);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

int main(int argc, char **argv)
{
	const char *sip = argc > 2 ? argv[1] : "127.0.0.1";
	const char *cip = argc > 2 ? argv[2] : "127.0.0.2";
	int env = argc > 3 && strcmp(argv[3], "env") == 0;
	int port = 7700, c, s;

	for (c = 0; c < 2; c++)
		for (s = 0; s < 2; s++)
			one(sip, cip, port++, c, s, env, 0);
	one(sip, cip, port, 1, 1, env, 1);
	printf("%d checks, %d failed\n", checks, failed);
	return failed ? 1 : 0;
}
