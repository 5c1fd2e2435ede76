/* Prints the results of libibverbs/librdmacm functions that need no device, over their whole
 * input range. tests/compat/abi-check.sh runs it once against the system rdma-core 44
 * libraries and once against uroce's (LD_LIBRARY_PATH=target/compat) and requires identical
 * output. Prototypes are declared here so that no -dev package is needed. */
#include <stdio.h>

const char *ibv_wc_status_str(int status);
const char *ibv_port_state_str(int state);
const char *ibv_node_type_str(int node_type);
const char *ibv_event_type_str(int event);
int ibv_rate_to_mult(int rate);
int mult_to_ibv_rate(int mult);
int ibv_rate_to_mbps(int rate);
int mbps_to_ibv_rate(int mbps);
const char *rdma_event_str(int event);

int main(void)
{
	int i;

	for (i = -2; i < 40; i++)
		printf("wc_status %d %s\n", i, ibv_wc_status_str(i));
	for (i = -2; i < 10; i++)
		printf("port_state %d %s\n", i, ibv_port_state_str(i));
	for (i = -2; i < 12; i++)
		printf("node_type %d %s\n", i, ibv_node_type_str(i));
	for (i = -2; i < 30; i++)
		printf("event_type %d %s\n", i, ibv_event_type_str(i));
	for (i = -2; i < 30; i++)
		printf("rate %d mult %d mbps %d back %d\n", i, ibv_rate_to_mult(i),
		       ibv_rate_to_mbps(i), mbps_to_ibv_rate(ibv_rate_to_mbps(i)));
	for (i = -2; i < 512; i++)
		printf("mult %d rate %d\n", i, mult_to_ibv_rate(i));
	printf("mbps 0 %d 1 %d 2499 %d 14063 %d\n", mbps_to_ibv_rate(0), mbps_to_ibv_rate(1),
	       mbps_to_ibv_rate(2499), mbps_to_ibv_rate(14063));
	for (i = -2; i < 20; i++)
		printf("cm_event %d %s\n", i, rdma_event_str(i));
	return 0;
}
