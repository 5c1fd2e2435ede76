/* What the C tests of the drop-in libraries share: CHECK (count a check, report a failure
 * and go on), DIE (report and exit 2) and a monotonic clock. Define TEST_NAME (a string)
 * before including; every check failure is printed as "NAME: FAIL line N: ...". */
#ifndef UROCE_COMPAT_CHECK_H
#define UROCE_COMPAT_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int failures, checks;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		checks++;                                                 \
		if (!(cond)) {                                            \
			fprintf(stderr, TEST_NAME ": FAIL line %d: ", __LINE__); \
			fprintf(stderr, __VA_ARGS__);                     \
			fprintf(stderr, "\n");                            \
			failures++;                                       \
		}                                                         \
	} while (0)

#define DIE(...)                                             \
	do {                                                 \
		fprintf(stderr, TEST_NAME ": FATAL: " __VA_ARGS__); \
		fprintf(stderr, "\n");                       \
		exit(2);                                     \
	} while (0)

static inline double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

#endif
