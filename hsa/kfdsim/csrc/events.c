/*
 * Events: AMDKFD_IOC_CREATE/DESTROY/SET/RESET_EVENT and WAIT_EVENTS with real
 * blocking waits, auto and manual reset, timeouts, the events page, VM-fault
 * data, and the event age of KFD interface 1.14.
 *
 * Signal events get a 64-bit mailbox slot in the events page: on a dGPU the
 * thunk allocates that page itself (a GTT BO mapped to every GPU) and hands
 * its handle to the first CREATE_EVENT; the slot index is the event id
 * (kfd_events.c, create_signal_event). The thunk stores the slot's address in
 * HWData2, which ROCr puts into amd_signal_t.event_mailbox_ptr. The command
 * processor completes an interrupt signal by writing the signal's event_id
 * into that slot and raising the end-of-pipe interrupt; the interrupt handler
 * here (kfdsim_event_fire) then signals the event and wakes its waiters, as
 * KFD's does.
 *
 * Signalling follows KFD's set_event: an auto-reset event set while threads
 * wait on it activates all of them (each returns) and does not stay set; set
 * with no waiter it stays set until one wait consumes it. (ROCr relies on
 * this: hsa_queue_destroy waits on the queue event that its async-handler
 * thread is also waiting on, and both must see the set.)
 *
 * Event age (KFD 1.14, kfd_events.c): every set of a signal event bumps its
 * age; a waiter that passes a non-zero last_event_age different from the
 * current age is activated at once, and WAIT_EVENTS returns the age, so a
 * thunk that polled a mailbox and then waits cannot miss a set in between.
 * Thunks before 1.14 pass zero and see the plain behaviour.
 *
 * MEMORY events carry VM faults: kfdsim_event_memory_fault signals every one,
 * and a wait that returns fills memory_exception_data (gpu_id, va, failure),
 * as KFD's kfd_signal_vm_fault_event does.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kfdsim_int.h"

#define SIGNAL_EVENT_LIMIT 4096      /* KFD_SIGNAL_EVENT_LIMIT: slots of the events page */
#define MAX_EVENTS 8192              /* ids >= SIGNAL_EVENT_LIMIT: other event types */

typedef struct sim_event {
	uint32_t id;
	uint32_t type;   /* KFD_IOC_EVENT_* */
	int auto_reset;
	int signaled;
	/* KFD's waiter activation: setting an auto-reset event that has
	 * waiters activates every one of them and leaves it unsignalled; with
	 * no waiter it stays signalled for the next wait to consume. */
	uint32_t nwaiters;
	uint64_t set_gen; /* bumped by each set: activates the current waiters */
	uint64_t age;     /* KFD 1.14 event age: starts at 1, bumped by each set */
	int fault_pending;
	struct kfd_hsa_memory_exception_data fault;
} sim_event;

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond;
static int ev_cond_ready;
static sim_event *events[MAX_EVENTS]; /* index = event id; 0 unused */
static uint32_t next_signal_id = 1, next_other_id = SIGNAL_EVENT_LIMIT;
static uint64_t *events_page;         /* mailbox slot per signal event id */
static uint64_t blocked_waits;

/* Test hook: how many event waits have gone to sleep (blocked in the
 * kernel, on real KFD) since the library was loaded. Lets a test tell a
 * wait that really blocked and was woken from one that polled. */
__attribute__((visibility("default"))) uint64_t kfdsim_test_blocked_waits(void)
{
	return __atomic_load_n(&blocked_waits, __ATOMIC_ACQUIRE);
}

static void ensure_cond_locked(void)
{
	if (ev_cond_ready) return;
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&ev_cond, &a);
	pthread_condattr_destroy(&a);
	ev_cond_ready = 1;
}

/* A forked child is a new KFD process with no events. */
void kfdsim_events_reset(void)
{
	pthread_mutex_init(&ev_lock, NULL);
	ev_cond_ready = 0;
	for (uint32_t i = 0; i < MAX_EVENTS; i++) {
		free(events[i]);
		events[i] = NULL;
	}
	events_page = NULL;
	next_signal_id = 1;
	next_other_id = SIGNAL_EVENT_LIMIT;
}

/* Whether addr is an events-page mailbox slot (the only place the CP's
 * write raises an interrupt). */
int kfdsim_is_mailbox(uint64_t addr, uint32_t *event_id)
{
	uint64_t *page = __atomic_load_n(&events_page, __ATOMIC_ACQUIRE);
	if (page == NULL) return 0;
	uint64_t base = (uint64_t)(uintptr_t)page;
	if (addr < base || addr >= base + SIGNAL_EVENT_LIMIT * sizeof(uint64_t) || (addr - base) % sizeof(uint64_t))
		return 0;
	if (event_id) *event_id = (uint32_t)((addr - base) / sizeof(uint64_t));
	return 1;
}

int kfdsim_event_create(struct kfd_ioctl_create_event_args *a)
{
	uint32_t type = a->event_type;
	if (type != KFD_IOC_EVENT_SIGNAL && type != KFD_IOC_EVENT_MEMORY && type != KFD_IOC_EVENT_HW_EXCEPTION &&
	    type != KFD_IOC_EVENT_DEBUG_EVENT && type != KFD_IOC_EVENT_NODECHANGE &&
	    type != KFD_IOC_EVENT_DEVICESTATECHANGE && type != KFD_IOC_EVENT_SYSTEM_EVENT &&
	    type != KFD_IOC_EVENT_QUEUE_EVENT && type != KFD_IOC_EVENT_PROFILE_EVENT)
		return -EINVAL;
	sim_event *e = calloc(1, sizeof *e);
	if (e == NULL) return -ENOMEM;
	pthread_mutex_lock(&ev_lock);
	ensure_cond_locked();
	if (a->event_page_offset && events_page == NULL) {
		/* kfd_event_page_set: the thunk's BO becomes the events page. */
		uint64_t size = 0;
		uint64_t va = kfdsim_mem_handle_va(a->event_page_offset, &size);
		if (va == 0 || size < SIGNAL_EVENT_LIMIT * sizeof(uint64_t)) {
			pthread_mutex_unlock(&ev_lock);
			free(e);
			return -EINVAL;
		}
		__atomic_store_n(&events_page, (uint64_t *)(uintptr_t)va, __ATOMIC_RELEASE);
	}
	uint32_t id = 0;
	if (type == KFD_IOC_EVENT_SIGNAL || type == KFD_IOC_EVENT_DEBUG_EVENT) {
		if (events_page == NULL) {
			/* KFD would allocate its own page; dGPU thunks always pass one. */
			pthread_mutex_unlock(&ev_lock);
			free(e);
			return -EINVAL;
		}
		for (uint32_t tries = 0; tries < SIGNAL_EVENT_LIMIT - 1 && id == 0; tries++) {
			uint32_t cand = next_signal_id;
			next_signal_id = next_signal_id + 1 >= SIGNAL_EVENT_LIMIT ? 1 : next_signal_id + 1;
			if (events[cand] == NULL) id = cand;
		}
	} else {
		for (uint32_t tries = 0; tries < MAX_EVENTS - SIGNAL_EVENT_LIMIT && id == 0; tries++) {
			uint32_t cand = next_other_id;
			next_other_id = next_other_id + 1 >= MAX_EVENTS ? SIGNAL_EVENT_LIMIT : next_other_id + 1;
			if (events[cand] == NULL) id = cand;
		}
	}
	if (id == 0) {
		pthread_mutex_unlock(&ev_lock);
		free(e);
		return -ENOSPC;
	}
	e->id = id;
	e->type = type;
	e->auto_reset = a->auto_reset != 0;
	e->age = 1;
	events[id] = e;
	a->event_id = id;
	a->event_trigger_data = id;
	if (id < SIGNAL_EVENT_LIMIT) {
		events_page[id] = 0;
		a->event_slot_index = id;
		a->event_page_offset = 1; /* non-zero: the slot is valid */
	} else {
		a->event_slot_index = 0;
		a->event_page_offset = 0;
	}
	pthread_mutex_unlock(&ev_lock);
	KFDSIM_DEBUG("CREATE_EVENT id %u type %u %s", id, type, e->auto_reset ? "auto-reset" : "manual-reset");
	return 0;
}

int kfdsim_event_destroy(uint32_t id)
{
	pthread_mutex_lock(&ev_lock);
	sim_event *e = id < MAX_EVENTS ? events[id] : NULL;
	if (e == NULL) {
		pthread_mutex_unlock(&ev_lock);
		return -EINVAL;
	}
	events[id] = NULL;
	if (events_page && id < SIGNAL_EVENT_LIMIT) events_page[id] = 0;
	/* Waiters on it return an error instead of sleeping on. */
	if (ev_cond_ready) pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
	free(e);
	return 0;
}

/* KFD's set_event; caller holds ev_lock. */
static void set_locked(sim_event *e)
{
	e->signaled = !(e->auto_reset && e->nwaiters > 0);
	e->set_gen++;
	e->age++;
	if (ev_cond_ready) pthread_cond_broadcast(&ev_cond);
}

int kfdsim_event_set(uint32_t id, int set)
{
	pthread_mutex_lock(&ev_lock);
	sim_event *e = id < MAX_EVENTS ? events[id] : NULL;
	if (e == NULL) {
		pthread_mutex_unlock(&ev_lock);
		return -EINVAL;
	}
	if (set)
		set_locked(e);
	else
		e->signaled = 0;
	pthread_mutex_unlock(&ev_lock);
	return 0;
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
	uint32_t gpu_id = kfdsim_is_gpu_node(node) ? kfdsim_gpus[node - 1].gpu_id : 0;
	pthread_mutex_lock(&ev_lock);
	int n = 0;
	for (uint32_t i = 1; i < MAX_EVENTS; i++) {
		sim_event *e = events[i];
		if (e == NULL || e->type != KFD_IOC_EVENT_MEMORY) continue;
		memset(&e->fault, 0, sizeof e->fault);
		e->fault.gpu_id = gpu_id;
		e->fault.va = va;
		e->fault.failure.NotPresent = not_present ? 1 : 0;
		e->fault.failure.ReadOnly = not_present ? 0 : 1;
		e->fault_pending = 1;
		set_locked(e);
		n++;
	}
	if (ev_cond_ready) pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
	KFDSIM_DEBUG("VM fault node %u va %#llx: signalled %d memory event(s)", node, (unsigned long long)va, n);
}

int kfdsim_event_wait(struct kfd_ioctl_wait_events_args *a)
{
	uint32_t n = a->num_events;
	uint32_t ms = a->timeout;
	struct kfd_event_data *data = (struct kfd_event_data *)(uintptr_t)a->events_ptr;
	if (n == 0 || n > MAX_EVENTS || data == NULL) return -EINVAL;
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	if (ms != 0xffffffffu) {
		deadline.tv_sec += ms / 1000;
		deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	uint32_t *ids = malloc(n * sizeof *ids);
	int *activated = malloc(n * sizeof *activated);
	uint64_t *gen = malloc(n * sizeof *gen);
	if (!ids || !activated || !gen) {
		free(ids);
		free(activated);
		free(gen);
		return -ENOMEM;
	}
	pthread_mutex_lock(&ev_lock);
	ensure_cond_locked();
	/* KFD's init_event_waiter: a signalled event activates the waiter at
	 * once, and an auto-reset one is consumed by it; so does an age the
	 * waiter has not seen. */
	int rc = 0;
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = data[i].event_id;
		sim_event *e = ids[i] < MAX_EVENTS ? events[ids[i]] : NULL;
		if (e == NULL) {
			for (uint32_t j = 0; j < i; j++) events[ids[j]]->nwaiters--;
			pthread_mutex_unlock(&ev_lock);
			free(ids);
			free(activated);
			free(gen);
			return -EINVAL;
		}
		activated[i] = e->signaled;
		if (e->type == KFD_IOC_EVENT_SIGNAL && kfdsim_release_major * 100 + kfdsim_release_minor >= 507) {
			if (data[i].last_event_age && data[i].last_event_age != e->age) activated[i] = 1;
		}
		if (e->auto_reset && activated[i]) e->signaled = 0;
		gen[i] = e->set_gen;
		e->nwaiters++;
	}
	uint32_t result = KFD_IOC_WAIT_RESULT_TIMEOUT;
	for (;;) {
		uint32_t nact = 0;
		int gone = 0;
		for (uint32_t i = 0; i < n; i++) {
			sim_event *e = events[ids[i]];
			if (e == NULL) {
				gone = 1;
				break;
			}
			if (!activated[i] && (e->set_gen != gen[i] || (!e->auto_reset && e->signaled))) activated[i] = 1;
			if (activated[i]) nact++;
		}
		if (gone) {
			result = KFD_IOC_WAIT_RESULT_FAIL; /* destroyed while waited on */
			rc = -EINVAL;
			break;
		}
		if (a->wait_for_all ? nact == n : nact > 0) {
			for (uint32_t i = 0; i < n; i++) {
				sim_event *e = events[ids[i]];
				if (e->type == KFD_IOC_EVENT_MEMORY && e->fault_pending) {
					data[i].memory_exception_data = e->fault;
					e->fault_pending = 0;
				}
			}
			result = KFD_IOC_WAIT_RESULT_COMPLETE;
			break;
		}
		if (ms == 0) break;
		__atomic_fetch_add(&blocked_waits, 1, __ATOMIC_RELEASE);
		int w = ms == 0xffffffffu ? pthread_cond_wait(&ev_cond, &ev_lock)
					  : pthread_cond_timedwait(&ev_cond, &ev_lock, &deadline);
		if (w == ETIMEDOUT) break;
	}
	for (uint32_t i = 0; i < n; i++) {
		sim_event *e = events[ids[i]];
		if (e == NULL) continue;
		if (e->nwaiters > 0) e->nwaiters--;
		if (e->type == KFD_IOC_EVENT_SIGNAL && kfdsim_release_major * 100 + kfdsim_release_minor >= 507) {
			data[i].last_event_age = e->age;
		}
	}
	pthread_mutex_unlock(&ev_lock);
	free(ids);
	free(activated);
	free(gen);
	a->wait_result = result;
	return rc;
}
