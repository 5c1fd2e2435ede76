/*
 * Preloaded (LD_PRELOAD) into the client of a perftest -R cell of the interop matrix, on
 * whichever side it runs (uroce's drop-in librdmacm on the host, rdma-core's in the rxe
 * guest): every rdma_connect after the first waits CONNECT_DELAY_MS (default 300) before
 * it goes out.
 *
 * Why: perftest 4.5 with -R first swaps its parameters over an rdma_cm connection of its
 * own, then connects the test QPs. Its client connects them the moment the swap ends; its
 * server creates the listener for them only after its own last SEND of the swap has been
 * acknowledged. In the emulated guest, or on a loaded host, that takes the server
 * milliseconds, which the client can beat; the server's CM then answers "no listener"
 * (REJ reason 8 for a REQ, SIDR REP status 1 for a SIDR REQ), as it must, and perftest's
 * own retry reuses the IDs it has just destroyed and cannot recover. A head start for the
 * server on the connections after the first is the least the harness can change: the CM
 * exchange, the connection and the traffic that follow are the tools' own.
 *
 * Each delayed call is reported on stderr ("connect_delay: ..."), so a cell's output says
 * when the shim acted.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct rdma_cm_id;
struct rdma_conn_param;

typedef int (*connect_fn)(struct rdma_cm_id *, struct rdma_conn_param *);

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	static connect_fn real;
	static int calls;
	const char *env;
	long ms = 300;
	struct timespec ts;

	if (!real)
		real = (connect_fn)dlsym(RTLD_NEXT, "rdma_connect");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (calls++ > 0) {
		env = getenv("CONNECT_DELAY_MS");
		if (env)
			ms = strtol(env, NULL, 10);
		if (ms > 0) {
			fprintf(stderr, "connect_delay: rdma_connect #%d waits %ld ms\n", calls, ms);
			ts.tv_sec = ms / 1000;
			ts.tv_nsec = (ms % 1000) * 1000000L;
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
	}
	return real(id, param);
}
