/*
 * The ioctls of the simulated /dev/kfd and DRM render nodes.
 *
 * /dev/kfd: the AMDKFD_IOC_* requests of amdgpu's uapi kfd_ioctl.h, decoded
 * by number (_IOC_NR) so that every thunk generation's request sizes are
 * answered: CREATE_QUEUE comes as 0xc0584b02 (thunks up to 6.2.4) and as
 * 0xc0604b02 (ROCr 6.4.3's built-in thunk, which adds sdma_engine_id); the
 * old DBG_TRAP (0x82, thunk 5.2.3) and the new one (0x26) both fail with
 * EINVAL, as on a kernel without the debugger interface, which every thunk
 * tolerates.
 *
 * Render nodes: DRM_IOCTL_VERSION ("amdgpu" 3.x), DRM_IOCTL_AMDGPU_INFO
 * (ACCEL_WORKING, DEV_INFO, READ_MMR_REG, HW_IP_COUNT/INFO, VRAM_GTT,
 * MEMORY, FW_VERSION), enough for libdrm_amdgpu's amdgpu_device_initialize
 * (the thunks call it for the marketing name; ROCr 6.x for clock rates) and
 * GEM_CLOSE. Buffer objects are allocated through KFD, never through GEM.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "kfdsim_int.h"

#define LDS_APERTURE 0x1000000000000ull
#define SCRATCH_APERTURE 0x2000000000000ull
#define GPUVM_BASE 0x1000000ull /* SVM_USER_BASE: above the first 16 MiB */
#define GPUVM_LIMIT 0x7fffffffffffull

/* CREATE_QUEUE of KFD 1.16+ (ROCr 6.4.3): the 1.8 layout plus sdma_engine_id. */
struct create_queue_args_v2 {
	struct kfd_ioctl_create_queue_args v1;
	uint32_t sdma_engine_id;
	uint32_t pad;
};


static int xnack_enabled;

static int gpu_arg(uint32_t gpu_id)
{
	int g = kfdsim_gpu_index_by_id(gpu_id);
	return g;
}

int kfdsim_kfd_ioctl(unsigned long req, void *arg)
{
	unsigned nr = _IOC_NR(req);
	unsigned size = _IOC_SIZE(req);
	if (arg == NULL && size != 0) return -EFAULT;
	switch (nr) {
	case KFD_NR_GET_VERSION: {
		struct kfd_ioctl_get_version_args *a = arg;
		/* The interface version of the kernel each release was built for:
		 * 1.8 (ROCm 5.2), 1.14 (5.7, with event ages), 1.16 (6.2/6.4). */
		int rel = kfdsim_release_major * 100 + kfdsim_release_minor;
		a->major_version = 1;
		a->minor_version = rel >= 602 ? 16 : rel >= 507 ? 14 : 8;
		return 0;
	}
	case KFD_NR_CREATE_QUEUE: {
		if (size != sizeof(struct kfd_ioctl_create_queue_args) && size != sizeof(struct create_queue_args_v2))
			return -EINVAL;
		struct kfd_ioctl_create_queue_args *a = arg;
		int g = gpu_arg(a->gpu_id);
		if (g < 0) return -EINVAL;
		uint32_t qid;
		uint64_t db;
		int rc = kfdsim_queue_create(g, a->queue_type, a->ring_base_address, a->ring_size,
					     a->read_pointer_address, a->write_pointer_address, a->queue_percentage, &qid,
					     &db);
		if (rc == 0) {
			a->queue_id = qid;
			a->doorbell_offset = db;
		}
		return rc;
	}
	case KFD_NR_DESTROY_QUEUE:
		return kfdsim_queue_destroy(((struct kfd_ioctl_destroy_queue_args *)arg)->queue_id);
	case KFD_NR_UPDATE_QUEUE: {
		struct kfd_ioctl_update_queue_args *a = arg;
		return kfdsim_queue_update(a->queue_id, a->queue_percentage);
	}
	case KFD_NR_SET_CU_MASK: {
		struct kfd_ioctl_set_cu_mask_args *a = arg;
		/* Every simulated CU is the same: a mask only has to be well formed. */
		if (a->num_cu_mask == 0 || a->num_cu_mask % 32 != 0 || a->cu_mask_ptr == 0) return -EINVAL;
		return kfdsim_queue_exists(a->queue_id) ? 0 : -EINVAL;
	}
	case KFD_NR_SET_MEMORY_POLICY: {
		struct kfd_ioctl_set_memory_policy_args *a = arg;
		if (gpu_arg(a->gpu_id) < 0) return -EINVAL;
		if (a->default_policy > KFD_IOC_CACHE_POLICY_NONCOHERENT ||
		    a->alternate_policy > KFD_IOC_CACHE_POLICY_NONCOHERENT)
			return -EINVAL;
		return 0;
	}
	case KFD_NR_GET_CLOCK_COUNTERS: {
		struct kfd_ioctl_get_clock_counters_args *a = arg;
		/* gpu_id 0 (the CPU node) gets the CPU and system clocks and a
		 * zero GPU clock (kfd_chardev.c, kfd_ioctl_get_clock_counters). */
		int g = a->gpu_id ? gpu_arg(a->gpu_id) : -1;
		if (a->gpu_id && g < 0) return -EINVAL;
		uint64_t now = kfdsim_now_ns();
		a->gpu_clock_counter = g >= 0 ? now : 0;
		a->cpu_clock_counter = now;
		a->system_clock_counter = now;
		a->system_clock_freq = 1000000000ull;
		return 0;
	}
	case KFD_NR_GET_PROCESS_APERTURES_NEW: {
		struct kfd_ioctl_get_process_apertures_new_args *a = arg;
		if (a->num_of_nodes == 0) {
			a->num_of_nodes = (uint32_t)kfdsim_num_gpus;
			return 0;
		}
		struct kfd_process_device_apertures *ap =
			(struct kfd_process_device_apertures *)(uintptr_t)a->kfd_process_device_apertures_ptr;
		uint32_t n = a->num_of_nodes < (uint32_t)kfdsim_num_gpus ? a->num_of_nodes : (uint32_t)kfdsim_num_gpus;
		for (uint32_t i = 0; i < n; i++) {
			memset(&ap[i], 0, sizeof ap[i]);
			/* kfd_flat_memory.c, kfd_init_apertures_v9 */
			ap[i].lds_base = LDS_APERTURE;
			ap[i].lds_limit = LDS_APERTURE + 0xffffffffull;
			ap[i].scratch_base = SCRATCH_APERTURE;
			ap[i].scratch_limit = SCRATCH_APERTURE + 0xffffffffull;
			ap[i].gpuvm_base = GPUVM_BASE;
			ap[i].gpuvm_limit = GPUVM_LIMIT;
			ap[i].gpu_id = kfdsim_gpus[i].gpu_id;
		}
		a->num_of_nodes = n;
		return 0;
	}
	case KFD_NR_GET_PROCESS_APERTURES:
		return -EINVAL; /* the old request: every thunk tries the new one first */
	case KFD_NR_ACQUIRE_VM: {
		struct kfd_ioctl_acquire_vm_args *a = arg;
		int g = gpu_arg(a->gpu_id);
		if (g < 0 || kfdsim_fd_render_gpu((int)a->drm_fd) != g) return -EINVAL;
		return 0;
	}
	case KFD_NR_ALLOC_MEMORY_OF_GPU: {
		struct kfd_ioctl_alloc_memory_of_gpu_args *a = arg;
		int g = gpu_arg(a->gpu_id);
		if (g < 0) return -EINVAL;
		uint64_t off = a->mmap_offset, handle = 0;
		int rc = kfdsim_mem_alloc(g, a->va_addr, a->size, a->flags, &off, &handle);
		if (rc == 0) {
			a->handle = handle;
			a->mmap_offset = off;
		}
		return rc;
	}
	case KFD_NR_FREE_MEMORY_OF_GPU:
		return kfdsim_mem_free(((struct kfd_ioctl_free_memory_of_gpu_args *)arg)->handle);
	case KFD_NR_MAP_MEMORY_TO_GPU:
	case KFD_NR_UNMAP_MEMORY_FROM_GPU: {
		struct kfd_ioctl_map_memory_to_gpu_args *a = arg;
		if (a->n_devices == 0 || a->device_ids_array_ptr == 0 || a->n_success > a->n_devices) return -EINVAL;
		return kfdsim_mem_map(a->handle, (const uint32_t *)(uintptr_t)a->device_ids_array_ptr, a->n_devices,
				      &a->n_success, nr == KFD_NR_MAP_MEMORY_TO_GPU);
	}
	case KFD_NR_CREATE_EVENT:
		return kfdsim_event_create(arg);
	case KFD_NR_DESTROY_EVENT:
		return kfdsim_event_destroy(((struct kfd_ioctl_destroy_event_args *)arg)->event_id);
	case KFD_NR_SET_EVENT:
		return kfdsim_event_set(((struct kfd_ioctl_set_event_args *)arg)->event_id, 1);
	case KFD_NR_RESET_EVENT:
		return kfdsim_event_set(((struct kfd_ioctl_reset_event_args *)arg)->event_id, 0);
	case KFD_NR_WAIT_EVENTS:
		return kfdsim_event_wait(arg);
	case KFD_NR_SET_SCRATCH_BACKING_VA: {
		struct kfd_ioctl_set_scratch_backing_va_args *a = arg;
		return gpu_arg(a->gpu_id) < 0 ? -EINVAL : 0;
	}
	case KFD_NR_GET_TILE_CONFIG: {
		struct kfd_ioctl_get_tile_config_args *a = arg;
		if (gpu_arg(a->gpu_id) < 0) return -EINVAL;
		/* gfx9+ has no tile mode tables; only the address config matters. */
		a->num_tile_configs = 0;
		a->num_macro_tile_configs = 0;
		a->gb_addr_config = 0x2a114042;
		a->num_banks = 16;
		a->num_ranks = 1;
		return 0;
	}
	case KFD_NR_SET_TRAP_HANDLER: {
		struct kfd_ioctl_set_trap_handler_args *a = arg;
		return gpu_arg(a->gpu_id) < 0 ? -EINVAL : 0;
	}
	case KFD_NR_SET_XNACK_MODE: {
		struct kfd_ioctl_set_xnack_mode_args *a = arg;
		/* The simulated GPUs have no retry faults (no page migration):
		 * only xnack-. A negative value queries. */
		if (a->xnack_enabled < 0) {
			a->xnack_enabled = xnack_enabled;
			return 0;
		}
		return a->xnack_enabled ? -EPERM : 0;
	}
	case KFD_NR_AVAILABLE_MEMORY: {
		struct kfd_ioctl_get_available_memory_args *a = arg;
		int g = gpu_arg(a->gpu_id);
		if (g < 0) return -EINVAL;
		a->available = kfdsim_mem_available(g);
		return 0;
	}
	case KFD_NR_SMI_EVENTS: {
		struct kfd_ioctl_smi_events_args *a = arg;
		if (gpu_arg(a->gpuid) < 0) return -EINVAL;
		/* An event file that reports nothing: the simulated GPUs have no
		 * thermal, reset or migration events. */
		int p[2];
		if (pipe2(p, O_CLOEXEC) != 0) return -errno;
		kfdsim_real_close(p[1]);
		a->anon_fd = (uint32_t)p[0];
		return 0;
	}
	case KFD_NR_SVM:
	case KFD_NR_ALLOC_QUEUE_GWS:
	case KFD_NR_GET_QUEUE_WAVE_STATE:
	case KFD_NR_GET_DMABUF_INFO:
	case KFD_NR_IMPORT_DMABUF:
	case KFD_NR_CRIU_OP:
	case KFD_NR_EXPORT_DMABUF:
	case KFD_NR_RUNTIME_ENABLE:
	case KFD_NR_DBG_TRAP:
	case KFD_NR_DBG_TRAP_OLD:
	default:
		KFDSIM_DEBUG("kfd ioctl %#lx (nr %#x): not modelled, EINVAL", req, nr);
		return -EINVAL;
	}
}

/* ---- DRM render node ---------------------------------------------------- */

struct drm_version_args {
	int version_major, version_minor, version_patchlevel;
	size_t name_len;
	char *name;
	size_t date_len;
	char *date;
	size_t desc_len;
	char *desc;
};

struct drm_amdgpu_info_args {
	uint64_t return_pointer;
	uint32_t return_size;
	uint32_t query;
	union {
		struct {
			uint32_t id, _pad;
		} mode_crtc;
		struct {
			uint32_t type, ip_instance;
		} query_hw_ip;
		struct {
			uint32_t dword_offset, count, instance, flags;
		} read_mmr_reg;
		uint32_t raw[4];
	};
};

/* drm_amdgpu_info_device as libdrm 2.4.114 knows it (368 bytes); newer
 * libdrm asks for more and gets zeros after these. */
struct amdgpu_dev_info {
	uint32_t device_id, chip_rev, external_rev, pci_rev, family, num_shader_engines,
		num_shader_arrays_per_engine, gpu_counter_freq;
	uint64_t max_engine_clock, max_memory_clock;
	uint32_t cu_active_number, cu_ao_mask, cu_bitmap[4][4];
	uint32_t enabled_rb_pipes_mask, num_rb_pipes, num_hw_gfx_contexts, pcie_gen;
	uint64_t ids_flags, virtual_address_offset, virtual_address_max;
	uint32_t virtual_address_alignment, pte_fragment_size, gart_page_size, ce_ram_size, vram_type, vram_bit_width,
		vce_harvest_config, gc_double_offchip_lds_buf;
	uint64_t prim_buf_gpu_addr, pos_buf_gpu_addr, cntl_sb_buf_gpu_addr, param_buf_gpu_addr;
	uint32_t prim_buf_size, pos_buf_size, cntl_sb_buf_size, param_buf_size, wave_front_size,
		num_shader_visible_vgprs, num_cu_per_sh, num_tcc_blocks, gs_vgt_table_depth, gs_prim_buffer_depth,
		max_gs_waves_per_vgt, pcie_num_lanes, cu_ao_bitmap[4][4];
	uint64_t high_va_offset, high_va_max;
	uint32_t pa_sc_tile_steering_override, _pad;
	uint64_t tcc_disabled_mask;
};
_Static_assert(sizeof(struct amdgpu_dev_info) == 368, "drm_amdgpu_info_device of libdrm 2.4.114");

static int copy_out(const struct drm_amdgpu_info_args *a, const void *src, size_t n)
{
	if (a->return_pointer == 0) return -EFAULT;
	void *dst = (void *)(uintptr_t)a->return_pointer;
	memset(dst, 0, a->return_size);
	memcpy(dst, src, n < a->return_size ? n : a->return_size);
	return 0;
}

static int version_string(char *dst, size_t *len, const char *s)
{
	size_t n = strlen(s);
	if (dst && *len) memcpy(dst, s, n < *len ? n : *len);
	*len = n;
	return 0;
}

int kfdsim_drm_ioctl(int gpu, unsigned long req, void *arg)
{
	const kfdsim_gpu *g = &kfdsim_gpus[gpu];
	if (_IOC_TYPE(req) != 'd') return -ENOTTY;
	unsigned nr = _IOC_NR(req);
	if (nr == 0x00) { /* DRM_IOCTL_VERSION */
		struct drm_version_args *v = arg;
		v->version_major = 3;
		v->version_minor = 42;
		v->version_patchlevel = 0;
		version_string(v->name, &v->name_len, "amdgpu");
		version_string(v->date, &v->date_len, "20150101");
		version_string(v->desc, &v->desc_len, "AMD GPU (kfdsim)");
		return 0;
	}
	if (nr == 0x09) return 0; /* DRM_IOCTL_GEM_CLOSE: no GEM objects exist */
	if (nr != 0x45) {         /* DRM_IOCTL_AMDGPU_INFO */
		KFDSIM_DEBUG("drm ioctl %#lx (nr %#x): not modelled, EINVAL", req, nr);
		return -EINVAL;
	}
	struct drm_amdgpu_info_args *a = arg;
	switch (a->query) {
	case 0x00: { /* AMDGPU_INFO_ACCEL_WORKING */
		uint32_t one = 1;
		return copy_out(a, &one, sizeof one);
	}
	case 0x03: { /* AMDGPU_INFO_HW_IP_COUNT */
		uint32_t n = a->query_hw_ip.type <= 8 ? 1 : 0;
		return copy_out(a, &n, sizeof n);
	}
	case 0x02: { /* AMDGPU_INFO_HW_IP_INFO */
		struct {
			uint32_t major, minor;
			uint64_t caps;
			uint32_t ib_start_alignment, ib_size_alignment, available_rings, ip_discovery_version;
		} ip = {g->major, g->minor, 0, 32, 32, 1, 0};
		return copy_out(a, &ip, sizeof ip);
	}
	case 0x0e: { /* AMDGPU_INFO_FW_VERSION */
		uint32_t fw[2] = {0, 0};
		return copy_out(a, fw, sizeof fw);
	}
	case 0x14: { /* AMDGPU_INFO_VRAM_GTT */
		uint64_t v[3] = {KFDSIM_VRAM_BYTES, KFDSIM_VRAM_BYTES, kfdsim_system_memory_bytes() / 2};
		return copy_out(a, v, sizeof v);
	}
	case 0x19: { /* AMDGPU_INFO_MEMORY */
		uint64_t m[12] = {KFDSIM_VRAM_BYTES, KFDSIM_VRAM_BYTES, 0, KFDSIM_VRAM_BYTES,
				  KFDSIM_VRAM_BYTES, KFDSIM_VRAM_BYTES, 0, KFDSIM_VRAM_BYTES,
				  kfdsim_system_memory_bytes() / 2, kfdsim_system_memory_bytes() / 2, 0,
				  kfdsim_system_memory_bytes() / 2};
		return copy_out(a, m, sizeof m);
	}
	case 0x15: { /* AMDGPU_INFO_READ_MMR_REG */
		uint32_t n = a->read_mmr_reg.count;
		if (n == 0 || n > 256) return -EINVAL;
		uint32_t regs[256];
		memset(regs, 0, n * sizeof regs[0]);
		if (a->read_mmr_reg.dword_offset == 0x263e) regs[0] = 0x2a114042; /* GB_ADDR_CONFIG */
		return copy_out(a, regs, n * sizeof regs[0]);
	}
	case 0x16: { /* AMDGPU_INFO_DEV_INFO */
		struct amdgpu_dev_info d;
		memset(&d, 0, sizeof d);
		d.device_id = g->device_id;
		d.chip_rev = 0;
		d.external_rev = 0x3c;
		d.pci_rev = 0x02;
		d.family = g->major >= 11 ? 145 : g->major == 10 ? 143 : 141; /* GC_11_0_0, NV, AI */
		d.num_shader_engines = g->shader_engines;
		d.num_shader_arrays_per_engine = 1;
		d.gpu_counter_freq = 100000; /* KHz */
		d.max_engine_clock = 1700000;
		d.max_memory_clock = 1600000;
		d.cu_active_number = g->cus;
		for (uint32_t i = 0; i < g->cus && i < 128; i++) d.cu_bitmap[(i / 32) % 4][0] |= 1u << (i % 32);
		d.num_rb_pipes = 4;
		d.enabled_rb_pipes_mask = 0xf;
		d.virtual_address_offset = 0x200000;
		d.virtual_address_max = 0x7fffffffffffull;
		d.virtual_address_alignment = 4096;
		d.pte_fragment_size = 2 * 1024 * 1024;
		d.gart_page_size = 4096;
		d.vram_type = 9; /* HBM */
		d.vram_bit_width = 4096;
		d.wave_front_size = g->wave_size;
		d.num_shader_visible_vgprs = 256;
		d.num_cu_per_sh = g->cus / (g->shader_engines ? g->shader_engines : 1);
		d.num_tcc_blocks = 16;
		d.high_va_offset = 0xffff800000000000ull;
		d.high_va_max = 0xffffffffffffffffull;
		return copy_out(a, &d, sizeof d);
	}
	default:
		KFDSIM_DEBUG("AMDGPU_INFO query %#x: not modelled, EINVAL", a->query);
		return -EINVAL;
	}
}
