/*
 * Test harness for exec.c: stands in for the thunk's memory records
 * (kfdsim_lookup, kfdsim_gpu_access) so the executor can be tested on its
 * own, in the test process, with allocations the test registers and maps.
 * Built by exec_test.go together with csrc/exec.c.
 */
#include "kfdsim.h"

#include <stddef.h>
#include <string.h>

#define MAX_ALLOCS 64

static kfdsim_alloc allocs[MAX_ALLOCS];
static int nallocs;
static uint64_t faults, last_fault;

void harness_reset(void)
{
	nallocs = 0;
	faults = 0;
	last_fault = 0;
	kfdsim_set_executor(NULL);
}

int harness_add_alloc(uint64_t base, uint64_t size, uint64_t mapped_mask)
{
	if (nallocs == MAX_ALLOCS)
		return -1;
	allocs[nallocs] = (kfdsim_alloc){ base, size, 0, mapped_mask, 0 };
	return nallocs++;
}

void harness_set_mapped(int i, uint64_t mapped_mask)
{
	allocs[i].mapped_mask = mapped_mask;
}

uint64_t harness_faults(void) { return faults; }
uint64_t harness_last_fault(void) { return last_fault; }

bool kfdsim_lookup(uint64_t addr, kfdsim_alloc *out)
{
	for (int i = 0; i < nallocs; i++) {
		if (addr >= allocs[i].base && addr - allocs[i].base < allocs[i].size) {
			*out = allocs[i];
			return true;
		}
	}
	return false;
}

bool kfdsim_gpu_access(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write)
{
	(void)write;
	kfdsim_alloc a;
	if (kfdsim_lookup(addr, &a) && size <= a.size - (addr - a.base) && gpu_node < 64 &&
	    (a.mapped_mask & (1ull << gpu_node)))
		return true;
	faults++;
	last_fault = addr;
	return false;
}

/* The harness's memory is at its GPU address: the check is the translation. */
void *kfdsim_gpu_ptr(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write)
{
	return kfdsim_gpu_access(gpu_node, addr, size, write) ? (void *)(uintptr_t)addr : NULL;
}

int harness_dispatch(uint32_t node, uint64_t kernel_object, uint64_t kernarg, uint32_t gx,
		     uint32_t gy, uint32_t gz, uint32_t wx, uint32_t wy, uint32_t wz)
{
	kfdsim_dispatch d = { node, 7, kernel_object, kernarg, { gx, gy, gz },
			      { (uint16_t)wx, (uint16_t)wy, (uint16_t)wz }, 0, 0 };
	return kfdsim_exec_dispatch(&d);
}

/* A recording executor, for the naming tests. */
static char recorded_name[256];
static uint64_t recorded_base, recorded_size, recorded_calls;
static int recording_result;

static int record(const kfdsim_kernel_call *c)
{
	strncpy(recorded_name, c->name, sizeof recorded_name - 1);
	recorded_base = c->image_base;
	recorded_size = c->image_size;
	recorded_calls++;
	return recording_result;
}

void harness_use_recorder(int result)
{
	recording_result = result;
	recorded_calls = 0;
	recorded_name[0] = 0;
	kfdsim_set_executor(record);
}

const char *harness_recorded(uint64_t *base, uint64_t *size, uint64_t *calls)
{
	*base = recorded_base;
	*size = recorded_size;
	*calls = recorded_calls;
	return recorded_name;
}

/* offsetof of the structures the Go executor reads. */
void harness_layout(uint64_t *out)
{
	out[0] = offsetof(kfdsim_kernel_call, name);
	out[1] = offsetof(kfdsim_kernel_call, image_base);
	out[2] = offsetof(kfdsim_kernel_call, image_size);
	out[3] = offsetof(kfdsim_kernel_call, dispatch);
	out[4] = offsetof(kfdsim_dispatch, gpu_node);
	out[5] = offsetof(kfdsim_dispatch, queue_id);
	out[6] = offsetof(kfdsim_dispatch, kernel_object);
	out[7] = offsetof(kfdsim_dispatch, kernarg);
	out[8] = offsetof(kfdsim_dispatch, grid);
	out[9] = offsetof(kfdsim_dispatch, workgroup);
}
