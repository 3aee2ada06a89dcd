// Package kfdsim builds and runs a simulated AMD kernel driver for tests.
//
// No machine rocsync's CI runs on has an AMD GPU, and the CPU emulator
// (internal/rocmdev/emu) is only as strict as its authors made it. kfdsim goes one
// step further: it simulates the kernel interface of amdgpu's KFD and DRM
// drivers, with a C model of KFD and a GPU behind it (csrc/), so Debian's
// REAL user space, libhsakmt 5.2.3 (the thunk), libdrm, ROCr 5.2.3
// (libhsa-runtime64.so.1) and HIP 5.2.3 (libamdhip64.so.5), runs unmodified
// on top of it, the way Mesa's drm-shim runs real GPU user space over a fake
// kernel. Nothing of ROCm is replaced: the thunk's own ioctls reach the
// model, so the thunks of later releases (6.2.4's, and 6.4.3's inside ROCr),
// which issue the same ioctls, run on the same driver.
//
// The simulated GPU checks every access its command processor, SDMA engine
// and executor make against the driver's mapping records, so a buffer that
// was never made accessible to the GPU (hsa_amd_agents_allow_access) is a VM
// fault here as it is on hardware, reported the way KFD reports one.
//
// Library builds the driver with gcc (-Wall -Werror) into a
// content-addressed cache: libkfdsim.so, an LD_PRELOAD library. A test runs
// under the simulated driver by re-executing its own test binary as a child
// process with LD_PRELOAD naming it; see Command and Run. The GPUs the child
// sees are given by a spec such as "gfx90a@0000:83:00.0,gfx1030@0000:03:00.0"
// (grammar below).
//
// # Running any program on it (cmd/simrun)
//
// simrun runs any program, not only rocsync's tests, over the simulated
// driver with a chosen ROCm release and GPU spec, building the driver and
// fetching the release's libraries as needed (ProgramCommand):
//
//	go run ./hsa/kfdsim/cmd/simrun -rocm 6.4.3 -gpus gfx90a -- PROGRAM ARGS...
//	go run ./hsa/kfdsim/cmd/simrun -rocm 5.2.3 -gpus gfx90a,gfx1030 -- rocminfo
//	go run ./hsa/kfdsim/cmd/simrun -rocm 6.1.2 -gpus gfx942/cpx -debug -- ./myprog
//
// -rocm 5.2.3 uses the host's libraries (Debian bookworm's packages);
// 6.1.2 (or trixie: ROCr 6.1.2, HIP 5.7.1) and 6.4.3 (or sid) run PROGRAM
// inside the release's private root through the root's loader, so that it
// and every library it loads come from that release. A C or C++ program
// must be able to run against the root's glibc (Debian's own builds can).
// The simulated GPU runs ROCr's and HIP's own kernels (blits, fills,
// stream memory operations) by name; a kernel of the program's own faults
// its queue, as on a GPU that cannot run it, unless the program is Go and
// registers an executor (RegisterExecutor). What runs is the real
// runtimes' code: their ioctls, memory rights, queue and signal protocols
// and fault handling; not the GPU's ISA, timing or caches.
//
// # The kernel interface (csrc/shim.c, kfd.c, sysfs.c)
//
// The library interposes the C library's file calls (open, openat, fopen,
// opendir, the stat family, access, readlink, realpath, ioctl, mmap, close,
// dup, fcntl(F_DUPFD*)):
//
//   - /dev/kfd and /dev/dri/renderD<128+i> open as files of their own; fstat
//     shows character devices (226:M for render nodes, as libdrm checks);
//   - KFD ioctls: GET_VERSION (1.8 for ROCm 5.2, 1.14 for 5.7, 1.16 for 6.x),
//     GET_PROCESS_APERTURES_NEW, ACQUIRE_VM, SET_MEMORY_POLICY,
//     ALLOC/FREE/MAP/UNMAP_MEMORY_OF_GPU (VRAM, GTT, USERPTR, DOORBELL,
//     MMIO_REMAP), CREATE/DESTROY/UPDATE_QUEUE (both CREATE_QUEUE sizes:
//     0xc0584b02, and 0xc0604b02 with sdma_engine_id), SET_CU_MASK,
//     CREATE/DESTROY/SET/RESET/WAIT_EVENTS (with the events page, and the event
//     age of KFD 1.14), GET_CLOCK_COUNTERS, GET_TILE_CONFIG,
//     SET_SCRATCH_BACKING_VA, SET_TRAP_HANDLER, SET_XNACK_MODE (xnack- only),
//     AVAILABLE_MEMORY, SMI_EVENTS; the debugger (DBG_TRAP, RUNTIME_ENABLE),
//     SVM, GWS, dma-buf and IPC requests fail with EINVAL, as on a kernel
//     without them;
//   - DRM ioctls on render nodes: VERSION ("amdgpu" 3.42) and AMDGPU_INFO
//     (ACCEL_WORKING, DEV_INFO, READ_MMR_REG, HW_IP_COUNT/INFO, VRAM_GTT,
//     MEMORY, FW_VERSION), enough for libdrm_amdgpu's device initialisation;
//   - mmap of either file at an offset KFD returned maps that buffer's pages:
//     buffers live in one memfd per process, mapped at their GPU address at
//     allocation (the GPU's view) and again wherever the thunk maps them; a
//     queue's doorbell is a 64-bit slot of its GPU's doorbell page;
//   - sysfs: /sys/devices/virtual/kfd/kfd/topology (also under
//     /sys/class/kfd/kfd), the CPU cache directories
//     /sys/devices/system/node/node0/cpuN/cache (which the 5.2.3 thunk
//     requires), /sys/dev/char/226:M/device and /dev/dri are redirected to
//     files generated from the spec under $TMPDIR/kfdsim-<uid>/<hash>.
//
// The driver's state belongs to the KFD process: it outlives closing
// /dev/kfd, and a forked child starts a new, empty one. Everything is
// thread-safe.
//
// Besides the interposed functions, the library exports:
//
//	int  kfdsim_configure(const char *spec)   GPUs for the next open of /dev/kfd
//	bool kfdsim_lookup(uint64_t addr, kfdsim_alloc *out)        (kfdsim.h)
//	bool kfdsim_gpu_access(uint32_t node, uint64_t addr, uint64_t size, bool write)
//	void *kfdsim_gpu_ptr(uint32_t node, uint64_t addr, uint64_t size, bool write)
//	void kfdsim_set_executor(kfdsim_executor_fn fn)             (exec.c)
//	void kfdsim_hold(void), int kfdsim_release(void)            (hold.c)
//	uint64_t kfdsim_test_blocked_waits(void)  event waits that went to sleep
//	uint64_t kfdsim_test_sdma_packets(void)   SDMA packets completed
//	int kfdsim_test_stopped_queues(uint32_t node, int *total)  evicted or faulted queues
//
// Spec grammar: gpu{,gpu}, gpu = target[@[domain:]bus:device.function][/mode],
// target one of the targets the ROCm release knows (KFDSIM_ROCM, default
// 5.2: gfx908, gfx90a, gfx1030; 5.5 adds gfx1100, 6.0 gfx942), mode one of
// spx, dpx, qpx, cpx (a partitioned GPU: 1, 2, 4 or 8 KFD nodes of one PCI
// device with location_id = the device's PCI id | the partition, as KFD
// reports an MI300X's partitions), at most 8 KFD GPU nodes, numbers in hex.
// GPU node i is KFD node i+1 (node 0 is the CPU), so HSA agent order is spec
// order; PCI order may differ. A bad spec makes opening /dev/kfd fail with
// "kfdsim: open /dev/kfd fails: bad GPU spec ..." on stderr. Neither
// kfdsim_configure nor KFDSIM_GPUS: one gfx90a at 0000:03:00.0.
//
// Environment: KFDSIM_GPUS (the spec), KFDSIM_ROCM (the release),
// KFDSIM_DEBUG=1 (trace every ioctl, queue packet and fault to stderr),
// KFDSIM_VMFAULT_QUEUE_ERROR=0 (a VM fault stops its queue without a queue
// error, as on KFD without the debugger interface), KFDSIM_P2P=1 (every two
// GPUs are linked, as KFD lists P2P links: ROCr then lets one GPU be allowed
// access to another's memory, and HIP's peer access works), KFDSIM_RULE_OFF
// (rules to switch off, comma separated: evict, access; for tests that show
// a rule matters), and, for the Go side, ROCSYNC_KFDSIM_CHILD (set in child
// test processes), ROCSYNC_KFDSIM_REQUIRED=1 (CI: a machine that cannot
// build the library fails instead of skipping) and ROCSYNC_KFDSIM_ROCM
// (EnvRelease: the release children run, 5.2.3 on the host's libraries by
// default, or trixie or sid inside the release's root from rocmroot, started
// through the root's loader with the driver as --preload and KFDSIM_ROCM
// set to the release's ROCr: see Release and Options.Release).
//
// # What the simulated GPU enforces
//
//   - Memory: every access of the command processor, the SDMA engine and the
//     executor must fall inside one buffer mapped to that GPU. The real thunk
//     computes the mapping sets (MapMemoryToGPUNodes replaces the node set,
//     so a second hsa_amd_agents_allow_access REPLACES the first one's
//     agents); CPU kernarg and fine-grained pool memory is mapped to no GPU
//     until allow_access. Pinned user memory (hsa_amd_memory_lock) has a GPU
//     address of its own; the copy engines and blit kernels reach it there.
//   - A failed access is a VM fault, handled as KFD's interrupt handler does
//     (amdgpu kfd_int_process_v9.c): every user queue of the process on that
//     GPU is evicted, AQL, SDMA and ROCr's or HIP's own alike, and nothing
//     restores them (kfd_dqm_evict_pasid); then the memory events get the
//     fault, which ROCr 5.2.3 hands to the handlers of
//     hsa_amd_register_system_event_handler. With no handler (or none
//     returning HSA_STATUS_SUCCESS) ROCr prints "Memory access fault by GPU
//     node-N" and aborts the process; an application that wants a fault as
//     an error must register one. The faulting AQL queue also reports
//     0x20000000 through queue_inactive_signal, which ROCr turns into the
//     queue's error callback with HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION.
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
