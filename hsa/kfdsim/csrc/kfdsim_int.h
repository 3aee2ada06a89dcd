/*
 * Internal interfaces between the simulated driver's own files (config.c,
 * sysfs.c, shim.c, kfd.c, drm.c, events.c, memory.c, cp.c, sdma.c). Not part
 * of the contract with exec.c, which is kfdsim.h.
 */
#ifndef KFDSIM_INT_H
#define KFDSIM_INT_H

#include <hsakmt.h>
#include "kfd_uapi.h"
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
	uint32_t cus;         /* compute units (of this partition) */
	uint32_t simd_per_cu;
	uint32_t wave_size;
	uint32_t shader_engines;
	int sramecc;
	uint32_t device_index; /* which device of the spec (partitions share it) */
	uint32_t partitions;   /* KFD nodes of the device: 1, or 2/4/8 partitions */
	uint32_t partition;    /* this node's partition (KFD's node_id) */
	uint32_t node;         /* KFD node index (CPU = 0) */
	uint32_t gpu_id;       /* KFD's gpu_id */
	uint32_t render_minor; /* /dev/dri/renderD<render_minor> */
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
/* The rules KFDSIM_RULE_OFF can switch off (1: enforced). */
extern int kfdsim_rule_evict;
extern int kfdsim_rule_access;
/* The ROCm release the topology is for ($KFDSIM_ROCM, default 5.2). */
extern int kfdsim_release_major, kfdsim_release_minor;

/* config.c */
int kfdsim_config_ensure(void);          /* 0, or -1 with kfdsim_config_error() */
const char *kfdsim_config_error(void);
int kfdsim_config_generation(void);
int kfdsim_gpu_index_by_id(uint32_t gpu_id); /* -1 if none */
void kfdsim_config_after_fork(void);
void kfdsim_sysfs_after_fork(void);
/* shim.c: whether /dev/kfd is open in this process;
 * which GPU a render-node descriptor is (-1: none); the C library's close. */
int kfdsim_device_in_use(void);
int kfdsim_fd_render_gpu(int fd);
int kfdsim_real_close(int fd);
/* kfd.c: the ioctls of /dev/kfd and of GPU gpu's render node; 0 or -errno. */
int kfdsim_kfd_ioctl(unsigned long req, void *arg);
int kfdsim_drm_ioctl(int gpu, unsigned long req, void *arg);
/* sysfs.c: the directory holding the generated sysfs files for the current
 * configuration (created on first use); NULL on failure. */
const char *kfdsim_sysfs_root(void);
uint64_t kfdsim_system_memory_bytes(void);
#define KFDSIM_VRAM_BYTES (16ull << 30)

#define KFDSIM_DEBUG(...)                                                        \
	do {                                                                     \
		if (kfdsim_debug_on) {                                           \
			fprintf(stderr, "kfdsim: " __VA_ARGS__);                 \
			fputc('\n', stderr);                                     \
		}                                                                \
	} while (0)

static inline int kfdsim_is_gpu_node(uint32_t node)
{
	return node >= 1 && node <= (uint32_t)kfdsim_num_gpus;
}

/* Monotonic nanoseconds: the simulated GPU, CPU and system clocks. */
uint64_t kfdsim_now_ns(void);

/* events.c */
void kfdsim_events_reset(void);
/* Signals the event with this id, as the interrupt handler does when the
 * CP's end-of-pipe interrupt carries it. Unknown ids are ignored, as KFD
 * ignores interrupts for destroyed events. */
void kfdsim_event_fire(uint32_t event_id);
/* Signals every MEMORY event with fault data, as KFD's VM-fault interrupt
 * handler does. */
void kfdsim_event_memory_fault(uint32_t node, uint64_t va, int write, int not_present);

/* memory.c */
void kfdsim_memory_reset(void);

/* cp.c: queues. */
struct amd_queue_s;
typedef struct kfdsim_queue {
	uint32_t id;
	uint32_t node;
	uint32_t gpu_index;
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
	int evicted;   /* by a VM fault of the process on this GPU: never restored */
	int suspended;
	struct kfdsim_queue *next;
} kfdsim_queue;

/* The thread-local queue being processed (NULL off the CP/SDMA threads), so
 * a failed kfdsim_gpu_access can stop the queue that faulted. */
void kfdsim_queue_fault(struct kfdsim_queue *q, int64_t error_code, const char *why);
extern __thread struct kfdsim_queue *kfdsim_current_queue;
void kfdsim_queues_reset(void);
int kfdsim_queue_create(int gpu, uint32_t queue_type, uint64_t ring, uint64_t ring_bytes, uint64_t rptr,
			uint64_t wptr, uint32_t percent, uint32_t *queue_id, uint64_t *doorbell_offset);
int kfdsim_queue_update(uint32_t id, uint32_t percent);
int kfdsim_queue_destroy(uint32_t id);
int kfdsim_queue_exists(uint32_t id);
/* A VM fault on GPU node `node` at va: evicts the process's queues there,
 * signals the memory events and stops the current queue with an error. */
void kfdsim_vm_fault(uint32_t node, uint64_t va, int write, int not_present);

/* memory.c: the KFD side of buffer objects. */
int kfdsim_mem_alloc(int gpu, uint64_t va, uint64_t size, uint32_t flags, uint64_t *mmap_offset, uint64_t *handle);
int kfdsim_mem_free(uint64_t handle);
int kfdsim_mem_map(uint64_t handle, const uint32_t *gpu_ids, uint32_t n, uint32_t *n_success, int map);
uint64_t kfdsim_mem_handle_va(uint64_t handle, uint64_t *size);
uint64_t kfdsim_mem_available(int gpu);
int kfdsim_mem_backing_fd(void);
uint64_t kfdsim_mem_doorbell_offset(int gpu);
volatile uint64_t *kfdsim_mem_doorbell_slot(int gpu, uint32_t byte_offset);

/* events.c: the KFD side of events. */
int kfdsim_event_create(struct kfd_ioctl_create_event_args *a);
int kfdsim_event_destroy(uint32_t id);
int kfdsim_event_set(uint32_t id, int set);
int kfdsim_event_wait(struct kfd_ioctl_wait_events_args *a);
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
