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
package kfdsim
