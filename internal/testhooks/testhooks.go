// Package testhooks holds switches that tests flip to remove one step of
// rocsync's protocol and show that the emulator (or the simulated driver)
// catches its absence. Production code only reads them; nothing outside
// this module can import the package.
package testhooks

import "sync/atomic"

// SkipKernargAllowAccess makes queue.New leave its kernarg ring unmapped
// to the GPU (no hsa_amd_agents_allow_access), the defect a discrete GPU
// answers with a memory fault on the first dispatch.
var SkipKernargAllowAccess atomic.Bool

// SkipStagingWait makes the staging pool hand out a slot whose last copy
// has not completed (no wait for it): the host then overwrites pinned
// memory a copy still reads, or reads memory a copy still fills.
var SkipStagingWait atomic.Bool

// ForceHIPCapture makes rocmdev capture a stream recording into a hipGraph
// even on a HIP (before 5.3) that does not capture hipModuleLaunchKernel,
// to show what that HIP then does: the kernels run at capture and the
// graph lacks them.
var ForceHIPCapture atomic.Bool

// SkipHIPCapture makes rocmdev replay every stream recording as its
// recorded calls in order (no hipGraph), for benchmarks that compare the
// two on the real HIP.
var SkipHIPCapture atomic.Bool

// SkipGroupFold makes a replayed recording's operands ignore the replays
// recorded on their group (syncstate.Group) when read: an op after a
// replay that did not take its operands is not ordered after it.
var SkipGroupFold atomic.Bool

// SkipGroupUnsettle makes an op that takes a replayed recording's operand
// leave the group settled: the next replay then skips the operands and is
// not ordered after that op.
var SkipGroupUnsettle atomic.Bool
