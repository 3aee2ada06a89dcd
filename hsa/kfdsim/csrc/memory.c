/*
 * Memory: KFD's buffer objects (AMDKFD_IOC_ALLOC_MEMORY_OF_GPU) with their
 * per-GPU mapping sets, and the access check the simulated GPU makes.
 *
 * A BO lives at the GPU virtual address the thunk chose (va_addr). On the
 * dGPUs modelled here the thunk takes GPU addresses from its SVM aperture,
 * which it reserves in the process's own address space, so a BO's GPU
 * address is also its CPU address. VRAM, GTT, doorbell and MMIO-remap BOs
 * are backed by one memfd per process ("device memory"): ALLOC maps the BO's
 * pages at va_addr at once (the GPU's view; the simulated GPU reads and
 * writes them there), and the thunk's own mmap of the render or KFD file at
 * the mmap_offset ALLOC returned maps the same pages at the same address.
 * USERPTR BOs are the process's own pages (mmap_offset carries the user
 * address).
 *
 * MAP_MEMORY_TO_GPU adds GPUs to a BO's mapping set and UNMAP removes them,
 * as KFD does (kfd_ioctl_map_memory_to_gpu); the thunk computes the sets
 * (fmm_map_to_gpu_nodes: a second hsa_amd_agents_allow_access replaces the
 * first one's agents in ROCr 5.2). kfdsim_gpu_access checks every access of
 * the simulated GPU against those sets; a failed one is a VM fault.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kfdsim_int.h"

typedef struct mem_record {
	kfdsim_alloc a;
	uint64_t handle;
	uint32_t ioc_flags;
	uint32_t gpu_index;      /* the GPU the BO was allocated on */
	uint64_t backing;        /* memfd offset; UINT64_MAX for userptr */
	uint64_t backing_len;
	uint64_t userptr;        /* CPU address of a USERPTR BO */
	struct mem_record *next;
} mem_record;

static pthread_rwlock_t mem_lock = PTHREAD_RWLOCK_INITIALIZER;
static mem_record *records;
static uint64_t next_handle = 1;
static int backing_fd = -1;
static uint64_t backing_next = 1ull << 20;
static uint64_t vram_used[KFDSIM_MAX_GPUS];

/* Doorbell pages: one 8 KiB page per GPU in the backing file, mapped here
 * once for the command processors (the thunk maps the same page). */
#define DOORBELL_PAGE_BYTES 8192ull
static uint64_t doorbell_off[KFDSIM_MAX_GPUS];
#define DOORBELL_PAGES_BASE (0x3000ull << 32) /* above every BO's backing */
static uint64_t *doorbell_kva[KFDSIM_MAX_GPUS];

static uint64_t page_up(uint64_t n) { return (n + 4095) & ~4095ull; }

/* Caller holds mem_lock for writing. */
static int ensure_backing_locked(void)
{
	if (backing_fd >= 0) return 0;
	int fd = memfd_create("kfdsim-device-memory", MFD_CLOEXEC);
	if (fd < 0) return -errno;
	/* Sparse: pages exist only where touched. */
	if (ftruncate(fd, (off_t)(1ull << 46)) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	backing_fd = fd;
	return 0;
}

static uint64_t backing_alloc_locked(uint64_t len, uint64_t align)
{
	uint64_t off = (backing_next + align - 1) & ~(align - 1);
	backing_next = off + len;
	return off;
}

int kfdsim_mem_backing_fd(void)
{
	pthread_rwlock_wrlock(&mem_lock);
	int rc = ensure_backing_locked();
	int fd = backing_fd;
	pthread_rwlock_unlock(&mem_lock);
	return rc < 0 ? rc : fd;
}

uint64_t kfdsim_mem_doorbell_offset(int gpu)
{
	pthread_rwlock_wrlock(&mem_lock);
	uint64_t off = 0;
	if (ensure_backing_locked() == 0) {
		if (doorbell_off[gpu] == 0) {
			/* 4 GiB aligned: the thunks split KFD's doorbell offset into the
			 * page's mmap offset and the offset in the page with a mask of
			 * the page size, which for a node's first queue, before they
			 * know the page size, is the 32-bit mask (queues.c,
			 * hsaKmtCreateQueue: "~(HSAuint64)(doorbells[NodeId].size - 1)"
			 * with a 32-bit size of 0). KFD's offsets carry the mmap type
			 * and gpu_id in the high half, so that works there too. */
			uint64_t o = DOORBELL_PAGES_BASE + ((uint64_t)gpu << 32);
			void *p = mmap(NULL, DOORBELL_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, backing_fd, (off_t)o);
			if (p != MAP_FAILED) {
				doorbell_off[gpu] = o;
				doorbell_kva[gpu] = p;
			}
		}
		off = doorbell_off[gpu];
	}
	pthread_rwlock_unlock(&mem_lock);
	return off;
}

volatile uint64_t *kfdsim_mem_doorbell_slot(int gpu, uint32_t byte_offset)
{
	if (kfdsim_mem_doorbell_offset(gpu) == 0) return NULL;
	return (volatile uint64_t *)((uint8_t *)doorbell_kva[gpu] + byte_offset);
}

/* A forked child is a new KFD process: nothing of the parent's device state
 * is its own (its inherited mappings of the parent's device memory stay the
 * parent's). */
void kfdsim_memory_reset(void)
{
	/* The child's only thread: a lock another thread of the parent held at
	 * the fork is re-made, not waited for. */
	pthread_rwlock_init(&mem_lock, NULL);
	while (records) {
		mem_record *r = records;
		records = r->next;
		free(r);
	}
	if (backing_fd >= 0) close(backing_fd);
	backing_fd = -1;
	backing_next = 1ull << 20;
	memset(vram_used, 0, sizeof vram_used);
	memset(doorbell_off, 0, sizeof doorbell_off);
	memset(doorbell_kva, 0, sizeof doorbell_kva);
}

/* The record whose GPU range contains addr; caller holds mem_lock. */
static mem_record *find(uint64_t addr)
{
	for (mem_record *r = records; r; r = r->next)
		if (addr >= r->a.base && addr - r->a.base < r->a.size) return r;
	return NULL;
}

static mem_record *find_handle(uint64_t handle)
{
	for (mem_record *r = records; r; r = r->next)
		if (r->handle == handle) return r;
	return NULL;
}

static void remove_record(mem_record *r)
{
	for (mem_record **p = &records; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			return;
		}
}

/* HsaMemFlags of the record (kfdsim_alloc.flags), from KFD's flags. */
static uint32_t hsa_flags(uint32_t ioc)
{
	HsaMemFlags f;
	f.Value = 0;
	f.ui32.ReadOnly = !(ioc & KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE);
	f.ui32.ExecuteAccess = !!(ioc & KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE);
	f.ui32.HostAccess = !!(ioc & (KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC | KFD_IOC_ALLOC_MEM_FLAGS_GTT |
				       KFD_IOC_ALLOC_MEM_FLAGS_USERPTR));
	f.ui32.CoarseGrain = !(ioc & KFD_IOC_ALLOC_MEM_FLAGS_COHERENT);
	f.ui32.Uncached = !!(ioc & KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED);
	f.ui32.AQLQueueMemory = !!(ioc & KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM);
	f.ui32.NonPaged = !!(ioc & KFD_IOC_ALLOC_MEM_FLAGS_VRAM);
	return f.Value;
}

int kfdsim_mem_alloc(int gpu, uint64_t va, uint64_t size, uint32_t flags, uint64_t *mmap_offset, uint64_t *handle)
{
	if (size == 0 || (va & 4095)) return -EINVAL;
	uint32_t kind = flags & (KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT |
				 KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL |
				 KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP);
	if (kind == 0 || (kind & (kind - 1))) return -EINVAL;
	uint64_t len = page_up(size);
	if (kind == KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL && kfdsim_mem_doorbell_offset(gpu) == 0) return -ENOMEM;
	mem_record *r = calloc(1, sizeof *r);
	if (r == NULL) return -ENOMEM;
	pthread_rwlock_wrlock(&mem_lock);
	int rc = ensure_backing_locked();
	if (rc < 0) goto fail;
	for (mem_record *o = records; o; o = o->next)
		if (va < o->a.base + o->a.size && o->a.base < va + size) {
			rc = -EINVAL; /* KFD: the VA range is already in use */
			goto fail;
		}
	if (kind == KFD_IOC_ALLOC_MEM_FLAGS_VRAM) {
		if (vram_used[gpu] + len > KFDSIM_VRAM_BYTES) {
			rc = -ENOMEM;
			goto fail;
		}
		vram_used[gpu] += len;
	}
	r->a.base = va;
	r->a.size = size;
	r->a.home_node = kind == KFD_IOC_ALLOC_MEM_FLAGS_VRAM ? kfdsim_gpus[gpu].node : 0;
	r->a.flags = hsa_flags(flags);
	r->ioc_flags = flags;
	r->gpu_index = (uint32_t)gpu;
	r->handle = ((uint64_t)kfdsim_gpus[gpu].gpu_id << 32) | next_handle++;
	r->backing = UINT64_MAX;
	if (kind == KFD_IOC_ALLOC_MEM_FLAGS_USERPTR) {
		r->userptr = *mmap_offset;
	} else {
		if (kind == KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL) {
			r->backing = doorbell_off[gpu];
			len = DOORBELL_PAGE_BYTES < len ? DOORBELL_PAGE_BYTES : len;
		} else {
			r->backing = backing_alloc_locked(len, 4096);
		}
		r->backing_len = len;
		/* The GPU's view: the BO's pages at its GPU address. */
		void *p = mmap((void *)(uintptr_t)va, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, backing_fd,
			       (off_t)r->backing);
		if (p == MAP_FAILED) {
			rc = -errno;
			if (kind == KFD_IOC_ALLOC_MEM_FLAGS_VRAM) vram_used[gpu] -= len;
			goto fail;
		}
		*mmap_offset = r->backing;
	}
	r->next = records;
	records = r;
	*handle = r->handle;
	pthread_rwlock_unlock(&mem_lock);
	KFDSIM_DEBUG("ALLOC gpu %d va %#llx size %#llx flags %#x -> handle %#llx", gpu, (unsigned long long)va,
		     (unsigned long long)size, flags, (unsigned long long)r->handle);
	return 0;
fail:
	pthread_rwlock_unlock(&mem_lock);
	free(r);
	return rc;
}

int kfdsim_mem_free(uint64_t handle)
{
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find_handle(handle);
	if (r == NULL) {
		pthread_rwlock_unlock(&mem_lock);
		return -EINVAL;
	}
	remove_record(r);
	if ((r->ioc_flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM)) vram_used[r->gpu_index] -= page_up(r->a.size);
	if (r->backing != UINT64_MAX && !(r->ioc_flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL)) {
		/* The GPU's view of the pages goes; the address range returns to
		 * the thunk's reservation (it re-reserves what it mapped itself). */
		mmap((void *)(uintptr_t)r->a.base, r->backing_len, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		fallocate(backing_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)r->backing,
			  (off_t)r->backing_len);
	}
	pthread_rwlock_unlock(&mem_lock);
	KFDSIM_DEBUG("FREE handle %#llx (va %#llx)", (unsigned long long)handle, (unsigned long long)r->a.base);
	free(r);
	return 0;
}

int kfdsim_mem_map(uint64_t handle, const uint32_t *gpu_ids, uint32_t n, uint32_t *n_success, int map)
{
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find_handle(handle);
	if (r == NULL) {
		pthread_rwlock_unlock(&mem_lock);
		return -EINVAL;
	}
	uint64_t mask = __atomic_load_n(&r->a.mapped_mask, __ATOMIC_ACQUIRE);
	for (uint32_t i = *n_success; i < n; i++) {
		int g = kfdsim_gpu_index_by_id(gpu_ids[i]);
		if (g < 0) {
			pthread_rwlock_unlock(&mem_lock);
			return -EINVAL;
		}
		if (map) mask |= 1ull << kfdsim_gpus[g].node;
		else mask &= ~(1ull << kfdsim_gpus[g].node);
		*n_success = i + 1;
	}
	__atomic_store_n(&r->a.mapped_mask, mask, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&mem_lock);
	KFDSIM_DEBUG("%s handle %#llx (va %#llx+%#llx) -> mapped to nodes mask %#llx", map ? "MAP" : "UNMAP",
		     (unsigned long long)handle, (unsigned long long)r->a.base, (unsigned long long)r->a.size,
		     (unsigned long long)mask);
	return 0;
}

/* The address of the BO with this handle (the events page). */
uint64_t kfdsim_mem_handle_va(uint64_t handle, uint64_t *size)
{
	pthread_rwlock_rdlock(&mem_lock);
	mem_record *r = find_handle(handle);
	uint64_t va = r ? r->a.base : 0;
	if (r && size) *size = r->a.size;
	pthread_rwlock_unlock(&mem_lock);
	return va;
}

uint64_t kfdsim_mem_available(int gpu)
{
	pthread_rwlock_rdlock(&mem_lock);
	uint64_t avail = KFDSIM_VRAM_BYTES - vram_used[gpu];
	pthread_rwlock_unlock(&mem_lock);
	return avail;
}

/* ---- the simulated GPU's side ------------------------------------------ */

/* The record containing addr at its GPU address, else a USERPTR BO whose
 * user pages contain it. */
__attribute__((visibility("default"))) bool kfdsim_lookup(uint64_t addr, kfdsim_alloc *out)
{
	pthread_rwlock_rdlock(&mem_lock);
	mem_record *r = find(addr);
	if (r == NULL)
		for (mem_record *u = records; u; u = u->next)
			if (u->userptr && addr >= u->userptr && addr - u->userptr < u->a.size) {
				r = u;
				break;
			}
	if (r && out) {
		*out = r->a;
		out->mapped_mask = __atomic_load_n(&r->a.mapped_mask, __ATOMIC_ACQUIRE);
	}
	pthread_rwlock_unlock(&mem_lock);
	return r != NULL;
}

static int read_only(uint32_t flags)
{
	HsaMemFlags f;
	f.Value = flags;
	return f.ui32.ReadOnly;
}

/* Checks without raising a fault: NULL ok, else why not. *host gets the
 * address the CPU reaches the range at (the GPU address, except for user
 * memory registered at another GPU address); alias says whether the caller
 * can use such a translated address. */
static const char *access_problem(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write, int *not_present,
				  int alias, uint64_t *host)
{
	*host = addr;
	*not_present = 1;
	if (!kfdsim_is_gpu_node(gpu_node)) return "not a GPU node";
	if (size == 0) size = 1;
	if (addr + size < addr) return "range wraps around";
	pthread_rwlock_rdlock(&mem_lock);
	mem_record *r = find(addr);
	const char *why = NULL;
	if (r == NULL) {
		why = "no allocation there";
	} else if (addr + size - r->a.base > r->a.size) {
		why = "access runs past the end of the allocation";
	} else if (!(__atomic_load_n(&r->a.mapped_mask, __ATOMIC_ACQUIRE) & (1ull << gpu_node))) {
		why = "allocation is not mapped to this GPU (missing hsa_amd_agents_allow_access?)";
	} else if (write && read_only(r->a.flags)) {
		why = "write to read-only memory";
		*not_present = 0;
	} else if (r->userptr && r->userptr != r->a.base && !alias) {
		/* User pages registered at another GPU address (the thunk's
		 * fmm_register_user_memory) are not at that address in the
		 * process: only callers that translate can reach them. */
		why = "registered user memory at a GPU address other than its CPU address (this path cannot reach it)";
	}
	if (r != NULL && r->userptr) *host = r->userptr + (addr - r->a.base);
	pthread_rwlock_unlock(&mem_lock);
	if (why != NULL && !kfdsim_rule_access && r != NULL && (alias || !(r->userptr && r->userptr != r->a.base)))
		why = NULL;
	return why;
}

static void *checked(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write, int alias)
{
	int not_present;
	uint64_t host;
	const char *why = access_problem(gpu_node, addr, size, write, &not_present, alias, &host);
	if (why == NULL) return (void *)(uintptr_t)(host ? host : 1);
	fprintf(stderr, "kfdsim: VM fault on GPU node %u: %s of %#llx+%llu: %s\n", gpu_node, write ? "write" : "read",
		(unsigned long long)addr, (unsigned long long)size, why);
	kfdsim_vm_fault(gpu_node, addr, write, not_present);
	return NULL;
}

__attribute__((visibility("default"))) bool kfdsim_gpu_access(uint32_t gpu_node, uint64_t addr, uint64_t size,
							      bool write)
{
	return checked(gpu_node, addr, size, write, 0) != NULL;
}

__attribute__((visibility("default"))) void *kfdsim_gpu_ptr(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write)
{
	return checked(gpu_node, addr, size, write, 1);
}
