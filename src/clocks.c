/*
 * Clocks read by the library. The CPU time this backend has used, for the
 * long lane (src/gate.rs): a transaction that computed past stall_timeout
 * ran long, however briefly the worker looked at it. One clock_gettime per
 * admission and per release. And the system's monotonic clock, for times
 * one process writes to shared memory and another compares with its own.
 */
#include "postgres.h"

#include <time.h>

/* Microseconds on clock `id`; 0 if it fails. */
static int64
clock_us(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts) != 0)
		return 0;
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * Microseconds of CPU time used by this backend's thread; 0 if the clock
 * fails. The thread's clock, not the process's: a backend runs on one
 * thread, and an extension's helper threads must not make its clock run
 * ahead of the wall clock (core/src/cpu_clock.rs relies on that).
 */
int64
gk_cpu_time_us(void)
{
	return clock_us(CLOCK_THREAD_CPUTIME_ID);
}

/*
 * Microseconds on the system's monotonic clock (CLOCK_MONOTONIC: since an
 * unspecified point, the same for every process of the machine, never
 * stepped); 0 if the clock fails, which Linux's never does.
 */
int64
gk_monotonic_us(void)
{
	return clock_us(CLOCK_MONOTONIC);
}
