/*
 * abi.c prints the C side of everything the Go package hsa encodes by hand:
 * struct sizes and field offsets, enum values, AQL header values built with
 * the header's own enums, and hex dumps of packets filled field by field.
 * abi_test.go compares each line with the Go values; gen_golden.sh stores
 * the output as abi_golden.txt so machines without the ROCm headers still
 * check the Go side against it.
 *
 * Output: one "KEY VALUE" line each; VALUE is decimal, or hex bytes for
 * dump(...) keys. Only the build's own headers are used (no GPU needed).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/amd_hsa_queue.h>

#define V(name) printf("%s %llu\n", #name, (unsigned long long)(name))
#define KV(key, val) printf("%s %llu\n", key, (unsigned long long)(val))
#define SIZE(T) printf("sizeof(%s) %zu\n", #T, sizeof(T))
#define OFF(T, f) printf("offsetof(%s.%s) %zu\n", #T, #f, offsetof(T, f))
#define LEN(T, f) printf("lengthof(%s.%s) %zu\n", #T, #f, sizeof(((T *)0)->f) / sizeof(((T *)0)->f[0]))

static void dump(const char *name, const void *p, size_t n) {
  const unsigned char *b = p;
  printf("dump(%s) ", name);
  for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
  printf("\n");
}

static uint16_t header(hsa_packet_type_t type, int barrier, hsa_fence_scope_t acquire,
                       hsa_fence_scope_t release) {
  return (uint16_t)((type << HSA_PACKET_HEADER_TYPE) | (barrier << HSA_PACKET_HEADER_BARRIER) |
                    (acquire << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                    (release << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
}

int main(void) {
  /* Layouts. */
  SIZE(hsa_kernel_dispatch_packet_t);
  OFF(hsa_kernel_dispatch_packet_t, header);
  OFF(hsa_kernel_dispatch_packet_t, setup);
  OFF(hsa_kernel_dispatch_packet_t, workgroup_size_x);
  OFF(hsa_kernel_dispatch_packet_t, workgroup_size_y);
  OFF(hsa_kernel_dispatch_packet_t, workgroup_size_z);
  OFF(hsa_kernel_dispatch_packet_t, reserved0);
  OFF(hsa_kernel_dispatch_packet_t, grid_size_x);
  OFF(hsa_kernel_dispatch_packet_t, grid_size_y);
  OFF(hsa_kernel_dispatch_packet_t, grid_size_z);
  OFF(hsa_kernel_dispatch_packet_t, private_segment_size);
  OFF(hsa_kernel_dispatch_packet_t, group_segment_size);
  OFF(hsa_kernel_dispatch_packet_t, kernel_object);
  OFF(hsa_kernel_dispatch_packet_t, kernarg_address);
  OFF(hsa_kernel_dispatch_packet_t, reserved2);
  OFF(hsa_kernel_dispatch_packet_t, completion_signal);

  SIZE(hsa_barrier_and_packet_t);
  OFF(hsa_barrier_and_packet_t, header);
  OFF(hsa_barrier_and_packet_t, reserved0);
  OFF(hsa_barrier_and_packet_t, reserved1);
  OFF(hsa_barrier_and_packet_t, dep_signal);
  LEN(hsa_barrier_and_packet_t, dep_signal);
  OFF(hsa_barrier_and_packet_t, reserved2);
  OFF(hsa_barrier_and_packet_t, completion_signal);

  SIZE(hsa_barrier_or_packet_t);
  OFF(hsa_barrier_or_packet_t, header);
  OFF(hsa_barrier_or_packet_t, reserved0);
  OFF(hsa_barrier_or_packet_t, reserved1);
  OFF(hsa_barrier_or_packet_t, dep_signal);
  LEN(hsa_barrier_or_packet_t, dep_signal);
  OFF(hsa_barrier_or_packet_t, reserved2);
  OFF(hsa_barrier_or_packet_t, completion_signal);

  SIZE(hsa_queue_t);
  OFF(hsa_queue_t, type);
  OFF(hsa_queue_t, features);
  OFF(hsa_queue_t, base_address);
  OFF(hsa_queue_t, doorbell_signal);
  OFF(hsa_queue_t, size);
  OFF(hsa_queue_t, reserved1);
  OFF(hsa_queue_t, id);
  OFF(amd_queue_t, queue_inactive_signal);

  /* Types the binding passes as one 64-bit register or reads as 32 bits. */
  SIZE(hsa_agent_t);
  SIZE(hsa_amd_profiling_dispatch_time_t);
  OFF(hsa_amd_profiling_dispatch_time_t, start);
  OFF(hsa_amd_profiling_dispatch_time_t, end);
  SIZE(hsa_signal_t);
  SIZE(hsa_amd_memory_pool_t);
  SIZE(hsa_isa_t);
  SIZE(hsa_executable_t);
  SIZE(hsa_executable_symbol_t);
  SIZE(hsa_code_object_reader_t);
  SIZE(hsa_signal_value_t);
  SIZE(hsa_status_t);
  SIZE(hsa_queue_type32_t);
  SIZE(hsa_agent_info_t);
  SIZE(hsa_signal_condition_t);
  SIZE(hsa_wait_state_t);

  /* hsa_status_t */
  V(HSA_STATUS_SUCCESS);
  V(HSA_STATUS_INFO_BREAK);
  V(HSA_STATUS_ERROR);
  V(HSA_STATUS_ERROR_INVALID_ARGUMENT);
  V(HSA_STATUS_ERROR_INVALID_QUEUE_CREATION);
  V(HSA_STATUS_ERROR_INVALID_ALLOCATION);
  V(HSA_STATUS_ERROR_INVALID_AGENT);
  V(HSA_STATUS_ERROR_INVALID_REGION);
  V(HSA_STATUS_ERROR_INVALID_SIGNAL);
  V(HSA_STATUS_ERROR_INVALID_QUEUE);
  V(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
  V(HSA_STATUS_ERROR_INVALID_PACKET_FORMAT);
  V(HSA_STATUS_ERROR_RESOURCE_FREE);
  V(HSA_STATUS_ERROR_NOT_INITIALIZED);
  V(HSA_STATUS_ERROR_INVALID_ISA);
  V(HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
  V(HSA_STATUS_ERROR_INVALID_EXECUTABLE);
  V(HSA_STATUS_ERROR_FROZEN_EXECUTABLE);
  V(HSA_STATUS_ERROR_INVALID_SYMBOL_NAME);
  V(HSA_STATUS_ERROR_EXCEPTION);
  V(HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER);
  V(HSA_STATUS_ERROR_FATAL);
  V(HSA_STATUS_ERROR_MEMORY_FAULT);
  V(HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION);

  /* hsa_device_type_t */
  V(HSA_DEVICE_TYPE_CPU);
  V(HSA_DEVICE_TYPE_GPU);
  V(HSA_DEVICE_TYPE_DSP);

  /* hsa_agent_info_t and the AMD extension */
  V(HSA_AGENT_INFO_NAME);
  V(HSA_AGENT_INFO_VENDOR_NAME);
  V(HSA_AGENT_INFO_FEATURE);
  V(HSA_AGENT_INFO_WAVEFRONT_SIZE);
  V(HSA_AGENT_INFO_QUEUES_MAX);
  V(HSA_AGENT_INFO_QUEUE_MIN_SIZE);
  V(HSA_AGENT_INFO_QUEUE_MAX_SIZE);
  V(HSA_AGENT_INFO_NODE);
  V(HSA_AGENT_INFO_DEVICE);
  V(HSA_AMD_AGENT_INFO_PRODUCT_NAME);
  V(HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT);
  V(HSA_AMD_AGENT_INFO_BDFID);
  V(HSA_AMD_AGENT_INFO_DOMAIN);

  /* hsa_isa_info_t, hsa_system_info_t */
  V(HSA_ISA_INFO_NAME_LENGTH);
  V(HSA_ISA_INFO_NAME);
  V(HSA_SYSTEM_INFO_VERSION_MAJOR);
  V(HSA_SYSTEM_INFO_VERSION_MINOR);
  V(HSA_SYSTEM_INFO_TIMESTAMP);
  V(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY);
  V(HSA_AMD_SYSTEM_INFO_BUILD_VERSION);

  /* Queues and signals */
  V(HSA_QUEUE_TYPE_MULTI);
  V(HSA_QUEUE_TYPE_SINGLE);
  V(HSA_SIGNAL_CONDITION_EQ);
  V(HSA_SIGNAL_CONDITION_NE);
  V(HSA_SIGNAL_CONDITION_LT);
  V(HSA_SIGNAL_CONDITION_GTE);
  V(HSA_WAIT_STATE_BLOCKED);
  V(HSA_WAIT_STATE_ACTIVE);
  V(HSA_AMD_SIGNAL_AMD_GPU_ONLY);
  V(HSA_AMD_SIGNAL_IPC);
  V(UINT64_MAX);
  V(UINT32_MAX);

  /* Memory pools */
  V(HSA_AMD_MEMORY_POOL_INFO_SEGMENT);
  V(HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS);
  V(HSA_AMD_MEMORY_POOL_INFO_SIZE);
  V(HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED);
  V(HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE);
  V(HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT);
  V(HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL);
  V(HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE);
  V(HSA_AMD_SEGMENT_GLOBAL);
  V(HSA_AMD_SEGMENT_READONLY);
  V(HSA_AMD_SEGMENT_PRIVATE);
  V(HSA_AMD_SEGMENT_GROUP);
  V(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT);
  V(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED);
  V(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED);
  V(HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS);
  V(HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED);
  V(HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT);
  V(HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT);

  /* Executables and symbols */
  V(HSA_PROFILE_BASE);
  V(HSA_PROFILE_FULL);
  V(HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT);
  V(HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE);
  V(HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT);
  V(HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE);
  V(HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE);
  V(HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT);

  /* AQL packet types, header bits, fence scopes */
  V(HSA_PACKET_TYPE_VENDOR_SPECIFIC);
  V(HSA_PACKET_TYPE_INVALID);
  V(HSA_PACKET_TYPE_KERNEL_DISPATCH);
  V(HSA_PACKET_TYPE_BARRIER_AND);
  V(HSA_PACKET_TYPE_AGENT_DISPATCH);
  V(HSA_PACKET_TYPE_BARRIER_OR);
  V(HSA_PACKET_HEADER_TYPE);
  V(HSA_PACKET_HEADER_WIDTH_TYPE);
  V(HSA_PACKET_HEADER_BARRIER);
  V(HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE);
  V(HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE);
  V(HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
  V(HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE);
  V(HSA_FENCE_SCOPE_NONE);
  V(HSA_FENCE_SCOPE_AGENT);
  V(HSA_FENCE_SCOPE_SYSTEM);
  V(HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
  V(HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS);

  /* Header values built from the enums. */
  KV("header(KERNEL_DISPATCH,0,SYSTEM,SYSTEM)",
     header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM));
  KV("header(KERNEL_DISPATCH,1,SYSTEM,SYSTEM)",
     header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM));
  KV("header(KERNEL_DISPATCH,1,AGENT,AGENT)",
     header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, HSA_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_AGENT));
  KV("header(KERNEL_DISPATCH,1,NONE,SYSTEM)",
     header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, HSA_FENCE_SCOPE_NONE, HSA_FENCE_SCOPE_SYSTEM));
  KV("header(BARRIER_AND,1,SYSTEM,SYSTEM)",
     header(HSA_PACKET_TYPE_BARRIER_AND, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM));
  KV("header(BARRIER_OR,1,SYSTEM,SYSTEM)",
     header(HSA_PACKET_TYPE_BARRIER_OR, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM));
  KV("first_word(INVALID)", HSA_PACKET_TYPE_INVALID << HSA_PACKET_HEADER_TYPE);
  KV("first_word(KERNEL_DISPATCH,1,SYSTEM,SYSTEM,dims=1)",
     (uint32_t)header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM) |
         ((uint32_t)(1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) << 16));

  /* Packets with a distinct value in every field (abi_test.go fills the
     same values from Go). Reserved fields stay zero, as the encoders
     write them. */
  hsa_kernel_dispatch_packet_t d;
  memset(&d, 0, sizeof d);
  d.header = header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_AGENT);
  d.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  d.workgroup_size_x = 0x0102;
  d.workgroup_size_y = 0x0304;
  d.workgroup_size_z = 0x0506;
  d.grid_size_x = 0x11121314;
  d.grid_size_y = 0x15161718;
  d.grid_size_z = 0x191a1b1c;
  d.private_segment_size = 0x21222324;
  d.group_segment_size = 0x31323334;
  d.kernel_object = 0x4142434445464748ULL;
  d.kernarg_address = (void *)(uintptr_t)0x5152535455565758ULL;
  d.completion_signal.handle = 0x6162636465666768ULL;
  dump("hsa_kernel_dispatch_packet_t", &d, sizeof d);

  hsa_barrier_and_packet_t ba;
  memset(&ba, 0, sizeof ba);
  ba.header = header(HSA_PACKET_TYPE_BARRIER_AND, 1, HSA_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_SYSTEM);
  for (int i = 0; i < 5; i++) ba.dep_signal[i].handle = 0x7172737475767770ULL + (uint64_t)i;
  ba.completion_signal.handle = 0x8182838485868788ULL;
  dump("hsa_barrier_and_packet_t", &ba, sizeof ba);

  /* A zero dependency handle counts as satisfied: a sparse OR packet. */
  hsa_barrier_or_packet_t bo;
  memset(&bo, 0, sizeof bo);
  bo.header = header(HSA_PACKET_TYPE_BARRIER_OR, 0, HSA_FENCE_SCOPE_NONE, HSA_FENCE_SCOPE_SYSTEM);
  bo.dep_signal[1].handle = 0x9192939495969798ULL;
  bo.dep_signal[4].handle = 0xa1a2a3a4a5a6a7a8ULL;
  dump("hsa_barrier_or_packet_t", &bo, sizeof bo);
  /* System events (hsa_amd_register_system_event_handler). */
  SIZE(hsa_amd_event_t);
  OFF(hsa_amd_event_t, event_type);
  OFF(hsa_amd_event_t, memory_fault);
  SIZE(hsa_amd_gpu_memory_fault_info_t);
  OFF(hsa_amd_gpu_memory_fault_info_t, agent);
  OFF(hsa_amd_gpu_memory_fault_info_t, virtual_address);
  OFF(hsa_amd_gpu_memory_fault_info_t, fault_reason_mask);
  SIZE(hsa_amd_event_type_t);
  V(HSA_AMD_GPU_MEMORY_FAULT_EVENT);
  V(HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT);
  V(HSA_AMD_MEMORY_FAULT_READ_ONLY);
  V(HSA_AMD_MEMORY_FAULT_NX);
  V(HSA_AMD_MEMORY_FAULT_HOST_ONLY);
  V(HSA_AMD_MEMORY_FAULT_DRAMECC);
  V(HSA_AMD_MEMORY_FAULT_IMPRECISE);
  V(HSA_AMD_MEMORY_FAULT_SRAMECC);
  V((uint32_t)HSA_AMD_MEMORY_FAULT_HANG);
  return 0;
}
