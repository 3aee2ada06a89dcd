/*
 * Stand-in for exec.c, for building and testing the thunk alone: it knows no
 * kernel, so every dispatch faults its queue (KFDSIM_UNKNOWN_KERNEL). The
 * build takes exec.c instead whenever that file exists.
 */
#include "kfdsim.h"

static kfdsim_executor_fn registered;

int kfdsim_exec_dispatch(const kfdsim_dispatch *d)
{
	(void)d;
	(void)registered;
	return KFDSIM_UNKNOWN_KERNEL;
}

__attribute__((visibility("default"))) void kfdsim_set_executor(kfdsim_executor_fn fn)
{
	registered = fn;
}
