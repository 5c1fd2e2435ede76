/* The start and end of a C test that runs between the first two devices of the list (or
 * between two ends on one device when there is only one): open them, and at the end close
 * them and print "N checks, M failed (two devices|one device)". Include after check.h. */
#ifndef UROCE_COMPAT_TWO_DEVICES_H
#define UROCE_COMPAT_TWO_DEVICES_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "check.h"

static struct ibv_device **two_devices_list;

/* Open up to two devices into ctx; returns how many the list has (at least 1). */
static inline int open_devices(struct ibv_context *ctx[2])
{
	int n = 0;
	two_devices_list = ibv_get_device_list(&n);
	if (!two_devices_list || n < 1)
		DIE("no device");
	for (int i = 0; i < n && i < 2; i++)
		if (!(ctx[i] = ibv_open_device(two_devices_list[i])))
			DIE("open %s: %s", ibv_get_device_name(two_devices_list[i]),
			    strerror(errno));
	return n;
}

/* Close what open_devices opened, print the summary; the test's exit status. */
static inline int close_devices(struct ibv_context *ctx[2], int n)
{
	for (int i = 0; i < n && i < 2; i++)
		ibv_close_device(ctx[i]);
	ibv_free_device_list(two_devices_list);
	printf("%d checks, %d failed (%s)\n", checks, failures,
	       n > 1 ? "two devices" : "one device");
	return failures ? 1 : 0;
}

#endif
