/*
 * Events: CreateEvent/DestroyEvent/SetEvent/ResetEvent/WaitOnEvent/
 * WaitOnMultipleEvents with real blocking waits, auto and manual reset,
 * timeouts, and the events page.
 *
 * Signal events get a 64-bit mailbox slot in the events page (HWData2, the
 * address ROCr stores in amd_signal_t.event_mailbox_ptr). The command
 * processor completes an interrupt signal by writing the signal's event_id
 * into that slot and raising the end-of-pipe interrupt; the interrupt
 * handler here (kfdsim_event_fire) then signals the event and wakes its
 * waiters, as KFD's does.
 *
 * Signalling follows KFD's set_event: an auto-reset event set while threads
 * wait on it activates all of them (each returns) and does not stay set; set
 * with no waiter it stays set until one wait consumes it. (ROCr relies on
 * this: hsa_queue_destroy waits on the queue event that its async-handler
 * thread is also waiting on, and both must see the set.)
 *
 * MEMORY events carry VM faults: kfdsim_event_memory_fault signals every one,
 * and a wait that returns copies the HsaMemoryAccessFault (with Flags =
 * HSA_EVENTID_MEMORY_FATAL_PROCESS) into the caller's HsaEvent, as the real
 * thunk does after the wait ioctl.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kfdsim_int.h"

#define MAX_EVENTS 4096

typedef struct sim_event {
	HsaEvent *pub; /* what the caller holds */
	uint32_t id;
	HSA_EVENTTYPE type;
	int manual_reset;
	int signaled;
	/* KFD's waiter activation: setting an auto-reset event that has
	 * waiters activates every one of them and leaves it unsignalled; with
	 * no waiters it stays signalled for the next wait to consume. */
	uint32_t nwaiters;
	uint64_t set_gen; /* bumped by each set: activates the current waiters */
	int fault_pending;
	HsaMemoryAccessFault fault;
} sim_event;

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond;
static sim_event *events[MAX_EVENTS]; /* index = event id; 0 unused */
static uint32_t next_id = 1;
static uint64_t *events_page;         /* mailbox slot per event id */
static int events_ready;
static uint64_t blocked_waits;

/* Test hook: how many event waits have gone to sleep (blocked in the
 * kernel, on real KFD) since the library was loaded. Lets a test tell a
 * wait that really blocked and was woken from one that polled. */
__attribute__((visibility("default"))) uint64_t kfdsim_test_blocked_waits(void)
{
	return __atomic_load_n(&blocked_waits, __ATOMIC_ACQUIRE);
}

void kfdsim_events_init(void)
{
	pthread_mutex_lock(&ev_lock);
	if (!events_ready) {
		pthread_condattr_t a;
		pthread_condattr_init(&a);
		pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
		pthread_cond_init(&ev_cond, &a);
		pthread_condattr_destroy(&a);
		void *p = mmap(NULL, MAX_EVENTS * sizeof(uint64_t), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		events_page = p == MAP_FAILED ? NULL : p;
		events_ready = 1;
	}
	/* KFD maps the events page into every GPU's address space: the CP and
	 * the SDMA engines write signal mailboxes there. */
	if (events_page) kfdsim_memory_add_driver_range((uint64_t)(uintptr_t)events_page, MAX_EVENTS * sizeof(uint64_t));
	pthread_mutex_unlock(&ev_lock);
}

/* Events outlive hsaKmtCloseKFD, as on real KFD, where they belong to the
 * process's KFD context (which lives as long as the process), not to the
 * /dev/kfd file descriptor: ROCr keeps pooled HsaEvents across hsa_shut_down
 * and hsa_init and uses them again. Only waiters are woken. */
void kfdsim_events_fini(void)
{
	pthread_mutex_lock(&ev_lock);
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
}

/* Whether addr is an events-page mailbox slot (the only place the CP may
 * write an event id). */
int kfdsim_is_mailbox(uint64_t addr, uint32_t *event_id)
{
	if (events_page == NULL) return 0;
	uint64_t base = (uint64_t)(uintptr_t)events_page;
	if (addr < base || addr >= base + MAX_EVENTS * sizeof(uint64_t) || (addr - base) % sizeof(uint64_t)) return 0;
	if (event_id) *event_id = (uint32_t)((addr - base) / sizeof(uint64_t));
	return 1;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtCreateEvent(HsaEventDescriptor *desc, bool manual_reset, bool signaled,
					   HsaEvent **out)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (desc == NULL || out == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	if (desc->EventType != HSA_EVENTTYPE_SIGNAL && desc->EventType != HSA_EVENTTYPE_MEMORY &&
	    desc->EventType != HSA_EVENTTYPE_HW_EXCEPTION && desc->EventType != HSA_EVENTTYPE_DEBUG_EVENT) {
		KFDSIM_DEBUG("CreateEvent type %d: NOT_SUPPORTED", desc->EventType);
		return HSAKMT_STATUS_NOT_SUPPORTED;
	}
	sim_event *e = calloc(1, sizeof *e);
	HsaEvent *pub = calloc(1, sizeof *pub);
	if (e == NULL || pub == NULL) {
		free(e);
		free(pub);
		return HSAKMT_STATUS_NO_MEMORY;
	}
	pthread_mutex_lock(&ev_lock);
	uint32_t id = 0;
	for (uint32_t tries = 0; tries < MAX_EVENTS - 1; tries++) {
		uint32_t cand = next_id;
		next_id = next_id + 1 >= MAX_EVENTS ? 1 : next_id + 1;
		if (events[cand] == NULL) {
			id = cand;
			break;
		}
	}
	if (id == 0) {
		pthread_mutex_unlock(&ev_lock);
		free(e);
		free(pub);
		return HSAKMT_STATUS_OUT_OF_RESOURCES;
	}
	e->pub = pub;
	e->id = id;
	e->type = desc->EventType;
	e->manual_reset = manual_reset;
	e->signaled = signaled;
	pub->EventId = id;
	pub->EventData.EventType = desc->EventType;
	pub->EventData.HWData1 = id;
	if (desc->EventType == HSA_EVENTTYPE_SIGNAL && events_page) {
		events_page[id] = 0;
		pub->EventData.HWData2 = (HSAuint64)(uintptr_t)&events_page[id];
	}
	pub->EventData.HWData3 = id;
	if (desc->EventType == HSA_EVENTTYPE_SIGNAL) pub->EventData.EventData.SyncVar = desc->SyncVar;
	events[id] = e;
	pthread_mutex_unlock(&ev_lock);
	*out = pub;
	KFDSIM_DEBUG("CreateEvent id %u type %d %s", id, desc->EventType, manual_reset ? "manual-reset" : "auto-reset");
	return HSAKMT_STATUS_SUCCESS;
}

static sim_event *lookup_locked(HsaEvent *pub)
{
	if (pub == NULL || pub->EventId == 0 || pub->EventId >= MAX_EVENTS) return NULL;
	sim_event *e = events[pub->EventId];
	return e && e->pub == pub ? e : NULL;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtDestroyEvent(HsaEvent *pub)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	pthread_mutex_lock(&ev_lock);
	sim_event *e = lookup_locked(pub);
	if (e == NULL) {
		pthread_mutex_unlock(&ev_lock);
		return HSAKMT_STATUS_INVALID_HANDLE;
	}
	events[e->id] = NULL;
	if (events_page) events_page[e->id] = 0;
	/* Waiters on it return INVALID_HANDLE instead of sleeping on. */
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
	free(e->pub);
	free(e);
	return HSAKMT_STATUS_SUCCESS;
}

/* KFD's set_event; caller holds ev_lock. */
static void set_locked(sim_event *e)
{
	e->signaled = !(!e->manual_reset && e->nwaiters > 0);
	e->set_gen++;
	pthread_cond_broadcast(&ev_cond);
}

/* hsaKmtSetEvent (set) and hsaKmtResetEvent (!set). */
static HSAKMT_STATUS set_or_reset(HsaEvent *pub, int set)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	pthread_mutex_lock(&ev_lock);
	sim_event *e = lookup_locked(pub);
	if (e == NULL) {
		pthread_mutex_unlock(&ev_lock);
		return HSAKMT_STATUS_INVALID_HANDLE;
	}
	if (set)
		set_locked(e);
	else
		e->signaled = 0;
	pthread_mutex_unlock(&ev_lock);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtSetEvent(HsaEvent *pub) { return set_or_reset(pub, 1); }

HSAKMT_STATUS HSAKMTAPI hsaKmtResetEvent(HsaEvent *pub) { return set_or_reset(pub, 0); }

HSAKMT_STATUS HSAKMTAPI hsaKmtQueryEventState(HsaEvent *pub)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	pthread_mutex_lock(&ev_lock);
	sim_event *e = lookup_locked(pub);
	int sig = e ? e->signaled : 0;
	pthread_mutex_unlock(&ev_lock);
	if (e == NULL) return HSAKMT_STATUS_INVALID_HANDLE;
	return sig ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_WAIT_TIMEOUT;
}

void kfdsim_event_fire(uint32_t id)
{
	pthread_mutex_lock(&ev_lock);
	if (id > 0 && id < MAX_EVENTS && events[id]) set_locked(events[id]);
	pthread_mutex_unlock(&ev_lock);
}

void kfdsim_event_memory_fault(uint32_t node, uint64_t va, int write, int not_present)
{
	(void)write;
	pthread_mutex_lock(&ev_lock);
	int n = 0;
	for (uint32_t i = 1; i < MAX_EVENTS; i++) {
		sim_event *e = events[i];
		if (e == NULL || e->type != HSA_EVENTTYPE_MEMORY) continue;
		memset(&e->fault, 0, sizeof e->fault);
		e->fault.NodeId = node;
		e->fault.VirtualAddress = va;
		e->fault.Failure.NotPresent = not_present ? 1 : 0;
		e->fault.Failure.ReadOnly = not_present ? 0 : 1;
		e->fault.Flags = HSA_EVENTID_MEMORY_FATAL_PROCESS;
		e->fault_pending = 1;
		set_locked(e);
		n++;
	}
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
	KFDSIM_DEBUG("VM fault node %u va %#llx: signalled %d memory event(s)", node, (unsigned long long)va, n);
}

HSAKMT_STATUS HSAKMTAPI hsaKmtWaitOnMultipleEvents(HsaEvent *list[], HSAuint32 n, bool all, HSAuint32 ms)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (list == NULL || n == 0 || n > MAX_EVENTS) return HSAKMT_STATUS_INVALID_PARAMETER;
	uint32_t ids[n];
	for (HSAuint32 i = 0; i < n; i++) {
		if (list[i] == NULL) return HSAKMT_STATUS_INVALID_HANDLE;
		ids[i] = list[i]->EventId;
	}
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	if (ms != HSA_EVENTTIMEOUT_INFINITE) {
		deadline.tv_sec += ms / 1000;
		deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&ev_lock);
	/* KFD's init_event_waiter: a signalled event activates the waiter at
	 * once, and an auto-reset one is consumed by it. */
	int activated[n];
	uint64_t gen[n];
	for (HSAuint32 i = 0; i < n; i++) {
		sim_event *e = ids[i] < MAX_EVENTS ? events[ids[i]] : NULL;
		if (e == NULL || e->pub != list[i]) {
			for (HSAuint32 j = 0; j < i; j++) events[ids[j]]->nwaiters--;
			pthread_mutex_unlock(&ev_lock);
			return HSAKMT_STATUS_INVALID_HANDLE;
		}
		activated[i] = e->signaled;
		if (!e->manual_reset) e->signaled = 0;
		gen[i] = e->set_gen;
		e->nwaiters++;
	}
	HSAKMT_STATUS result = HSAKMT_STATUS_WAIT_TIMEOUT;
	for (;;) {
		HSAuint32 nact = 0;
		int gone = 0;
		for (HSAuint32 i = 0; i < n; i++) {
			sim_event *e = events[ids[i]];
			if (e == NULL || e->pub != list[i]) {
				gone = 1;
				break;
			}
			if (!activated[i] && (e->set_gen != gen[i] || (e->manual_reset && e->signaled))) activated[i] = 1;
			if (activated[i]) nact++;
		}
		if (gone) {
			result = HSAKMT_STATUS_INVALID_HANDLE; /* destroyed while waited on */
			break;
		}
		if (all ? nact == n : nact > 0) {
			for (HSAuint32 i = 0; i < n; i++) {
				sim_event *e = events[ids[i]];
				if (e->type == HSA_EVENTTYPE_MEMORY && e->fault_pending) {
					e->pub->EventData.EventData.MemoryAccessFault = e->fault;
					e->fault_pending = 0;
				}
			}
			result = HSAKMT_STATUS_SUCCESS;
			break;
		}
		if (ms == 0) break;
		__atomic_fetch_add(&blocked_waits, 1, __ATOMIC_RELEASE);
		int rc = ms == HSA_EVENTTIMEOUT_INFINITE ? pthread_cond_wait(&ev_cond, &ev_lock)
							  : pthread_cond_timedwait(&ev_cond, &ev_lock, &deadline);
		if (rc == ETIMEDOUT) break;
	}
	for (HSAuint32 i = 0; i < n; i++) {
		sim_event *e = events[ids[i]];
		if (e != NULL && e->pub == list[i] && e->nwaiters > 0) e->nwaiters--;
	}
	pthread_mutex_unlock(&ev_lock);
	return result;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtWaitOnEvent(HsaEvent *e, HSAuint32 ms)
{
	return hsaKmtWaitOnMultipleEvents(&e, 1, true, ms);
}
