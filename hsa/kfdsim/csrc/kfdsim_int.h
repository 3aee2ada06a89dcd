/*
 * Internal interfaces between the thunk's own files (thunk.c, events.c,
 * memory.c, cp.c, sdma.c). Not part of the contract with exec.c, which is
 * kfdsim.h.
 */
#ifndef KFDSIM_INT_H
#define KFDSIM_INT_H

#include <hsakmt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "kfdsim.h"

#define KFDSIM_MAX_GPUS 8
#define KFDSIM_MAX_NODES (KFDSIM_MAX_GPUS + 1)

/* One configured GPU node (node index = position + 1). */
typedef struct kfdsim_gpu {
	char name[16];        /* "gfx90a" */
	uint32_t major, minor, stepping;
	uint16_t device_id;
	uint32_t domain;
	uint32_t bus, dev, fn;
	uint32_t cus;         /* compute units */
	uint32_t simd_per_cu;
	uint32_t wave_size;
	uint32_t shader_engines;
	int sramecc;
} kfdsim_gpu;

extern int kfdsim_num_gpus;
extern kfdsim_gpu kfdsim_gpus[KFDSIM_MAX_GPUS];
extern int kfdsim_debug_on;
/* 0 when KFDSIM_VMFAULT_QUEUE_ERROR=0: a VM fault stops the faulting queue
 * without a queue error, as KFD without the debugger interface evicts it;
 * the MEMORY event is then the only report. */
extern int kfdsim_vmfault_queue_error;
/* 1 when KFDSIM_P2P=1: every two GPUs are linked (the P2P links KFD lists
 * for GPUs that reach each other's memory over PCIe or xGMI), so ROCr lets
 * one GPU be allowed access to another's memory. */
extern int kfdsim_p2p;

#define KFDSIM_DEBUG(...)                                                        \
	do {                                                                     \
		if (kfdsim_debug_on) {                                           \
			fprintf(stderr, "kfdsim: " __VA_ARGS__);                 \
			fputc('\n', stderr);                                     \
		}                                                                \
	} while (0)

/* Whether hsaKmtOpenKFD succeeded and CloseKFD was not called since. */
int kfdsim_is_open(void);
static inline int kfdsim_is_gpu_node(uint32_t node)
{
	return node >= 1 && node <= (uint32_t)kfdsim_num_gpus;
}

/* Monotonic nanoseconds: the simulated GPU, CPU and system clocks. */
uint64_t kfdsim_now_ns(void);

/* events.c */
void kfdsim_events_init(void);
void kfdsim_events_fini(void);
/* Signals the event with this id, as the interrupt handler does when the
 * CP's end-of-pipe interrupt carries it. Unknown ids are ignored, as KFD
 * ignores interrupts for destroyed events. */
void kfdsim_event_fire(uint32_t event_id);
/* Signals every MEMORY event with fault data, as KFD's VM-fault interrupt
 * handler does. */
void kfdsim_event_memory_fault(uint32_t node, uint64_t va, int write, int not_present);

/* memory.c */
void kfdsim_memory_fini(void);
void kfdsim_memory_add_driver_range(uint64_t base, uint64_t size);

/* cp.c: queues. */
struct amd_queue_s;
typedef struct kfdsim_queue {
	uint64_t id;
	uint32_t node;
	HSA_QUEUE_TYPE type;
	uint8_t *ring;
	uint64_t ring_bytes;
	volatile uint64_t *rptr;
	volatile uint64_t *wptr;
	volatile uint64_t *doorbell;
	int doorbell_slot;
	struct amd_queue_s *amd_queue; /* AQL only */
	pthread_t thread;
	int stop;
	int faulted;
	int suspended;
	struct kfdsim_queue *next;
	/* SDMA: the engine's own read and write pointers (bytes), which
	 * CreateQueue hands to ROCr. */
	uint64_t sdma_rptr, sdma_wptr;
} kfdsim_queue;

/* The thread-local queue being processed (NULL off the CP/SDMA threads), so
 * a failed kfdsim_gpu_access can stop the queue that faulted. */
void kfdsim_queue_fault(struct kfdsim_queue *q, int64_t error_code, const char *why);
extern __thread struct kfdsim_queue *kfdsim_current_queue;
void kfdsim_queues_fini(void);
int kfdsim_queue_stopping(kfdsim_queue *q);
/* Whether a queue's processor is to process nothing now: the queue faulted,
 * is suspended, or kfdsim_hold is in force (kfdsim_held). */
int kfdsim_queue_paused(kfdsim_queue *q);

/* Polling backoff: stay responsive right after activity, then sleep longer
 * so an idle queue costs little CPU (this runs on shared 2-core machines). */
typedef struct backoff {
	uint64_t idle_since;
	int idle;
} backoff;
void backoff_reset(backoff *b);
void backoff_wait(backoff *b);

/* events.c: whether addr is an events-page mailbox slot. */
int kfdsim_is_mailbox(uint64_t addr, uint32_t *event_id);

/* hold.c: whether kfdsim_hold is in force (command processors pause
 * before their next packet). */
int kfdsim_held(void);

/* sdma.c: the SDMA engine's loop for one SDMA queue. */
void kfdsim_sdma_loop(kfdsim_queue *q);

/* The queue error codes the CP writes to amd_queue_t.queue_inactive_signal,
 * as ROCr 5.2's AqlQueue::DynamicScratchHandler decodes them. */
enum {
	KFDSIM_QERR_INVALID_DIM = 2,           /* -> HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS */
	KFDSIM_QERR_INVALID_GROUP_MEMORY = 4,  /* -> HSA_STATUS_ERROR_INVALID_ALLOCATION */
	KFDSIM_QERR_GROUP_TOO_LARGE = 64,      /* -> HSA_STATUS_ERROR_INVALID_ARGUMENT */
	KFDSIM_QERR_INVALID_CODE = 8,          /* -> HSA_STATUS_ERROR_INVALID_CODE_OBJECT */
	KFDSIM_QERR_INVALID_PACKET = 32,       /* -> HSA_STATUS_ERROR_INVALID_PACKET_FORMAT */
	KFDSIM_QERR_INVALID_VENDOR = 256,      /* -> HSA_STATUS_ERROR_INVALID_PACKET_FORMAT */
	KFDSIM_QERR_MEMORY_VIOLATION = 0x20000000, /* -> HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION */
};

#endif /* KFDSIM_INT_H */
