/*
 * verbs_mix: a small libibverbs program for the rxe lab that sends the RoCEv2
 * packets the stock tools (ibv_*_pingpong, perftest 4.5, rping) never send:
 * SEND/RDMA WRITE with immediate, zero-length SEND/WRITE/READ, the solicited
 * event (SE) bit, SEND with invalidate (IETH, on two type-2 memory windows the
 * server binds), an RNR NAK and a remote-access-error NAK, and UD SEND with
 * immediate. Written for uroce's capture set (testdata/lab-captures); it is
 * compiled on the host by scripts/record-lab-captures.sh and run in the guests
 * by the lab's `capture` script like any other TOOL:
 *
 *   server:  verbs_mix [-d rxe0] [-g GID_INDEX] [-m MTU]
 *   client:  verbs_mix [-d rxe0] [-g GID_INDEX] [-m MTU] SERVER_IP
 *
 * The two sides exchange QP numbers, PSNs, GIDs and the buffer's address and
 * rkey over TCP port 18515 (the port the capture script waits for), then the
 * server sends the rkeys of its two memory windows once they are bound. The
 * server posts its receives only 200 ms after the exchange, so the client's
 * first SEND draws one RNR NAK (the server's min_rnr_timer is 0 = 655 ms, so
 * exactly one). Then the client runs the operations in `ops` one at a time,
 * waiting for each completion, and ends with an RDMA WRITE to a wrong rkey,
 * which rxe answers with NAK "remote access error". Both sides print every
 * completion and exit 0 only if everything went as expected.
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define TCP_PORT 18515
#define BUF_SIZE 65536
#define WRITE_OFF 0        /* remote RDMA WRITE/READ target */
#define SEND_OFF 16384     /* local source of SENDs and WRITEs */
#define RECV_OFF 32768     /* all receive buffers (shared, contents unused) */
#define RECV_LEN 8192
#define QKEY 0x11111111u
#define N_RC_RECV 16
#define N_UD_RECV 8
#define MSG_LEN 80

struct peer {
	uint32_t rc_qpn, ud_qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

enum target { RC, UD };

struct op {
	const char *what;
	enum target qp;
	enum ibv_wr_opcode opcode;
	uint32_t len;
	uint32_t imm;
	int solicited;
	int bad_rkey;
	enum ibv_wc_status expect;
	int inv; /* 1 or 2: SEND_WITH_INV invalidating the server's memory window 1 or 2 */
};

/* What the server should see: one receive completion per op that consumes a
 * receive WQE (SEND, SEND_WITH_IMM, WRITE_WITH_IMM). */
static const struct op ops[] = {
	{"SEND 0 B (first: RNR NAK, retried)", RC, IBV_WR_SEND, 0, 0, 0, 0, IBV_WC_SUCCESS, 0},
	{"SEND_WITH_IMM 0 B", RC, IBV_WR_SEND_WITH_IMM, 0, 0x01020304, 0, 0, IBV_WC_SUCCESS, 0},
	{"SEND_WITH_IMM 2500 B, SE", RC, IBV_WR_SEND_WITH_IMM, 2500, 0xdeadbeef, 1, 0, IBV_WC_SUCCESS, 0},
	{"SEND 7 B, SE", RC, IBV_WR_SEND, 7, 0, 1, 0, IBV_WC_SUCCESS, 0},
	{"RDMA_WRITE 0 B", RC, IBV_WR_RDMA_WRITE, 0, 0, 0, 0, IBV_WC_SUCCESS, 0},
	{"RDMA_WRITE_WITH_IMM 0 B", RC, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0x0000abcd, 0, 0, IBV_WC_SUCCESS, 0},
	{"RDMA_WRITE_WITH_IMM 2500 B, SE", RC, IBV_WR_RDMA_WRITE_WITH_IMM, 2500, 0xcafef00d, 1, 0, IBV_WC_SUCCESS, 0},
	{"RDMA_WRITE_WITH_IMM 5 B", RC, IBV_WR_RDMA_WRITE_WITH_IMM, 5, 0xffffffff, 0, 0, IBV_WC_SUCCESS, 0},
	{"RDMA_WRITE 2 B, SE", RC, IBV_WR_RDMA_WRITE, 2, 0, 1, 0, IBV_WC_SUCCESS, 0},
	{"SEND_WITH_INV 1500 B (memory window 1)", RC, IBV_WR_SEND_WITH_INV, 1500, 0, 0, 0, IBV_WC_SUCCESS, 1},
	{"SEND_WITH_INV 1 B, SE (memory window 2)", RC, IBV_WR_SEND_WITH_INV, 1, 0, 1, 0, IBV_WC_SUCCESS, 2},
	{"RDMA_READ 0 B", RC, IBV_WR_RDMA_READ, 0, 0, 0, 0, IBV_WC_SUCCESS, 0},
	{"RDMA_READ 3 B", RC, IBV_WR_RDMA_READ, 3, 0, 0, 0, IBV_WC_SUCCESS, 0},
	{"UD SEND_WITH_IMM 33 B, SE", UD, IBV_WR_SEND_WITH_IMM, 33, 0x5555aaaa, 1, 0, IBV_WC_SUCCESS, 0},
	{"UD SEND 0 B", UD, IBV_WR_SEND, 0, 0, 0, 0, IBV_WC_SUCCESS, 0},
	{"RDMA_WRITE 4 B to a wrong rkey (NAK remote access error)", RC, IBV_WR_RDMA_WRITE, 4, 0, 0, 1,
	 IBV_WC_REM_ACCESS_ERR, 0},
};
#define N_OPS (sizeof(ops) / sizeof(ops[0]))

static void die(const char *msg)
{
	fprintf(stderr, "verbs_mix: %s\n", msg);
	exit(1);
}

static void full_io(int fd, char *buf, size_t len, int writing)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = writing ? write(fd, buf + done, len - done) : read(fd, buf + done, len - done);
		if (n <= 0)
			die("TCP exchange failed");
		done += (size_t)n;
	}
}

static int tcp_connect(const char *server)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (fd < 0)
		die("socket");
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(TCP_PORT);
	if (server) {
		if (inet_pton(AF_INET, server, &a.sin_addr) != 1)
			die("server must be an IPv4 address");
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		return fd;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0)
		die("bind/listen");
	int c = accept(fd, NULL, NULL);
	if (c < 0)
		die("accept");
	close(fd);
	return c;
}

static void exchange(int fd, const struct peer *me, struct peer *them)
{
	char msg[MSG_LEN + 1], gid[33];
	unsigned int rc, ud, psn, rkey;
	unsigned long long addr;
	int i;
	for (i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", me->gid.raw[i]);
	snprintf(msg, sizeof(msg), "%06x %06x %06x %08x %016llx %s\n", me->rc_qpn, me->ud_qpn, me->psn,
		 me->rkey, (unsigned long long)me->addr, gid);
	full_io(fd, msg, MSG_LEN, 1);
	full_io(fd, msg, MSG_LEN, 0);
	msg[MSG_LEN] = 0;
	if (sscanf(msg, "%x %x %x %x %llx %32s", &rc, &ud, &psn, &rkey, &addr, gid) != 6)
		die("bad exchange message");
	them->rc_qpn = rc;
	them->ud_qpn = ud;
	them->psn = psn;
	them->rkey = rkey;
	them->addr = addr;
	for (i = 0; i < 16; i++) {
		unsigned int b;
		if (sscanf(gid + 2 * i, "%2x", &b) != 1)
			die("bad GID in exchange message");
		them->gid.raw[i] = (uint8_t)b;
	}
}

static enum ibv_mtu mtu_enum(int mtu)
{
	switch (mtu) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	die("MTU must be 256, 512, 1024, 2048 or 4096");
	return IBV_MTU_1024;
}

static struct ibv_wc wait_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 20)
			die("timed out waiting for a completion");
		usleep(100);
	}
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *buf)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(buf + RECV_OFF), .length = RECV_LEN, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv");
}

int main(int argc, char **argv)
{
	const char *devname = "rxe0", *server = NULL;
	int gidx = 1, mtu = 1024, c, i, ok = 1;
	while ((c = getopt(argc, argv, "d:g:m:")) != -1) {
		switch (c) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'm': mtu = atoi(optarg); break;
		default: die("usage: verbs_mix [-d DEV] [-g GID_INDEX] [-m MTU] [SERVER_IP]");
		}
	}
	if (optind < argc)
		server = argv[optind];

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), devname))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("cannot open the device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, BUF_SIZE);
	if (!pd || !buf)
		die("ibv_alloc_pd/calloc");
	memset(buf + SEND_OFF, server ? 'c' : 's', RECV_OFF - SEND_OFF);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF_SIZE,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_MW_BIND);
	struct ibv_cq *cq = ibv_create_cq(ctx, 128, NULL, NULL, 0);
	if (!mr || !cq)
		die("ibv_reg_mr/ibv_create_cq");
	struct ibv_qp_init_attr rc_init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = N_RC_RECV, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp_init_attr ud_init = rc_init;
	ud_init.qp_type = IBV_QPT_UD;
	ud_init.cap.max_recv_wr = N_UD_RECV;
	struct ibv_qp *rc = ibv_create_qp(pd, &rc_init), *ud = ibv_create_qp(pd, &ud_init);
	if (!rc || !ud)
		die("ibv_create_qp");

	struct peer me = {.rc_qpn = rc->qp_num, .ud_qpn = ud->qp_num, .rkey = mr->rkey,
			  .addr = (uintptr_t)buf};
	srand48(getpid() ^ time(NULL));
	me.psn = (uint32_t)lrand48() & 0xffffff;
	if (ibv_query_gid(ctx, 1, gidx, &me.gid))
		die("ibv_query_gid");

	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	if (ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("RC -> INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = QKEY;
	if (ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("UD -> INIT");

	int fd = tcp_connect(server);
	struct peer them;
	exchange(fd, &me, &them);

	struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1,
				 .grh = {.dgid = them.gid, .sgid_index = (uint8_t)gidx, .hop_limit = 1}};
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu_enum(mtu);
	a.dest_qp_num = them.rc_qpn;
	a.rq_psn = them.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 0; /* 655.36 ms: one RNR NAK, one retry */
	a.ah_attr = ah;
	if (ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RC -> RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me.psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RC -> RTS");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(ud, &a, IBV_QP_STATE))
		die("UD -> RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = me.psn;
	if (ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("UD -> RTS");
	printf("local  RC QPN 0x%06x UD QPN 0x%06x PSN 0x%06x rkey 0x%08x\n", me.rc_qpn, me.ud_qpn, me.psn,
	       me.rkey);
	printf("remote RC QPN 0x%06x UD QPN 0x%06x PSN 0x%06x rkey 0x%08x\n", them.rc_qpn, them.ud_qpn,
	       them.psn, them.rkey);

	if (!server) {
		/* Server: receives only after a delay, so the first SEND gets an RNR NAK. */
		int want = 0, got = 0;
		char done[5], keys[MSG_LEN + 1];
		uint32_t mw_rkey[2];
		/* Bind two type-2 memory windows for the client's SEND_WITH_INV. */
		for (i = 0; i < 2; i++) {
			struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
			if (!mw)
				die("ibv_alloc_mw");
			mw_rkey[i] = ibv_inc_rkey(mw->rkey);
			struct ibv_send_wr bw = {.wr_id = 1000 + (uint64_t)i, .opcode = IBV_WR_BIND_MW,
						 .send_flags = IBV_SEND_SIGNALED}, *bad;
			bw.bind_mw.mw = mw;
			bw.bind_mw.rkey = mw_rkey[i];
			bw.bind_mw.bind_info.mr = mr;
			bw.bind_mw.bind_info.addr = (uintptr_t)(buf + WRITE_OFF);
			bw.bind_mw.bind_info.length = 4096;
			bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
			if (ibv_post_send(rc, &bw, &bad))
				die("ibv_post_send(BIND_MW)");
			struct ibv_wc wc = wait_one(cq);
			if (wc.status != IBV_WC_SUCCESS)
				die("bind memory window failed");
			printf("memory window %d bound, rkey 0x%08x\n", i + 1, mw_rkey[i]);
		}
		memset(keys, ' ', MSG_LEN);
		snprintf(keys, sizeof(keys), "%08x %08x", mw_rkey[0], mw_rkey[1]);
		full_io(fd, keys, MSG_LEN, 1);
		for (i = 0; i < (int)N_OPS; i++)
			if (ops[i].opcode != IBV_WR_RDMA_WRITE && ops[i].opcode != IBV_WR_RDMA_READ)
				want++;
		usleep(200000);
		for (i = 0; i < N_RC_RECV; i++)
			post_recv(rc, mr, buf);
		for (i = 0; i < N_UD_RECV; i++)
			post_recv(ud, mr, buf);
		while (got < want) {
			struct ibv_wc wc = wait_one(cq);
			/* imm_data is big-endian; the union's other member (invalidated rkey) is printed raw. */
			uint32_t ex = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : wc.invalidated_rkey;
			printf("recv completion: %s qp 0x%06x status %s opcode %d byte_len %u imm/inv 0x%08x flags 0x%x\n",
			       wc.qp_num == rc->qp_num ? "RC" : "UD", wc.qp_num, ibv_wc_status_str(wc.status),
			       wc.opcode, wc.byte_len, ex, wc.wc_flags);
			if (wc.status != IBV_WC_SUCCESS)
				ok = 0;
			got++;
		}
		full_io(fd, done, sizeof(done), 0);
		printf("%d receive completions; client said %.4s\n", got, done);
		return ok ? 0 : 1;
	}

	struct ibv_ah *uah = ibv_create_ah(pd, &ah);
	if (!uah)
		die("ibv_create_ah");
	uint32_t mw_rkey[2] = {0, 0};
	int have_keys = 0;
	for (i = 0; i < (int)N_OPS; i++) {
		const struct op *o = &ops[i];
		if (o->inv && !have_keys) {
			char keys[MSG_LEN + 1];
			full_io(fd, keys, MSG_LEN, 0);
			keys[MSG_LEN] = 0;
			if (sscanf(keys, "%x %x", &mw_rkey[0], &mw_rkey[1]) != 2)
				die("bad memory window message");
			have_keys = 1;
		}
		int is_read = o->opcode == IBV_WR_RDMA_READ;
		struct ibv_sge sge = {.addr = (uintptr_t)(buf + (is_read ? WRITE_OFF : SEND_OFF)), .length = o->len,
				      .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = o->len ? 1 : 0,
					 .opcode = o->opcode, .send_flags = IBV_SEND_SIGNALED}, *bad;
		if (o->solicited)
			wr.send_flags |= IBV_SEND_SOLICITED;
		if (o->opcode == IBV_WR_SEND_WITH_IMM || o->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			wr.imm_data = htonl(o->imm);
		if (o->inv)
			wr.invalidate_rkey = mw_rkey[o->inv - 1];
		if (o->qp == UD) {
			wr.wr.ud.ah = uah;
			wr.wr.ud.remote_qpn = them.ud_qpn;
			wr.wr.ud.remote_qkey = QKEY;
		} else if (o->opcode != IBV_WR_SEND && o->opcode != IBV_WR_SEND_WITH_IMM) {
			wr.wr.rdma.remote_addr = them.addr + WRITE_OFF + 64 * (uint64_t)i;
			wr.wr.rdma.rkey = o->bad_rkey ? them.rkey ^ 0x5a5a00 : them.rkey;
		}
		if (ibv_post_send(o->qp == UD ? ud : rc, &wr, &bad))
			die("ibv_post_send");
		struct ibv_wc wc = wait_one(cq);
		printf("op %2d %-58s -> %s\n", i + 1, o->what, ibv_wc_status_str(wc.status));
		if (wc.status != o->expect || wc.wr_id != (uint64_t)i)
			ok = 0;
	}
	char done_msg[5] = "done";
	full_io(fd, done_msg, sizeof(done_msg), 1);
	return ok ? 0 : 1;
}
