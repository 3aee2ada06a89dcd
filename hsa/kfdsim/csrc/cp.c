/*
 * Queues and the command processor: one pthread per AQL queue that polls
 * the queue's doorbell slot (ROCr writes the packet index there) and
 * processes packets in order, as the CP firmware does:
 *
 *   - kernel dispatch: checked (dimensions, code object), then run by
 *     kfdsim_exec_dispatch (exec.c);
 *   - barrier-AND / barrier-OR: waits until all / any dependency signal is 0;
 *   - AMD vendor packets: PM4 IB (ROCr's cache flushes) and barrier-value;
 *   - then the completion signal (decrement, timestamps, and the interrupt:
 *     event id into the mailbox, waking the event's waiters), the header set
 *     back to INVALID, and the read index advanced.
 *
 * Everything the CP reads or writes on the GPU's behalf (ring slots, signals,
 * PM4 IBs) goes through kfdsim_gpu_access. A failed access, a malformed
 * packet, or a dispatch of a kernel the executor does not know stops the
 * queue, and the CP reports it the way the hardware does to a runtime
 * without the debugger interface: the error code goes into
 * amd_queue_t.queue_inactive_signal and its event is signalled; ROCr's
 * AqlQueue::DynamicScratchHandler turns it into the queue's error callback.
 * The queue processes nothing after that.
 *
 * SDMA queues get the same kind of thread running the SDMA engine (sdma.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hsa/hsa.h>
#include <hsa/amd_hsa_queue.h>
#include <hsa/amd_hsa_signal.h>
#include <hsa/hsa_ext_amd.h>

#include "kfdsim_int.h"


/* 64-bit doorbells in the 8 KiB doorbell page of each GPU. */
#define DOORBELL_SLOTS 1024


__thread kfdsim_queue *kfdsim_current_queue;

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static kfdsim_queue *queues;
static uint32_t next_queue_id = 1;
static uint8_t doorbell_used[KFDSIM_MAX_GPUS][DOORBELL_SLOTS];
/* The process is evicted on this GPU (qpd->evicted): set by a VM fault,
 * never cleared. */
static int gpu_evicted[KFDSIM_MAX_GPUS];

static void sleep_ns(long ns)
{
	struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
	nanosleep(&ts, NULL);
}

void backoff_reset(backoff *b) { b->idle = 0; }

void backoff_wait(backoff *b)
{
	uint64_t now = kfdsim_now_ns();
	if (!b->idle) {
		b->idle = 1;
		b->idle_since = now;
	}
	uint64_t idle = now - b->idle_since;
	if (idle < 200000) sleep_ns(20000);          /* first 0.2 ms: 20 us */
	else if (idle < 20000000) sleep_ns(200000);  /* up to 20 ms: 0.2 ms */
	else if (idle < 1000000000) sleep_ns(2000000); /* up to 1 s: 2 ms */
	else sleep_ns(5000000);                      /* then 5 ms */
}

int kfdsim_queue_stopping(kfdsim_queue *q)
{
	return __atomic_load_n(&q->stop, __ATOMIC_ACQUIRE);
}

int kfdsim_queue_paused(kfdsim_queue *q)
{
	return __atomic_load_n(&q->faulted, __ATOMIC_ACQUIRE) || __atomic_load_n(&q->evicted, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&q->suspended, __ATOMIC_ACQUIRE) || kfdsim_held();
}

void kfdsim_queue_fault(kfdsim_queue *q, int64_t error_code, const char *why)
{
	if (__atomic_exchange_n(&q->faulted, 1, __ATOMIC_ACQ_REL)) return; /* already stopped */
	fprintf(stderr, "kfdsim: queue %llu on GPU node %u stopped: %s (queue error %#llx)\n",
		(unsigned long long)q->id, q->node, why, (unsigned long long)error_code);
	if (q->type != HSA_QUEUE_COMPUTE_AQL || q->amd_queue == NULL) return;
	if (error_code == KFDSIM_QERR_MEMORY_VIOLATION && !kfdsim_vmfault_queue_error) return; /* evicted silently */
	uint64_t h = q->amd_queue->queue_inactive_signal.handle;
	if (h == 0) return;
	amd_signal_t *s = (amd_signal_t *)(uintptr_t)h;
	__atomic_store_n(&s->value, error_code, __ATOMIC_RELEASE);
	uint64_t mb = (uint64_t)(uintptr_t)s->event_mailbox_ptr;
	uint32_t slot_id;
	if (mb && kfdsim_is_mailbox(mb, &slot_id)) {
		__atomic_store_n((uint64_t *)(uintptr_t)mb, (uint64_t)s->event_id, __ATOMIC_RELEASE);
		kfdsim_event_fire(s->event_id);
	}
}

/* End-of-pipe interrupts raised for AQL packets: one per completion signal
 * with an event mailbox (ROCr's InterruptSignal; a GPU-only signal has
 * none), the cost a dispatch pays in interrupts and KFD event work. */
static uint64_t eop_interrupts;

__attribute__((visibility("default"))) uint64_t kfdsim_eop_interrupts(void)
{
	return __atomic_load_n(&eop_interrupts, __ATOMIC_RELAXED);
}

/* Fence scopes of the AQL packets processed, by kind (dispatch, barrier-AND,
 * barrier-OR, vendor) and scope (none, agent, system, reserved): on gfx90a
 * and gfx942 a system-scope release writes back the L2 and a system-scope
 * acquire invalidates it (LLVM AMDGPUUsage, memory models GFX90A/GFX942),
 * the cost a packet pays beyond its work. [0] acquire, [1] release. */
static uint64_t fence_scopes[2][4][4];

static void count_fences(uint16_t header)
{
	int kind;
	switch (header & 0xff) {
	case HSA_PACKET_TYPE_KERNEL_DISPATCH: kind = 0; break;
	case HSA_PACKET_TYPE_BARRIER_AND: kind = 1; break;
	case HSA_PACKET_TYPE_BARRIER_OR: kind = 2; break;
	case HSA_PACKET_TYPE_VENDOR_SPECIFIC: kind = 3; break;
	default: return;
	}
	__atomic_add_fetch(&fence_scopes[0][kind][(header >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&fence_scopes[1][kind][(header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3], 1, __ATOMIC_RELAXED);
}

/* Test hook: copies the 32 counters (acquire[kind][scope], then release)
 * into out. */
__attribute__((visibility("default"))) void kfdsim_fence_scopes(uint64_t *out)
{
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 4; k++)
			for (int sc = 0; sc < 4; sc++)
				out[i * 16 + k * 4 + sc] = __atomic_load_n(&fence_scopes[i][k][sc], __ATOMIC_RELAXED);
}

/* Completes a signal the way the CP's end-of-pipe does. Returns 0, or -1
 * after faulting the queue. */
static int complete_signal(kfdsim_queue *q, uint64_t handle, uint64_t start_ts)
{
	if (handle == 0) return 0;
	if (!kfdsim_gpu_access(q->node, handle, sizeof(amd_signal_t), true)) return -1;
	amd_signal_t *s = (amd_signal_t *)(uintptr_t)handle;
	if (s->kind != AMD_SIGNAL_KIND_USER) {
		kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_PACKET, "completion signal is not a user signal");
		return -1;
	}
	s->start_ts = start_ts;
	s->end_ts = kfdsim_now_ns();
	__atomic_fetch_sub(&s->value, 1, __ATOMIC_SEQ_CST);
	uint64_t mb = (uint64_t)(uintptr_t)__atomic_load_n(&s->event_mailbox_ptr, __ATOMIC_ACQUIRE);
	if (mb) {
		/* The CP writes the mailbox through the GPU's page tables; only a
		 * write into the events page raises the interrupt. */
		if (!kfdsim_gpu_access(q->node, mb, 8, true)) return -1;
		__atomic_store_n((uint64_t *)(uintptr_t)mb, (uint64_t)s->event_id, __ATOMIC_RELEASE);
		if (kfdsim_is_mailbox(mb, NULL)) {
			__atomic_add_fetch(&eop_interrupts, 1, __ATOMIC_RELAXED);
			kfdsim_event_fire(s->event_id);
		}
	}
	return 0;
}

/* Reads a dependency signal's value; -1 after a fault. */
static int read_signal(kfdsim_queue *q, uint64_t handle, int64_t *value)
{
	if (!kfdsim_gpu_access(q->node, handle, sizeof(amd_signal_t), false)) return -1;
	*value = __atomic_load_n(&((amd_signal_t *)(uintptr_t)handle)->value, __ATOMIC_ACQUIRE);
	return 0;
}

/* Waits for a barrier's dependencies. 0 done, -1 faulted, -2 queue stopping. */
static int wait_barrier(kfdsim_queue *q, const uint64_t deps[5], int is_or)
{
	backoff b = {0, 0};
	int any_dep = 0;
	for (int i = 0; i < 5; i++) {
		int64_t v;
		if (deps[i] == 0) continue;
		any_dep = 1;
		if (read_signal(q, deps[i], &v) != 0) return -1;
	}
	if (is_or && !any_dep) return 0;
	for (;;) {
		int zero = 0, nonzero = 0;
		for (int i = 0; i < 5; i++) {
			int64_t v;
			if (deps[i] == 0) continue;
			if (read_signal(q, deps[i], &v) != 0) return -1;
			if (v == 0) zero++;
			else nonzero++;
		}
		if (is_or ? zero > 0 : nonzero == 0) return 0;
		if (kfdsim_queue_stopping(q) || __atomic_load_n(&q->faulted, __ATOMIC_ACQUIRE)) return -2;
		backoff_wait(&b);
	}
}

/* Processes the packet in slot; returns 0 when complete (signal and all),
 * -1 when the queue faulted, -2 when it is being destroyed mid-packet. */
static int process_packet(kfdsim_queue *q, uint8_t *slot, uint16_t header)
{
	uint64_t start_ts = kfdsim_now_ns();
	uint8_t type = (uint8_t)(header & 0xff);
	uint64_t completion;
	memcpy(&completion, slot + 56, 8);
	switch (type) {
	case HSA_PACKET_TYPE_KERNEL_DISPATCH: {
		hsa_kernel_dispatch_packet_t p;
		memcpy(&p, slot, sizeof p);
		unsigned dims = p.setup & 3;
		if (dims == 0 || p.workgroup_size_x == 0 || p.workgroup_size_y == 0 || p.workgroup_size_z == 0 ||
		    p.grid_size_x == 0 || p.grid_size_y == 0 || p.grid_size_z == 0) {
			kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_DIM, "dispatch with invalid dimensions");
			return -1;
		}
		if (p.kernel_object == 0) {
			kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_CODE, "dispatch with a NULL kernel object");
			return -1;
		}
		uint64_t wg = (uint64_t)p.workgroup_size_x * p.workgroup_size_y * p.workgroup_size_z;
		if (wg > 1024) {
			kfdsim_queue_fault(q, KFDSIM_QERR_GROUP_TOO_LARGE, "workgroup of more than 1024 work-items");
			return -1;
		}
		if (p.group_segment_size > 64 * 1024) {
			kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_GROUP_MEMORY, "group segment larger than the 64 KiB of LDS");
			return -1;
		}
		/* The CP fetches the 64-byte kernel descriptor through the GPU's
		 * page tables before it launches anything. */
		if (!kfdsim_gpu_access(q->node, p.kernel_object, 64, false)) return -1;
		kfdsim_dispatch d;
		memset(&d, 0, sizeof d);
		d.gpu_node = q->node;
		d.queue_id = q->id;
		d.kernel_object = p.kernel_object;
		d.kernarg = (uint64_t)(uintptr_t)p.kernarg_address;
		d.grid[0] = p.grid_size_x;
		d.grid[1] = p.grid_size_y;
		d.grid[2] = p.grid_size_z;
		d.workgroup[0] = p.workgroup_size_x;
		d.workgroup[1] = p.workgroup_size_y;
		d.workgroup[2] = p.workgroup_size_z;
		d.group_segment_size = p.group_segment_size;
		d.private_segment_size = p.private_segment_size;
		int rc = kfdsim_exec_dispatch(&d);
		if (rc == KFDSIM_FAULT) {
			/* kfdsim_gpu_access raised the VM fault and stopped the queue. */
			kfdsim_queue_fault(q, KFDSIM_QERR_MEMORY_VIOLATION, "kernel faulted");
			return -1;
		}
		if (rc == KFDSIM_UNKNOWN_KERNEL) {
			char why[96];
			snprintf(why, sizeof why, "dispatch of a kernel the simulated GPU cannot run (kernel object %#llx)",
				 (unsigned long long)p.kernel_object);
			kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_CODE, why);
			return -1;
		}
		if (rc != KFDSIM_OK) {
			kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_CODE, "executor returned an unknown status");
			return -1;
		}
		break;
	}
	case HSA_PACKET_TYPE_BARRIER_AND:
	case HSA_PACKET_TYPE_BARRIER_OR: {
		uint64_t deps[5];
		memcpy(deps, slot + 8, sizeof deps);
		int rc = wait_barrier(q, deps, type == HSA_PACKET_TYPE_BARRIER_OR);
		if (rc != 0) return rc;
		break;
	}
	case HSA_PACKET_TYPE_VENDOR_SPECIFIC: {
		uint8_t format = slot[2];
		if (format == 1) { /* AMD_AQL_FORMAT_PM4_IB: an indirect buffer of PM4 */
			uint32_t ib[4];
			memcpy(ib, slot + 4, sizeof ib);
			uint64_t ib_addr = ((uint64_t)ib[1] & ~3ull) | ((uint64_t)(ib[2] & 0xffff) << 32);
			uint64_t ib_bytes = (uint64_t)(ib[3] & 0xfffff) * 4;
			if (ib_bytes && !kfdsim_gpu_access(q->node, ib_addr, ib_bytes, false)) return -1;
			/* The IB's PM4 (cache flushes, ROCr's only use) has no
			 * effect on a simulated GPU whose caches are coherent. */
		} else if (format == HSA_AMD_PACKET_TYPE_BARRIER_VALUE) {
			uint64_t sig;
			int64_t value, mask;
			uint32_t cond;
			memcpy(&sig, slot + 8, 8);
			memcpy(&value, slot + 16, 8);
			memcpy(&mask, slot + 24, 8);
			memcpy(&cond, slot + 32, 4);
			if (cond > HSA_SIGNAL_CONDITION_GTE) {
				kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_VENDOR, "malformed barrier-value packet");
				return -1;
			}
			/* No signal: nothing to wait for. HIP 5.7 and later queue
			 * such a packet as a marker when a command has no
			 * dependency (clr rocvirtual.cpp,
			 * VirtualGPU::dispatchBarrierValuePacket). */
			if (sig == 0) break;
			backoff b = {0, 0};
			for (;;) {
				int64_t v;
				if (read_signal(q, sig, &v) != 0) return -1;
				v &= mask;
				int met = cond == HSA_SIGNAL_CONDITION_EQ ? v == value
					: cond == HSA_SIGNAL_CONDITION_NE ? v != value
					: cond == HSA_SIGNAL_CONDITION_LT ? v < value : v >= value;
				if (met) break;
				if (kfdsim_queue_stopping(q)) return -2;
				backoff_wait(&b);
			}
		} else {
			kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_VENDOR, "unknown AMD vendor packet format");
			return -1;
		}
		break;
	}
	default:
		kfdsim_queue_fault(q, KFDSIM_QERR_INVALID_PACKET, "packet of an invalid or unsupported type");
		return -1;
	}
	return complete_signal(q, completion, start_ts);
}

static void aql_loop(kfdsim_queue *q)
{
	uint64_t slots = q->ring_bytes / 64;
	backoff b = {0, 0};
	while (!kfdsim_queue_stopping(q)) {
		if (kfdsim_queue_paused(q)) {
			backoff_wait(&b);
			continue;
		}
		uint64_t rd = __atomic_load_n(q->rptr, __ATOMIC_ACQUIRE);
		uint64_t db = __atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE);
		if ((int64_t)db < (int64_t)rd) {
			backoff_wait(&b);
			continue;
		}
		uint8_t *slot = q->ring + (rd % slots) * 64;
		if (!kfdsim_gpu_access(q->node, (uint64_t)(uintptr_t)slot, 64, false)) continue;
		uint16_t header = __atomic_load_n((uint16_t *)slot, __ATOMIC_ACQUIRE);
		if ((header & 0xff) == HSA_PACKET_TYPE_INVALID) {
			/* Rung but not yet written: the CP waits for the header. */
			backoff_wait(&b);
			continue;
		}
		backoff_reset(&b);
		KFDSIM_DEBUG("queue %llu: packet %llu type %u header %#x", (unsigned long long)q->id,
			     (unsigned long long)rd, header & 0xff, header);
		count_fences(header);
		int rc = process_packet(q, slot, header);
		if (rc != 0) continue; /* faulted (nothing more runs) or stopping */
		__atomic_store_n((uint16_t *)slot, (uint16_t)HSA_PACKET_TYPE_INVALID, __ATOMIC_RELEASE);
		if (!kfdsim_gpu_access(q->node, (uint64_t)(uintptr_t)q->rptr, 8, true)) continue;
		__atomic_store_n(q->rptr, rd + 1, __ATOMIC_RELEASE);
	}
}

static void *queue_thread(void *arg)
{
	kfdsim_queue *q = arg;
	kfdsim_current_queue = q;
	if (q->type == HSA_QUEUE_COMPUTE_AQL) aql_loop(q);
	else kfdsim_sdma_loop(q);
	kfdsim_current_queue = NULL;
	return NULL;
}

static kfdsim_queue *find_queue_locked(uint32_t id)
{
	for (kfdsim_queue *q = queues; q; q = q->next)
		if (q->id == id) return q;
	return NULL;
}

/* AMDKFD_IOC_CREATE_QUEUE. The doorbell offset returned is, as KFD's on
 * SOC15 GPUs, the mmap offset of the process's doorbell page for the GPU
 * (8 KiB, mapped by the thunk on the KFD file) plus the byte offset of the
 * queue's 64-bit doorbell inside it. */
int kfdsim_queue_create(int gpu, uint32_t queue_type, uint64_t ring, uint64_t ring_bytes, uint64_t rptr,
			uint64_t wptr, uint32_t percent, uint32_t *queue_id, uint64_t *doorbell_offset)
{
	int sdma = queue_type == KFD_IOC_QUEUE_TYPE_SDMA || queue_type == KFD_IOC_QUEUE_TYPE_SDMA_XGMI ||
		   queue_type == 4 /* KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID, KFD 1.16 */;
	if (queue_type != KFD_IOC_QUEUE_TYPE_COMPUTE_AQL && !sdma) {
		KFDSIM_DEBUG("CREATE_QUEUE type %u: not modelled", queue_type);
		return -EINVAL;
	}
	if (ring == 0 || ring_bytes < 256 || (ring_bytes & (ring_bytes - 1)) || percent > 100 || rptr == 0 || wptr == 0)
		return -EINVAL;
	uint64_t page = kfdsim_mem_doorbell_offset(gpu);
	if (page == 0) return -ENOMEM;
	kfdsim_queue *q = calloc(1, sizeof *q);
	if (q == NULL) return -ENOMEM;
	q->node = kfdsim_gpus[gpu].node;
	q->gpu_index = (uint32_t)gpu;
	q->type = sdma ? HSA_QUEUE_SDMA : HSA_QUEUE_COMPUTE_AQL;
	q->ring = (uint8_t *)(uintptr_t)ring;
	q->ring_bytes = ring_bytes;
	q->suspended = percent == 0;
	q->rptr = (volatile uint64_t *)(uintptr_t)rptr;
	q->wptr = (volatile uint64_t *)(uintptr_t)wptr;
	pthread_mutex_lock(&q_lock);
	/* A queue made while the process is evicted on the GPU is evicted too
	 * (kfd_device_queue_manager.c, create_queue_cpsch:
	 * "q->properties.is_evicted = !!qpd->evicted"). */
	q->evicted = gpu_evicted[gpu];
	int slot = -1;
	for (int i = 0; i < DOORBELL_SLOTS; i++)
		if (!doorbell_used[gpu][i]) {
			slot = i;
			break;
		}
	if (slot < 0) {
		pthread_mutex_unlock(&q_lock);
		free(q);
		return -ENOSPC;
	}
	doorbell_used[gpu][slot] = 1;
	q->doorbell_slot = slot;
	q->doorbell = kfdsim_mem_doorbell_slot(gpu, (uint32_t)slot * 8);
	q->id = next_queue_id++;
	pthread_mutex_unlock(&q_lock);
	if (!sdma) {
		q->amd_queue = (amd_queue_t *)((uint8_t *)(uintptr_t)rptr - offsetof(amd_queue_t, read_dispatch_id));
		/* No packet rung yet: the CP processes index i once doorbell >= i. */
		__atomic_store_n(q->doorbell, UINT64_MAX, __ATOMIC_RELEASE);
	} else {
		__atomic_store_n(q->doorbell, 0, __ATOMIC_RELEASE);
	}
	if (pthread_create(&q->thread, NULL, queue_thread, q) != 0) {
		pthread_mutex_lock(&q_lock);
		doorbell_used[gpu][slot] = 0;
		pthread_mutex_unlock(&q_lock);
		free(q);
		return -ENOMEM;
	}
	pthread_mutex_lock(&q_lock);
	q->next = queues;
	queues = q;
	pthread_mutex_unlock(&q_lock);
	*queue_id = q->id;
	*doorbell_offset = page | ((uint64_t)slot * 8);
	KFDSIM_DEBUG("CREATE_QUEUE %u: node %u type %u ring %#llx bytes %llu rptr %#llx wptr %#llx doorbell slot %d",
		     q->id, q->node, queue_type, (unsigned long long)ring, (unsigned long long)ring_bytes,
		     (unsigned long long)rptr, (unsigned long long)wptr, slot);
	return 0;
}

/* AMDKFD_IOC_UPDATE_QUEUE: the percentage suspends (0) or resumes a queue.
 * It does not restore an evicted queue: nothing does. */
int kfdsim_queue_update(uint32_t id, uint32_t percent)
{
	if (percent > 100) return -EINVAL;
	pthread_mutex_lock(&q_lock);
	kfdsim_queue *q = find_queue_locked(id);
	if (q) __atomic_store_n(&q->suspended, percent == 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q_lock);
	KFDSIM_DEBUG("UPDATE_QUEUE %u: %u%%", id, percent);
	return q ? 0 : -EINVAL;
}

static void stop_and_free(kfdsim_queue *q, int join)
{
	__atomic_store_n(&q->stop, 1, __ATOMIC_RELEASE);
	if (join) pthread_join(q->thread, NULL);
	pthread_mutex_lock(&q_lock);
	doorbell_used[q->gpu_index][q->doorbell_slot] = 0;
	pthread_mutex_unlock(&q_lock);
	free(q);
}

int kfdsim_queue_destroy(uint32_t id)
{
	pthread_mutex_lock(&q_lock);
	kfdsim_queue *q = NULL;
	for (kfdsim_queue **p = &queues; *p; p = &(*p)->next)
		if ((*p)->id == id) {
			q = *p;
			*p = q->next;
			break;
		}
	pthread_mutex_unlock(&q_lock);
	if (q == NULL) return -EINVAL;
	stop_and_free(q, 1);
	KFDSIM_DEBUG("DESTROY_QUEUE %u", id);
	return 0;
}

int kfdsim_queue_exists(uint32_t id)
{
	pthread_mutex_lock(&q_lock);
	kfdsim_queue *q = find_queue_locked(id);
	pthread_mutex_unlock(&q_lock);
	return q != NULL;
}

/* A VM fault, as KFD's interrupt handler takes it (amdgpu
 * kfd_int_process_v9.c, event_interrupt_wq_v9): kfd_dqm_evict_pasid evicts
 * EVERY user queue of the process on that GPU (AQL, SDMA, HIP's own; nothing
 * restores them, and queues made there later start evicted), then kfd_signal_vm_fault_event signals the process's
 * memory events. Besides, the queue whose access faulted reports the error
 * through its queue_inactive_signal (see kfdsim_queue_fault). With the evict
 * rule off ($KFDSIM_RULE_OFF=evict) only the faulting queue stops. */
void kfdsim_vm_fault(uint32_t node, uint64_t va, int write, int not_present)
{
	if (kfdsim_rule_evict) {
		int n = 0;
		pthread_mutex_lock(&q_lock);
		if (kfdsim_is_gpu_node(node)) gpu_evicted[node - 1] = 1;
		for (kfdsim_queue *q = queues; q; q = q->next)
			if (q->node == node && !__atomic_exchange_n(&q->evicted, 1, __ATOMIC_ACQ_REL)) n++;
		pthread_mutex_unlock(&q_lock);
		if (n) fprintf(stderr, "kfdsim: VM fault on GPU node %u: evicted %d user queue(s) of the process\n", node, n);
	}
	kfdsim_event_memory_fault(node, va, write, not_present);
	if (kfdsim_current_queue != NULL)
		kfdsim_queue_fault(kfdsim_current_queue, KFDSIM_QERR_MEMORY_VIOLATION, "VM fault");
}

/* Test hook: how many of the process's queues on GPU node `node` process
 * nothing any more (evicted by a VM fault, or stopped by their own fault). */
__attribute__((visibility("default"))) int kfdsim_test_stopped_queues(uint32_t node, int *total)
{
	int stopped = 0, all = 0;
	pthread_mutex_lock(&q_lock);
	for (kfdsim_queue *q = queues; q; q = q->next) {
		if (q->node != node) continue;
		all++;
		if (__atomic_load_n(&q->evicted, __ATOMIC_ACQUIRE) || __atomic_load_n(&q->faulted, __ATOMIC_ACQUIRE))
			stopped++;
	}
	pthread_mutex_unlock(&q_lock);
	if (total) *total = all;
	return stopped;
}

/* A forked child is a new KFD process: the parent's queues (whose threads
 * do not exist in the child) are not its own. */
void kfdsim_queues_reset(void)
{
	pthread_mutex_init(&q_lock, NULL);
	while (queues) {
		kfdsim_queue *q = queues;
		queues = q->next;
		free(q);
	}
	memset(doorbell_used, 0, sizeof doorbell_used);
	memset(gpu_evicted, 0, sizeof gpu_evicted);
}
