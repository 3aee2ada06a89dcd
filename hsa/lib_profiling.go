//go:build linux && (amd64 || arm64)

package hsa

import (
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

var _ Profiler = (*Lib)(nil)

// AMDProfilingSetProfilerEnabled is hsa_amd_profiling_set_profiler_enabled:
// the packet processor writes start and end timestamps into the
// completion signals of the queue's dispatches from then on.
func (l *Lib) AMDProfilingSetProfilerEnabled(q *Queue, enable bool) error {
	on := uintptr(0)
	if enable {
		on = 1
	}
	return l.check("hsa_amd_profiling_set_profiler_enabled", cmem.Call(l.fn[symAMDProfilingSetProfilerEnabled], uintptr(q.Handle), on))
}

// AMDProfilingGetDispatchTime is hsa_amd_profiling_get_dispatch_time: when
// the dispatch whose completion signal s was started and ended, in the
// system clock domain (SystemInfoTimestamp's ticks).
func (l *Lib) AMDProfilingGetDispatchTime(a Agent, s Signal) (DispatchTime, error) {
	var t DispatchTime // hsa_amd_profiling_dispatch_time_t: uint64 start, end
	r, _, _ := purego.SyscallN(l.fn[symAMDProfilingGetDispatchTime], uintptr(a), uintptr(s), uintptr(unsafe.Pointer(&t)))
	return t, l.check("hsa_amd_profiling_get_dispatch_time", r)
}
