// Package kfdsim builds and runs a simulated AMD kernel driver for tests.
//
// No machine rocsync's CI runs on has an AMD GPU, and the CPU emulator
// (internal/emu) is only as strict as its authors made it. kfdsim goes one
// step further: it replaces libhsakmt.so.1, the user-space thunk through
// which ROCr reaches /dev/kfd, with a C model of KFD and a GPU (csrc/), so
// Debian's REAL ROCr 5.2.3 (libhsa-runtime64.so.1) and HIP 5.2.3
// (libamdhip64.so.5) run unmodified on top of it, the way Mesa's drm-shim
// runs real GPU user space over a fake kernel. The simulated GPU checks
// every access its command processor and executor make against the
// driver's mapping records, so a buffer that was never made accessible to
// the GPU (hsa_amd_agents_allow_access) is a VM fault here as it is on
// hardware, reported the way KFD reports one.
//
// Library builds the thunk with gcc into a content-addressed cache.
// A test runs under the simulated driver by re-executing its own test
// binary as a child process with LD_LIBRARY_PATH pointing at that cache
// entry (the dynamic loader picks the thunk before ROCr is loaded); see
// Command and Run. The GPUs the child sees are given by a spec such as
// "gfx90a@0000:83:00.0,gfx1030@0000:03:00.0" (grammar in csrc/thunk.c and
// on Spec).
//
// # The C side (libhsakmt.so.1)
//
// Besides the hsaKmt* functions of version node HSAKMT_1 (the 42 ROCr 5.2.3
// imports, plus hsaKmtResetEvent, hsaKmtQueryEventState,
// hsaKmtRegisterMemory and hsaKmtRegisterMemoryToNodes), the library exports:
//
//	int  kfdsim_configure(const char *spec)   GPUs for the next hsaKmtOpenKFD
//	bool kfdsim_lookup(uint64_t addr, kfdsim_alloc *out)        (kfdsim.h)
//	bool kfdsim_gpu_access(uint32_t node, uint64_t addr, uint64_t size, bool write)
//	void kfdsim_set_executor(kfdsim_executor_fn fn)             (exec.c)
//	uint64_t kfdsim_test_blocked_waits(void)  event waits that went to sleep
//	uint64_t kfdsim_test_sdma_packets(void)   SDMA packets completed
//
// Spec grammar: gpu{,gpu}, gpu = target[@[domain:]bus:device.function], target
// one of gfx908, gfx90a, gfx1030 (the ROCm 5.2 targets modelled), at most 8
// GPUs, numbers in hex. GPU i is KFD node i+1 (node 0 is the CPU), so HSA
// agent order is spec order; PCI order may differ. A bad spec makes
// hsaKmtOpenKFD fail with "kfdsim: hsaKmtOpenKFD fails: bad GPU spec ..." on
// stderr. Neither kfdsim_configure nor KFDSIM_GPUS: one gfx90a at
// 0000:03:00.0.
//
// Environment: KFDSIM_GPUS (the spec), KFDSIM_DEBUG=1 (trace every thunk
// call, queue packet and fault to stderr), KFDSIM_VMFAULT_QUEUE_ERROR=0 (a
// VM fault stops its queue without a queue error, as on KFD without the
// debugger interface), KFDSIM_P2P=1 (every two GPUs are linked, as KFD lists
// P2P links: ROCr then lets one GPU be allowed access to another's memory,
// and HIP's peer access works), and, for the Go side,
// ROCSYNC_KFDSIM_CHILD (set in child test processes) and
// ROCSYNC_KFDSIM_REQUIRED=1 (CI: a machine that cannot build the library
// fails instead of skipping).
//
// # What the simulated GPU enforces
//
//   - Memory: every access of the command processor, the SDMA engine and the
//     executor must fall inside one allocation mapped to that GPU.
//     MapMemoryToGPUNodes replaces the node set (as the real thunk does), so
//     a second hsa_amd_agents_allow_access REPLACES the first one's agents.
//     CPU kernarg and fine-grained pool memory is mapped to no GPU until
//     allow_access.
//   - A failed access is a VM fault: the MEMORY event gets the
//     HsaMemoryAccessFault, which ROCr 5.2.3 hands to the handlers of
//     hsa_amd_register_system_event_handler. With no handler (or none
//     returning HSA_STATUS_SUCCESS) ROCr prints "Memory access fault by GPU
//     node-N" and aborts the process; an application that wants a fault as
//     an error must register one. The faulting AQL queue also stops and
//     reports 0x20000000 through queue_inactive_signal, which ROCr turns into
//     the queue's error callback with HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION.
//     (Real KFD without the debugger interface evicts the queues without a
//     queue error; the callback here makes the failure visible to code that
//     only watches its queue. KFDSIM_VMFAULT_QUEUE_ERROR=0 leaves it out.)
//   - Malformed packets stop the queue too: invalid type or vendor format
//     (INVALID_PACKET_FORMAT), bad dimensions (INCOMPATIBLE_ARGUMENTS),
//     workgroup over 1024 (INVALID_ARGUMENT), group segment over 64 KiB
//     (INVALID_ALLOCATION), a NULL or unknown kernel (INVALID_CODE_OBJECT).
//     A stopped queue processes nothing more; its packets never complete.
//   - SDMA queues (HSA_ENABLE_SDMA=1) run COPY_LINEAR(_RECT), FENCE, TRAP,
//     POLL_REGMEM, ATOMIC ADD64, dword CONST_FILL, TIMESTAMP and GCR; an
//     unknown packet stops the engine and is reported as a VM fault at the
//     packet (SDMA has no queue error path in ROCr).
package kfdsim
