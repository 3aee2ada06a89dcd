/*
 * kfdsim: a simulated AMD kernel driver (KFD and amdgpu's DRM render nodes)
 * at the kernel interface, an LD_PRELOAD library, so that Debian's real
 * thunk (libhsakmt 5.2.3), ROCr (libhsa-runtime64 5.2.3) and HIP (libamdhip64
 * 5.2.3) run without a GPU, the way Mesa's drm-shim runs real GPU userspace
 * over a fake kernel interface.
 *
 * This header is the seam between the two halves of the simulated GPU:
 *   - the driver and command processor (shim.c, kfd.c, sysfs.c, config.c,
 *     memory.c, events.c, cp.c, sdma.c): topology, buffer objects with
 *     per-GPU mapping sets, events, queues, AQL and SDMA packet processing,
 *     VM-fault handling;
 *   - the shader executor (exec.c): names the kernel a dispatch points at
 *     (from the loaded code object's own dynamic symbol table, or the
 *     signature of one of ROCr's non-ELF blit kernels), runs ROCr's and HIP's
 *     internal blit kernels, and hands every other kernel to an executor that
 *     the embedding process registers (rocsync's Go tests register one that
 *     runs rocsync's kernels with the same CPU reference as its unit tests).
 *
 * Everything the simulated GPU touches goes through kfdsim_gpu_access first:
 * memory not mapped to the GPU's node is a VM fault, reported the way KFD
 * reports one, never a silent read.
 */
#ifndef KFDSIM_H
#define KFDSIM_H

#include <stdbool.h>
#include <stdint.h>

/* ---- provided by the driver (memory.c) --------------------------------- */

/* One buffer object of the simulated KFD (ALLOC_MEMORY_OF_GPU: device or
 * system memory, or user memory the thunk registered). */
typedef struct kfdsim_alloc {
	uint64_t base;        /* GPU virtual address (== CPU address, except for
	                       * registered user memory) */
	uint64_t size;
	uint32_t home_node;   /* node whose memory it is: 0 for system memory */
	uint64_t mapped_mask; /* bit n set: mapped to GPU node n (MAP_MEMORY_TO_GPU) */
	uint32_t flags;       /* HsaMemFlags.Value equivalent of KFD's allocation flags */
} kfdsim_alloc;

/* Copies the record of the buffer containing addr (at its GPU address, else
 * registered user memory at its CPU address) into *out; false when addr lies
 * in no buffer. */
bool kfdsim_lookup(uint64_t addr, kfdsim_alloc *out);

/* The access check the simulated GPU makes before every memory access of a
 * packet, kernel or copy it runs on gpu_node: true when [addr, addr+size) lies
 * in one buffer mapped to gpu_node. When false, the driver has raised a VM
 * fault for that address (queues evicted, the memory events, and the
 * queue's error path) and the caller must stop the work and return
 * KFDSIM_FAULT. */
bool kfdsim_gpu_access(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write);

/* kfdsim_gpu_access for callers that translate: the CPU address of the
 * checked range, or NULL after raising the VM fault. The CPU address is the
 * GPU address except for user memory registered at another GPU address (the
 * thunk's hsaKmtRegisterMemory gives pinned user pages a GPU address of its
 * own), which only callers of this function can reach. */
void *kfdsim_gpu_ptr(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write);

/* ---- provided by the executor (exec.c) -------------------------------- */

enum {
	KFDSIM_OK = 0,
	KFDSIM_FAULT = -1,          /* a VM fault was raised by kfdsim_gpu_access */
	KFDSIM_UNKNOWN_KERNEL = -2, /* the caller raises a fault at the kernel object */
};

/* One AQL kernel dispatch as the command processor decoded it. */
typedef struct kfdsim_dispatch {
	uint32_t gpu_node;
	uint64_t queue_id;
	uint64_t kernel_object; /* address of the 64-byte kernel descriptor */
	uint64_t kernarg;       /* kernarg_address of the packet */
	uint32_t grid[3];       /* grid size in work-items */
	uint16_t workgroup[3];  /* workgroup size in work-items */
	uint32_t group_segment_size;
	uint32_t private_segment_size;
} kfdsim_dispatch;

/* Runs one dispatch to completion: KFDSIM_OK, KFDSIM_FAULT or
 * KFDSIM_UNKNOWN_KERNEL. Called from the queue's command-processor thread. */
int kfdsim_exec_dispatch(const kfdsim_dispatch *d);

/* What the registered executor is given for a kernel found by name in a loaded
 * code object. The image is the loaded ELF (it starts with the ELF header), so
 * the executor can read the kernel's metadata note (argument offsets, sizes,
 * kinds) from it. */
typedef struct kfdsim_kernel_call {
	const char *name;      /* the kernel's symbol name, without ".kd" */
	uint64_t image_base;   /* address of the loaded ELF image */
	uint64_t image_size;
	const kfdsim_dispatch *dispatch;
} kfdsim_kernel_call;

/* An executor returns KFDSIM_OK, KFDSIM_FAULT (after kfdsim_gpu_access said
 * no) or KFDSIM_UNKNOWN_KERNEL. It must check every access with
 * kfdsim_gpu_access before it makes it. */
typedef int (*kfdsim_executor_fn)(const kfdsim_kernel_call *call);

/* Registers the executor for kernels that are neither ROCr's nor HIP's own
 * blit kernels; NULL removes it. Exported from libkfdsim.so so a process can
 * register one (rocsync's Go tests do, through purego) before hsa_init. */
void kfdsim_set_executor(kfdsim_executor_fn fn);

#endif /* KFDSIM_H */
