/*
 * Holding the simulated GPU: kfdsim_hold stops every command processor (AQL
 * and SDMA) before its next packet until a matching kfdsim_release. Tests
 * use it to keep work pending while the host submits behind it, the way a
 * real GPU stays busy behind a fast host: a crossing then always finds its
 * producer unfinished, so the number of waits it costs is exact rather than
 * a race between the host and the simulated GPU. A packet already being
 * processed finishes; holds nest.
 */
#include "kfdsim_int.h"

static int hold_count;

__attribute__((visibility("default"))) void kfdsim_hold(void)
{
	__atomic_add_fetch(&hold_count, 1, __ATOMIC_SEQ_CST);
}

/* Returns the holds left, or -1 (changing nothing) when none was held: an
 * unmatched release is the caller's bug, never a wrap-around. */
__attribute__((visibility("default"))) int kfdsim_release(void)
{
	int cur = __atomic_load_n(&hold_count, __ATOMIC_SEQ_CST);
	while (cur > 0) {
		if (__atomic_compare_exchange_n(&hold_count, &cur, cur - 1, false, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			return cur - 1;
	}
	return -1;
}

int kfdsim_held(void)
{
	return __atomic_load_n(&hold_count, __ATOMIC_ACQUIRE) > 0;
}
