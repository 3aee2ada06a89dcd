/*
 * Memory: every allocation (AllocMemory) and registered range
 * (RegisterMemory*) has a record with the GPU nodes it is mapped to.
 * MapMemoryToGPUNodes sets that set: it maps to the listed nodes and
 * unmaps from the others, as the real thunk's fmm_map_to_gpu_nodes does (so
 * a second hsa_amd_agents_allow_access replaces the first one's agents:
 * ROCr 5.2 does not merge them); user pointers map to all their registered
 * nodes.
 * MapMemoryToGPU maps to every GPU, UnmapMemoryToGPU clears it.
 * kfdsim_gpu_access checks the simulated GPU's accesses against those
 * records and raises a VM fault when one fails.
 *
 * "VRAM" is host memory: one address on both sides.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kfdsim_int.h"

typedef struct mem_record {
	kfdsim_alloc a;
	HSA_POINTER_TYPE type;
	void *user_data;
	uint64_t map_len;        /* bytes mmapped by us; 0 for registered user memory */
	uint32_t mapped_nodes[KFDSIM_MAX_NODES];
	uint32_t registered_nodes[KFDSIM_MAX_NODES];
	uint32_t n_registered;
	/* Registrations of exactly this user range not yet deregistered: like
	 * the real thunk (fmm_register_user_memory), registering the same
	 * range again counts up instead of failing. */
	uint32_t registration_count;
	int driver_owned;        /* the events page: mapped by KFD, never freed by the process */
	struct mem_record *next;
} mem_record;

static pthread_rwlock_t mem_lock = PTHREAD_RWLOCK_INITIALIZER;
static mem_record *records;

static uint64_t all_gpus_mask(void)
{
	uint64_t m = 0;
	for (int i = 1; i <= kfdsim_num_gpus; i++) m |= 1ull << i;
	return m;
}

/* The record containing addr; caller holds mem_lock. */
static mem_record *find(uint64_t addr)
{
	for (mem_record *r = records; r; r = r->next)
		if (addr >= r->a.base && addr - r->a.base < r->a.size) return r;
	return NULL;
}

static mem_record *find_overlap(uint64_t base, uint64_t size)
{
	for (mem_record *r = records; r; r = r->next)
		if (base < r->a.base + r->a.size && r->a.base < base + size) return r;
	return NULL;
}

static void add_record(mem_record *r)
{
	r->next = records;
	records = r;
}

static void remove_record(mem_record *r)
{
	for (mem_record **p = &records; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			return;
		}
}

void kfdsim_memory_fini(void)
{
	pthread_rwlock_wrlock(&mem_lock);
	/* Memory stays mapped in the process: ROCr may still touch it during
	 * teardown, and the process owns its address space. Only the records
	 * go. */
	while (records) {
		mem_record *r = records;
		records = r->next;
		free(r);
	}
	pthread_rwlock_unlock(&mem_lock);
}

HSAKMT_STATUS HSAKMTAPI hsaKmtAllocMemory(HSAuint32 node, HSAuint64 size, HsaMemFlags flags, void **addr)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (addr == NULL || size == 0) return HSAKMT_STATUS_INVALID_PARAMETER;
	if (node > (HSAuint32)kfdsim_num_gpus) return HSAKMT_STATUS_INVALID_NODE_UNIT;
	if (flags.ui32.Scratch && node == 0) return HSAKMT_STATUS_INVALID_PARAMETER;
	uint64_t len = (size + 4095) & ~4095ull;
	int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	void *hint = NULL;
	if (flags.ui32.FixedAddress) {
		hint = *addr;
		if (hint == NULL || ((uintptr_t)hint & 4095)) return HSAKMT_STATUS_INVALID_PARAMETER;
		mflags |= MAP_FIXED_NOREPLACE;
	}
	void *p = mmap(hint, len, PROT_READ | PROT_WRITE | (flags.ui32.ExecuteAccess ? PROT_EXEC : 0), mflags, -1, 0);
	if (p == MAP_FAILED) return HSAKMT_STATUS_NO_MEMORY;
	if (hint && p != hint) {
		munmap(p, len);
		return HSAKMT_STATUS_INVALID_PARAMETER;
	}
	mem_record *r = calloc(1, sizeof *r);
	if (r == NULL) {
		munmap(p, len);
		return HSAKMT_STATUS_NO_MEMORY;
	}
	r->a.base = (uint64_t)(uintptr_t)p;
	r->a.size = size;
	r->a.home_node = node;
	r->a.flags = flags.Value;
	r->type = HSA_POINTER_ALLOCATED;
	r->map_len = len;
	pthread_rwlock_wrlock(&mem_lock);
	add_record(r);
	pthread_rwlock_unlock(&mem_lock);
	*addr = p;
	KFDSIM_DEBUG("AllocMemory node %u size 0x%llx flags 0x%x%s%s%s%s%s -> %p", node, (unsigned long long)size,
		     flags.Value, flags.ui32.HostAccess ? " Host" : "", flags.ui32.CoarseGrain ? " Coarse" : "",
		     flags.ui32.Uncached ? " Uncached" : "", flags.ui32.Scratch ? " Scratch" : "",
		     flags.ui32.ExecuteAccess ? " Exec" : "", p);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtFreeMemory(void *addr, HSAuint64 size)
{
	(void)size;
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (addr == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find((uint64_t)(uintptr_t)addr);
	if (r == NULL || r->a.base != (uint64_t)(uintptr_t)addr || r->type != HSA_POINTER_ALLOCATED ||
	    r->driver_owned) {
		pthread_rwlock_unlock(&mem_lock);
		KFDSIM_DEBUG("FreeMemory %p: not an allocation", addr);
		return HSAKMT_STATUS_MEMORY_NOT_REGISTERED;
	}
	remove_record(r);
	pthread_rwlock_unlock(&mem_lock);
	KFDSIM_DEBUG("FreeMemory %p", addr);
	munmap(addr, r->map_len);
	free(r);
	return HSAKMT_STATUS_SUCCESS;
}

/* Records memory the driver itself maps into every GPU's address space (the
 * events page), so the GPU's mailbox writes pass the access check. */
void kfdsim_memory_add_driver_range(uint64_t base, uint64_t size)
{
	mem_record *r = calloc(1, sizeof *r);
	if (r == NULL) return;
	r->a.base = base;
	r->a.size = size;
	r->a.mapped_mask = all_gpus_mask();
	r->type = HSA_POINTER_ALLOCATED;
	r->driver_owned = 1;
	pthread_rwlock_wrlock(&mem_lock);
	add_record(r);
	pthread_rwlock_unlock(&mem_lock);
}

static HSAKMT_STATUS register_range(void *addr, HSAuint64 size, HsaMemFlags flags, uint64_t nodes_mask)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (addr == NULL || size == 0) return HSAKMT_STATUS_INVALID_PARAMETER;
	uint64_t base = (uint64_t)(uintptr_t)addr;
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find_overlap(base, size);
	if (r != NULL) {
		/* Memory the thunk allocated is already known to KFD; the same
		 * user range registered again is counted, as by the real thunk. */
		int ok = r->type == HSA_POINTER_ALLOCATED && base >= r->a.base && base + size <= r->a.base + r->a.size;
		if (r->type == HSA_POINTER_REGISTERED_USER && r->a.base == base && r->a.size == size) {
			r->registration_count++;
			ok = 1;
		}
		pthread_rwlock_unlock(&mem_lock);
		return ok ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_MEMORY_ALREADY_REGISTERED;
	}
	r = calloc(1, sizeof *r);
	if (r == NULL) {
		pthread_rwlock_unlock(&mem_lock);
		return HSAKMT_STATUS_NO_MEMORY;
	}
	r->a.base = base;
	r->a.size = size;
	r->a.home_node = 0;
	r->a.flags = flags.Value;
	r->type = HSA_POINTER_REGISTERED_USER;
	r->registration_count = 1;
	for (uint32_t n = 1; n < KFDSIM_MAX_NODES; n++)
		if (nodes_mask & (1ull << n)) r->registered_nodes[r->n_registered++] = n;
	add_record(r);
	pthread_rwlock_unlock(&mem_lock);
	KFDSIM_DEBUG("RegisterMemory %p size 0x%llx", addr, (unsigned long long)size);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRegisterMemoryWithFlags(void *addr, HSAuint64 size, HsaMemFlags flags)
{
	return register_range(addr, size, flags, all_gpus_mask());
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRegisterMemory(void *addr, HSAuint64 size)
{
	HsaMemFlags f = {0};
	return register_range(addr, size, f, all_gpus_mask());
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRegisterMemoryToNodes(void *addr, HSAuint64 size, HSAuint64 n, HSAuint32 *nodes)
{
	uint64_t mask = 0;
	for (HSAuint64 i = 0; i < n; i++) {
		if (!kfdsim_is_gpu_node(nodes[i])) return HSAKMT_STATUS_INVALID_NODE_UNIT;
		mask |= 1ull << nodes[i];
	}
	HsaMemFlags f = {0};
	return register_range(addr, size, f, mask);
}

HSAKMT_STATUS HSAKMTAPI hsaKmtDeregisterMemory(void *addr)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find((uint64_t)(uintptr_t)addr);
	if (r == NULL) {
		pthread_rwlock_unlock(&mem_lock);
		return HSAKMT_STATUS_MEMORY_NOT_REGISTERED;
	}
	if (r->type != HSA_POINTER_REGISTERED_USER) {
		/* Deregistering memory the thunk allocated changes nothing. */
		pthread_rwlock_unlock(&mem_lock);
		return HSAKMT_STATUS_SUCCESS;
	}
	if (--r->registration_count > 0) {
		pthread_rwlock_unlock(&mem_lock);
		return HSAKMT_STATUS_SUCCESS;
	}
	remove_record(r);
	pthread_rwlock_unlock(&mem_lock);
	free(r);
	KFDSIM_DEBUG("DeregisterMemory %p", addr);
	return HSAKMT_STATUS_SUCCESS;
}

static void set_mapping(mem_record *r, uint64_t mask)
{
	__atomic_store_n(&r->a.mapped_mask, mask, __ATOMIC_RELEASE);
}

static HSAKMT_STATUS map_nodes(void *addr, HSAuint64 *alt, uint64_t mask, const char *call)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (addr == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find((uint64_t)(uintptr_t)addr);
	if (r == NULL) {
		pthread_rwlock_unlock(&mem_lock);
		KFDSIM_DEBUG("%s %p: not allocated or registered", call, addr);
		return HSAKMT_STATUS_ERROR;
	}
	HsaMemFlags rf;
	rf.Value = r->a.flags;
	if (rf.ui32.Scratch) {
		/* Scratch is backed by the queue's scratch aperture, not mapped by
		 * the process. */
		pthread_rwlock_unlock(&mem_lock);
		return HSAKMT_STATUS_INVALID_PARAMETER;
	}
	if (r->type == HSA_POINTER_REGISTERED_USER) {
		/* Like the real thunk: user pointers map to every node they are
		 * registered to, whatever nodes the call names. */
		mask = 0;
		for (uint32_t i = 0; i < r->n_registered; i++) mask |= 1ull << r->registered_nodes[i];
	}
	set_mapping(r, mask);
	KFDSIM_DEBUG("%s %p (allocation %#llx+%#llx) -> mapped to nodes mask %#llx", call, addr,
		     (unsigned long long)r->a.base, (unsigned long long)r->a.size, (unsigned long long)mask);
	pthread_rwlock_unlock(&mem_lock);
	if (alt) *alt = (HSAuint64)(uintptr_t)addr;
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtMapMemoryToGPU(void *addr, HSAuint64 size, HSAuint64 *alt)
{
	(void)size;
	return map_nodes(addr, alt, all_gpus_mask(), "MapMemoryToGPU");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtMapMemoryToGPUNodes(void *addr, HSAuint64 size, HSAuint64 *alt, HsaMemMapFlags f,
						   HSAuint64 n, HSAuint32 *nodes)
{
	(void)size;
	(void)f;
	if (n == 0 || nodes == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	uint64_t mask = 0;
	for (HSAuint64 i = 0; i < n; i++) {
		if (!kfdsim_is_gpu_node(nodes[i])) {
			KFDSIM_DEBUG("MapMemoryToGPUNodes %p: node %u is not a GPU", addr, nodes[i]);
			return HSAKMT_STATUS_INVALID_NODE_UNIT;
		}
		mask |= 1ull << nodes[i];
	}
	return map_nodes(addr, alt, mask, "MapMemoryToGPUNodes");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtUnmapMemoryToGPU(void *addr)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (addr == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find((uint64_t)(uintptr_t)addr);
	if (r != NULL) set_mapping(r, 0);
	pthread_rwlock_unlock(&mem_lock);
	KFDSIM_DEBUG("UnmapMemoryToGPU %p%s", addr, r ? "" : " (unknown: ignored)");
	/* The real thunk also returns success for memory it does not know. */
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtQueryPointerInfo(const void *ptr, HsaPointerInfo *info)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (info == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	memset(info, 0, sizeof *info);
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find((uint64_t)(uintptr_t)ptr);
	if (r == NULL) {
		pthread_rwlock_unlock(&mem_lock);
		info->Type = HSA_POINTER_UNKNOWN;
		return HSAKMT_STATUS_ERROR;
	}
	info->Type = r->type;
	info->Node = r->a.home_node;
	info->MemFlags.Value = r->a.flags;
	info->CPUAddress = (void *)(uintptr_t)r->a.base;
	info->GPUAddress = r->a.base;
	info->SizeInBytes = r->a.size;
	uint64_t mask = __atomic_load_n(&r->a.mapped_mask, __ATOMIC_ACQUIRE);
	uint32_t n = 0;
	for (uint32_t node = 1; node < KFDSIM_MAX_NODES; node++)
		if (mask & (1ull << node)) r->mapped_nodes[n++] = node;
	info->NMappedNodes = n;
	info->MappedNodes = r->mapped_nodes;
	if (r->type == HSA_POINTER_ALLOCATED) {
		/* An allocation is registered to the nodes it may be mapped to. */
		r->n_registered = 0;
		for (uint32_t node = 1; node <= (uint32_t)kfdsim_num_gpus; node++)
			r->registered_nodes[r->n_registered++] = node;
	}
	info->NRegisteredNodes = r->n_registered;
	info->RegisteredNodes = r->registered_nodes;
	info->UserData = r->user_data;
	pthread_rwlock_unlock(&mem_lock);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtSetMemoryUserData(const void *ptr, void *user)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	pthread_rwlock_wrlock(&mem_lock);
	mem_record *r = find((uint64_t)(uintptr_t)ptr);
	if (r) r->user_data = user;
	pthread_rwlock_unlock(&mem_lock);
	return r ? HSAKMT_STATUS_SUCCESS : HSAKMT_STATUS_INVALID_PARAMETER;
}

/* ---- the simulated GPU's side ------------------------------------------ */

__attribute__((visibility("default"))) bool kfdsim_lookup(uint64_t addr, kfdsim_alloc *out)
{
	pthread_rwlock_rdlock(&mem_lock);
	mem_record *r = find(addr);
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

/* Checks without raising a fault: 0 ok, else why not. */
static const char *access_problem(uint32_t gpu_node, uint64_t addr, uint64_t size, bool write, int *not_present)
{
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
	}
	pthread_rwlock_unlock(&mem_lock);
	return why;
}

__attribute__((visibility("default"))) bool kfdsim_gpu_access(uint32_t gpu_node, uint64_t addr, uint64_t size,
							      bool write)
{
	int not_present;
	const char *why = access_problem(gpu_node, addr, size, write, &not_present);
	if (why == NULL) return true;
	fprintf(stderr, "kfdsim: VM fault on GPU node %u: %s of %#llx+%llu: %s\n", gpu_node, write ? "write" : "read",
		(unsigned long long)addr, (unsigned long long)size, why);
	kfdsim_event_memory_fault(gpu_node, addr, write, not_present);
	if (kfdsim_current_queue != NULL)
		kfdsim_queue_fault(kfdsim_current_queue, KFDSIM_QERR_MEMORY_VIOLATION, "VM fault");
	return false;
}
