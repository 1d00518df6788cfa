/*
 * The CPU time this backend has used, for the long lane (src/gate.rs): a
 * transaction that computed past stall_timeout ran long, however briefly
 * the worker looked at it. One clock_gettime per admission and per
 * release.
 */
#include "postgres.h"

#include <time.h>

/* Microseconds of CPU time used by this process; 0 if the clock fails. */
int64
gk_cpu_time_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
