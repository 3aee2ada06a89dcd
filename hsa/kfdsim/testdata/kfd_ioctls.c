/*
 * The simulated KFD driven by raw ioctls, as the thunks of ROCm 6.x issue
 * them (run with KFDSIM_ROCM=6.4): AVAILABLE_MEMORY follows VRAM
 * allocations, the event age of KFD 1.14 (a waiter that passes an age it
 * has not seen returns at once; one that passes the current age waits),
 * and CREATE_QUEUE in both sizes (0xc0584b02, and 0xc0604b02 with
 * sdma_engine_id). Prints "ok" and exits 0, or names what failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../csrc/kfd_uapi.h"

#define IOWR(nr, type) _IOWR(AMDKFD_IOCTL_BASE, nr, type)
#define IOW(nr, type) _IOW(AMDKFD_IOCTL_BASE, nr, type)

struct create_queue_v2 {
	struct kfd_ioctl_create_queue_args v1;
	uint32_t sdma_engine_id, pad;
};

static int fail(const char *what)
{
	printf("FAIL: %s (errno %d)\n", what, errno);
	return 1;
}

int main(void)
{
	int kfd = open("/dev/kfd", O_RDWR | O_CLOEXEC);
	if (kfd < 0) return fail("open /dev/kfd");
	FILE *f = fopen("/sys/devices/virtual/kfd/kfd/topology/nodes/1/gpu_id", "r");
	unsigned gpu_id = 0;
	if (f == NULL || fscanf(f, "%u", &gpu_id) != 1) return fail("gpu_id");
	fclose(f);
	struct kfd_ioctl_get_version_args ver = {0};
	if (ioctl(kfd, IOWR(KFD_NR_GET_VERSION, struct kfd_ioctl_get_version_args), &ver) != 0 ||
	    ver.major_version != 1 || ver.minor_version < 14)
		return fail("GET_VERSION 1.14+ for ROCm 6.4");

	/* A VA range the "thunk" reserved. */
	size_t span = 64 << 20;
	uint8_t *va = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED) return fail("reserve");

	struct kfd_ioctl_get_available_memory_args avail = {.gpu_id = gpu_id};
	if (ioctl(kfd, IOWR(KFD_NR_AVAILABLE_MEMORY, struct kfd_ioctl_get_available_memory_args), &avail) != 0)
		return fail("AVAILABLE_MEMORY");
	uint64_t before = avail.available;
	struct kfd_ioctl_alloc_memory_of_gpu_args vram = {
		.va_addr = (uint64_t)(uintptr_t)va, .size = 16 << 20, .gpu_id = gpu_id,
		.flags = KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE};
	if (ioctl(kfd, IOWR(KFD_NR_ALLOC_MEMORY_OF_GPU, struct kfd_ioctl_alloc_memory_of_gpu_args), &vram) != 0)
		return fail("ALLOC VRAM");
	if (ioctl(kfd, IOWR(KFD_NR_AVAILABLE_MEMORY, struct kfd_ioctl_get_available_memory_args), &avail) != 0 ||
	    avail.available != before - (16 << 20))
		return fail("AVAILABLE_MEMORY after a 16 MiB VRAM allocation");

	/* The events page, then a signal event. */
	struct kfd_ioctl_alloc_memory_of_gpu_args page = {
		.va_addr = (uint64_t)(uintptr_t)(va + (32 << 20)), .size = 4096 * 8, .gpu_id = gpu_id,
		.flags = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE};
	if (ioctl(kfd, IOWR(KFD_NR_ALLOC_MEMORY_OF_GPU, struct kfd_ioctl_alloc_memory_of_gpu_args), &page) != 0)
		return fail("ALLOC events page");
	struct kfd_ioctl_create_event_args ev = {.event_page_offset = page.handle, .event_type = KFD_IOC_EVENT_SIGNAL,
						 .auto_reset = 1};
	if (ioctl(kfd, IOWR(KFD_NR_CREATE_EVENT, struct kfd_ioctl_create_event_args), &ev) != 0)
		return fail("CREATE_EVENT");
	struct kfd_event_data data;
	struct kfd_ioctl_wait_events_args wait = {.events_ptr = (uint64_t)(uintptr_t)&data, .num_events = 1,
						  .wait_for_all = 1, .timeout = 0};
	/* Age 0: no age; unsignalled, so a zero-timeout wait times out and
	 * reports the current age. */
	memset(&data, 0, sizeof data);
	data.event_id = ev.event_id;
	if (ioctl(kfd, IOWR(KFD_NR_WAIT_EVENTS, struct kfd_ioctl_wait_events_args), &wait) != 0 ||
	    wait.wait_result != KFD_IOC_WAIT_RESULT_TIMEOUT || data.last_event_age == 0)
		return fail("WAIT_EVENTS on an unsignalled event");
	uint64_t age = data.last_event_age;
	/* The current age: still nothing to see. */
	data.last_event_age = age;
	if (ioctl(kfd, IOWR(KFD_NR_WAIT_EVENTS, struct kfd_ioctl_wait_events_args), &wait) != 0 ||
	    wait.wait_result != KFD_IOC_WAIT_RESULT_TIMEOUT)
		return fail("WAIT_EVENTS with the current age returned");
	/* A set, consumed by a plain wait: the event is unsignalled again, but
	 * its age moved on, so a waiter still holding the old age returns. */
	struct kfd_ioctl_set_event_args set = {.event_id = ev.event_id};
	if (ioctl(kfd, IOW(KFD_NR_SET_EVENT, struct kfd_ioctl_set_event_args), &set) != 0) return fail("SET_EVENT");
	memset(&data, 0, sizeof data);
	data.event_id = ev.event_id;
	if (ioctl(kfd, IOWR(KFD_NR_WAIT_EVENTS, struct kfd_ioctl_wait_events_args), &wait) != 0 ||
	    wait.wait_result != KFD_IOC_WAIT_RESULT_COMPLETE)
		return fail("WAIT_EVENTS after SET_EVENT");
	memset(&data, 0, sizeof data);
	data.event_id = ev.event_id;
	data.last_event_age = age;
	if (ioctl(kfd, IOWR(KFD_NR_WAIT_EVENTS, struct kfd_ioctl_wait_events_args), &wait) != 0 ||
	    wait.wait_result != KFD_IOC_WAIT_RESULT_COMPLETE || data.last_event_age == age)
		return fail("WAIT_EVENTS with a stale age did not return at once");

	/* Queues of both CREATE_QUEUE sizes, on a ring and pointers in GTT. */
	struct kfd_ioctl_alloc_memory_of_gpu_args ring = {
		.va_addr = (uint64_t)(uintptr_t)(va + (40 << 20)), .size = 1 << 20, .gpu_id = gpu_id,
		.flags = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE};
	if (ioctl(kfd, IOWR(KFD_NR_ALLOC_MEMORY_OF_GPU, struct kfd_ioctl_alloc_memory_of_gpu_args), &ring) != 0)
		return fail("ALLOC ring");
	uint64_t base = ring.va_addr;
	struct kfd_ioctl_create_queue_args q1 = {.ring_base_address = base, .ring_size = 4096,
						 .read_pointer_address = base + 0x80000,
						 .write_pointer_address = base + 0x80008, .gpu_id = gpu_id,
						 .queue_type = KFD_IOC_QUEUE_TYPE_SDMA, .queue_percentage = 100};
	if (ioctl(kfd, IOWR(KFD_NR_CREATE_QUEUE, struct kfd_ioctl_create_queue_args), &q1) != 0)
		return fail("CREATE_QUEUE (88 bytes)");
	struct create_queue_v2 q2 = {.v1 = q1, .sdma_engine_id = 1};
	q2.v1.ring_base_address = base + 4096;
	q2.v1.read_pointer_address = base + 0x80040;
	q2.v1.write_pointer_address = base + 0x80048;
	q2.v1.queue_type = KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID;
	if (ioctl(kfd, IOWR(KFD_NR_CREATE_QUEUE, struct create_queue_v2), &q2) != 0)
		return fail("CREATE_QUEUE (96 bytes, sdma_engine_id)");
	if (q2.v1.queue_id == q1.queue_id || q2.v1.doorbell_offset == q1.doorbell_offset)
		return fail("two queues share an id or a doorbell");
	struct kfd_ioctl_destroy_queue_args d1 = {.queue_id = q1.queue_id}, d2 = {.queue_id = q2.v1.queue_id};
	if (ioctl(kfd, IOWR(KFD_NR_DESTROY_QUEUE, struct kfd_ioctl_destroy_queue_args), &d1) != 0 ||
	    ioctl(kfd, IOWR(KFD_NR_DESTROY_QUEUE, struct kfd_ioctl_destroy_queue_args), &d2) != 0)
		return fail("DESTROY_QUEUE");
	printf("ok\n");
	return 0;
}
