/*
 * The KFD ioctl interface as the simulated driver answers it: request
 * numbers and argument layouts of amdgpu's uapi kfd_ioctl.h (interface 1.8
 * of ROCm 5.2's thunk up to 1.17 of ROCm 6.4's). Written out here so the
 * build needs no kernel or libdrm headers; layouts are the kernel ABI.
 */
#ifndef KFDSIM_KFD_UAPI_H
#define KFDSIM_KFD_UAPI_H

#include <linux/ioctl.h>
#include <stdint.h>

#define AMDKFD_IOCTL_BASE 'K'

struct kfd_ioctl_get_version_args {
	uint32_t major_version, minor_version;
};

#define KFD_IOC_QUEUE_TYPE_COMPUTE 0x0
#define KFD_IOC_QUEUE_TYPE_SDMA 0x1
#define KFD_IOC_QUEUE_TYPE_COMPUTE_AQL 0x2
#define KFD_IOC_QUEUE_TYPE_SDMA_XGMI 0x3
#define KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID 0x4 /* 1.16 */

/* 88 bytes up to interface 1.15; 1.16 appends sdma_engine_id and a pad. */
struct kfd_ioctl_create_queue_args {
	uint64_t ring_base_address, write_pointer_address, read_pointer_address, doorbell_offset;
	uint32_t ring_size, gpu_id, queue_type, queue_percentage, queue_priority, queue_id;
	uint64_t eop_buffer_address, eop_buffer_size, ctx_save_restore_address;
	uint32_t ctx_save_restore_size, ctl_stack_size;
};
_Static_assert(sizeof(struct kfd_ioctl_create_queue_args) == 0x58, "create_queue 1.8");

struct kfd_ioctl_destroy_queue_args {
	uint32_t queue_id, pad;
};

struct kfd_ioctl_update_queue_args {
	uint64_t ring_base_address;
	uint32_t queue_id, ring_size, queue_percentage, queue_priority;
};

struct kfd_ioctl_set_cu_mask_args {
	uint32_t queue_id, num_cu_mask;
	uint64_t cu_mask_ptr;
};

#define KFD_IOC_CACHE_POLICY_COHERENT 0
#define KFD_IOC_CACHE_POLICY_NONCOHERENT 1

struct kfd_ioctl_set_memory_policy_args {
	uint64_t alternate_aperture_base, alternate_aperture_size;
	uint32_t gpu_id, default_policy, alternate_policy, pad;
};

struct kfd_ioctl_get_clock_counters_args {
	uint64_t gpu_clock_counter, cpu_clock_counter, system_clock_counter, system_clock_freq;
	uint32_t gpu_id, pad;
};

struct kfd_process_device_apertures {
	uint64_t lds_base, lds_limit, scratch_base, scratch_limit, gpuvm_base, gpuvm_limit;
	uint32_t gpu_id, pad;
};

struct kfd_ioctl_get_process_apertures_new_args {
	uint64_t kfd_process_device_apertures_ptr;
	uint32_t num_of_nodes, pad;
};

#define KFD_IOC_EVENT_SIGNAL 0
#define KFD_IOC_EVENT_NODECHANGE 1
#define KFD_IOC_EVENT_DEVICESTATECHANGE 2
#define KFD_IOC_EVENT_HW_EXCEPTION 3
#define KFD_IOC_EVENT_SYSTEM_EVENT 4
#define KFD_IOC_EVENT_DEBUG_EVENT 5
#define KFD_IOC_EVENT_PROFILE_EVENT 6
#define KFD_IOC_EVENT_QUEUE_EVENT 7
#define KFD_IOC_EVENT_MEMORY 8

#define KFD_IOC_WAIT_RESULT_COMPLETE 0
#define KFD_IOC_WAIT_RESULT_TIMEOUT 1
#define KFD_IOC_WAIT_RESULT_FAIL 2

struct kfd_ioctl_create_event_args {
	uint64_t event_page_offset;
	uint32_t event_trigger_data, event_type, auto_reset, node_id, event_id, event_slot_index;
};

struct kfd_ioctl_destroy_event_args {
	uint32_t event_id, pad;
};

struct kfd_ioctl_set_event_args {
	uint32_t event_id, pad;
};

struct kfd_ioctl_reset_event_args {
	uint32_t event_id, pad;
};

struct kfd_memory_exception_failure {
	uint32_t NotPresent, ReadOnly, NoExecute, imprecise;
};

struct kfd_hsa_memory_exception_data {
	struct kfd_memory_exception_failure failure;
	uint64_t va;
	uint32_t gpu_id, ErrorType;
};

/* The union is 32 bytes; 1.14 adds signal_event_data (last_event_age, a
 * u64 at offset 0) to it. */
struct kfd_event_data {
	union {
		struct kfd_hsa_memory_exception_data memory_exception_data;
		uint64_t last_event_age;
		uint8_t raw[32];
	};
	uint64_t kfd_event_data_ext;
	uint32_t event_id, pad;
};
_Static_assert(sizeof(struct kfd_event_data) == 48, "kfd_event_data");

struct kfd_ioctl_wait_events_args {
	uint64_t events_ptr;
	uint32_t num_events, wait_for_all, timeout, wait_result;
};

struct kfd_ioctl_set_scratch_backing_va_args {
	uint64_t va_addr;
	uint32_t gpu_id, pad;
};

struct kfd_ioctl_get_tile_config_args {
	uint64_t tile_config_ptr, macro_tile_config_ptr;
	uint32_t num_tile_configs, num_macro_tile_configs, gpu_id, gb_addr_config, num_banks, num_ranks;
};

struct kfd_ioctl_set_trap_handler_args {
	uint64_t tba_addr, tma_addr;
	uint32_t gpu_id, pad;
};

struct kfd_ioctl_acquire_vm_args {
	uint32_t drm_fd, gpu_id;
};

#define KFD_IOC_ALLOC_MEM_FLAGS_VRAM (1u << 0)
#define KFD_IOC_ALLOC_MEM_FLAGS_GTT (1u << 1)
#define KFD_IOC_ALLOC_MEM_FLAGS_USERPTR (1u << 2)
#define KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL (1u << 3)
#define KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP (1u << 4)
#define KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE (1u << 31)
#define KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE (1u << 30)
#define KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC (1u << 29)
#define KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE (1u << 28)
#define KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM (1u << 27)
#define KFD_IOC_ALLOC_MEM_FLAGS_COHERENT (1u << 26)
#define KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED (1u << 25)

struct kfd_ioctl_alloc_memory_of_gpu_args {
	uint64_t va_addr, size, handle, mmap_offset;
	uint32_t gpu_id, flags;
};

struct kfd_ioctl_free_memory_of_gpu_args {
	uint64_t handle;
};

struct kfd_ioctl_map_memory_to_gpu_args {
	uint64_t handle, device_ids_array_ptr;
	uint32_t n_devices, n_success;
};

struct kfd_ioctl_smi_events_args {
	uint32_t gpuid, anon_fd;
};

struct kfd_ioctl_set_xnack_mode_args {
	int32_t xnack_enabled;
};

struct kfd_ioctl_get_available_memory_args {
	uint64_t available;
	uint32_t gpu_id, pad;
};

/* Request numbers (_IOC_NR); the sizes vary by interface version for a few. */
enum {
	KFD_NR_GET_VERSION = 0x01,
	KFD_NR_CREATE_QUEUE = 0x02,
	KFD_NR_DESTROY_QUEUE = 0x03,
	KFD_NR_SET_MEMORY_POLICY = 0x04,
	KFD_NR_GET_CLOCK_COUNTERS = 0x05,
	KFD_NR_GET_PROCESS_APERTURES = 0x06,
	KFD_NR_UPDATE_QUEUE = 0x07,
	KFD_NR_CREATE_EVENT = 0x08,
	KFD_NR_DESTROY_EVENT = 0x09,
	KFD_NR_SET_EVENT = 0x0a,
	KFD_NR_RESET_EVENT = 0x0b,
	KFD_NR_WAIT_EVENTS = 0x0c,
	KFD_NR_SET_SCRATCH_BACKING_VA = 0x11,
	KFD_NR_GET_TILE_CONFIG = 0x12,
	KFD_NR_SET_TRAP_HANDLER = 0x13,
	KFD_NR_GET_PROCESS_APERTURES_NEW = 0x14,
	KFD_NR_ACQUIRE_VM = 0x15,
	KFD_NR_ALLOC_MEMORY_OF_GPU = 0x16,
	KFD_NR_FREE_MEMORY_OF_GPU = 0x17,
	KFD_NR_MAP_MEMORY_TO_GPU = 0x18,
	KFD_NR_UNMAP_MEMORY_FROM_GPU = 0x19,
	KFD_NR_SET_CU_MASK = 0x1a,
	KFD_NR_GET_QUEUE_WAVE_STATE = 0x1b,
	KFD_NR_GET_DMABUF_INFO = 0x1c,
	KFD_NR_IMPORT_DMABUF = 0x1d,
	KFD_NR_ALLOC_QUEUE_GWS = 0x1e,
	KFD_NR_SMI_EVENTS = 0x1f,
	KFD_NR_SVM = 0x20,
	KFD_NR_SET_XNACK_MODE = 0x21,
	KFD_NR_CRIU_OP = 0x22,
	KFD_NR_AVAILABLE_MEMORY = 0x23,
	KFD_NR_EXPORT_DMABUF = 0x24,
	KFD_NR_RUNTIME_ENABLE = 0x25,
	KFD_NR_DBG_TRAP = 0x26,
	KFD_NR_DBG_TRAP_OLD = 0x82, /* thunk 5.2.3's debugger interface */
};

#endif /* KFDSIM_KFD_UAPI_H */
