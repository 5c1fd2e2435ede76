/* Exercises uroce's device list, GUID, index and sysfs emulation through the C ABI, the way
 * ibv_devices/ibv_devinfo use them. Run by tests/compat/abi-check.sh against uroce's
 * libibverbs; it checks its own results and exits non-zero on the first mismatch.
 * The struct prefix mirrors rdma-core 44's struct ibv_device (docs/compat.md §5), so a
 * layout mistake on either side shows up here. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ibv_device {
	void *ops[2];
	int node_type;
	int transport_type;
	char name[64];
	char dev_name[64];
	char dev_path[256];
	char ibdev_path[256];
};

_Static_assert(sizeof(struct ibv_device) == 664, "ibv_device size");
_Static_assert(offsetof(struct ibv_device, ibdev_path) == 408, "ibdev_path offset");

struct ibv_device **ibv_get_device_list(int *num_devices);
void ibv_free_device_list(struct ibv_device **list);
const char *ibv_get_device_name(struct ibv_device *device);
uint64_t ibv_get_device_guid(struct ibv_device *device);
int ibv_get_device_index(struct ibv_device *device);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
const char *ibv_get_sysfs_path(void);
struct ibv_context;
struct ibv_pd;
struct ibv_mr;
struct ibv_context *ibv_open_device(struct ibv_device *device);
int ibv_close_device(struct ibv_context *context);
struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
int ibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
int ibv_dereg_mr(struct ibv_mr *mr);

static int failures;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "devlist: FAIL %s:%d: ", __FILE__, \
				__LINE__);                                 \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			failures++;                                        \
		}                                                          \
	} while (0)

int main(int argc, char **argv)
{
	/* argv: expected device names, in order (devlist uroce0 uroce1); with none, the
	 * configuration is expected to be invalid and the list call to fail with EINVAL. */
	int n = -1, i;
	struct ibv_device **list;
	char buf[64];

	errno = 0;
	list = ibv_get_device_list(&n);
	if (argc == 1) {
		CHECK(list == NULL && errno == EINVAL, "bad UROCE_DEVICES accepted (errno %d)",
		      errno);
		return failures ? 1 : 0;
	}

	CHECK(list != NULL, "ibv_get_device_list: %s", strerror(errno));
	if (!list)
		return 1;
	CHECK(n == argc - 1, "num_devices %d, expected %d", n, argc - 1);
	CHECK(list[n < 0 ? 0 : n] == NULL, "list not NULL-terminated");
	for (i = 0; i < n && i + 1 < argc; i++) {
		struct ibv_device *d = list[i];
		uint64_t guid = ibv_get_device_guid(d);

		CHECK(strcmp(ibv_get_device_name(d), argv[i + 1]) == 0, "name %s != %s",
		      ibv_get_device_name(d), argv[i + 1]);
		CHECK(ibv_get_device_name(d) == d->name, "name is not the struct field");
		CHECK(d->node_type == 1 && d->transport_type == 0, "node/transport type %d/%d",
		      d->node_type, d->transport_type);
		CHECK(guid != 0, "zero GUID");
		CHECK(ibv_get_device_index(d) >= 0, "index %d", ibv_get_device_index(d));
		snprintf(buf, sizeof(buf), "/sys/class/infiniband/%s", argv[i + 1]);
		CHECK(strcmp(d->ibdev_path, buf) == 0, "ibdev_path %s", d->ibdev_path);
		CHECK(ibv_read_sysfs_file(d->ibdev_path, "board_id", buf, sizeof(buf)) == 5 &&
			      strcmp(buf, "UROCE") == 0,
		      "board_id '%s'", buf);
		CHECK(ibv_read_sysfs_file(d->ibdev_path, "no_such_attr", buf, sizeof(buf)) == -1,
		      "unknown attribute readable");
		/* A buffer too small to hold the value plus NUL fails rather than truncating. */
		CHECK(ibv_read_sysfs_file(d->ibdev_path, "board_id", buf, 3) == -1,
		      "truncated read did not fail");
		printf("%s %016llx %s\n", ibv_get_device_name(d),
		       (unsigned long long)__builtin_bswap64(guid), d->dev_name);
	}
	if (n >= 2)
		CHECK(ibv_get_device_index(list[0]) != ibv_get_device_index(list[1]),
		      "indices not unique");

	/* A PD that an MR still uses cannot be deallocated (EBUSY, PD intact), as with
	 * rdma-core's providers; once the MR is gone it can. */
	{
		static char mem[4096];
		struct ibv_context *ctx = ibv_open_device(list[0]);
		struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
		struct ibv_mr *mr = pd ? ibv_reg_mr(pd, mem, sizeof(mem), 1) : NULL;

		CHECK(ctx && pd && mr, "open/alloc_pd/reg_mr: %s", strerror(errno));
		if (mr) {
			CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc of a PD in use did not fail");
			CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
			CHECK(ibv_dealloc_pd(pd) == 0, "dealloc of an unused PD failed");
		}
		if (ctx)
			CHECK(ibv_close_device(ctx) == 0, "close_device");
	}
	ibv_free_device_list(list);

	/* Devices outlive the list, and a second list hands out the same devices. */
	{
		struct ibv_device **again = ibv_get_device_list(NULL);

		CHECK(again && again[0] && strcmp(again[0]->name, argv[1]) == 0,
		      "second list differs");
		ibv_free_device_list(again);
	}
	CHECK(strcmp(ibv_get_sysfs_path(), "/sys") == 0, "sysfs path");
	CHECK(ibv_get_device_index(NULL) == -1, "index of NULL");
	return failures ? 1 : 0;
}
