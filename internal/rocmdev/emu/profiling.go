package emu

import (
	"time"

	"github.com/rocsync/rocsync/hsa"
)

// TimestampFrequency is the emulated system clock's rate
// (HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY): 100 MHz, not ROCr's 1 GHz, so
// that a caller converting ticks to time with the frequency is checked.
const TimestampFrequency = 100_000_000

var _ hsa.Profiler = (*HSA)(nil)

// ticks is the emulated system clock: ticks of TimestampFrequency since
// the machine was made.
func (m *Machine) ticks() uint64 {
	return uint64(time.Since(m.epoch)) / (uint64(time.Second) / TimestampFrequency)
}

// SystemInfoUint64 is hsa_system_get_info for the integer attributes.
func (h *HSA) SystemInfoUint64(attr hsa.SystemInfo) (uint64, error) {
	if !h.initialized() {
		return 0, h.err("hsa_system_get_info", hsa.StatusErrorNotInitialized)
	}
	switch attr {
	case hsa.SystemInfoVersionMajor, hsa.SystemInfoVersionMinor:
		return 1, nil
	case hsa.SystemInfoTimestamp:
		return h.m.ticks(), nil
	case hsa.SystemInfoTimestampFrequency:
		return TimestampFrequency, nil
	}
	return 0, h.err("hsa_system_get_info", hsa.StatusErrorInvalidArgument)
}

// AMDProfilingSetProfilerEnabled is hsa_amd_profiling_set_profiler_enabled:
// from then on the queue's packet processor writes each dispatch's start
// and end into its completion signal, as the CP does.
func (h *HSA) AMDProfilingSetProfilerEnabled(hq *hsa.Queue, enable bool) error {
	if !h.initialized() {
		return h.err("hsa_amd_profiling_set_profiler_enabled", hsa.StatusErrorNotInitialized)
	}
	h.mu.Lock()
	q := h.queues[hq]
	h.mu.Unlock()
	if q == nil {
		return h.err("hsa_amd_profiling_set_profiler_enabled", hsa.StatusErrorInvalidQueue)
	}
	q.profiling.Store(enable)
	return nil
}

// AMDProfilingGetDispatchTime is hsa_amd_profiling_get_dispatch_time. Like
// ROCr it returns what the signal holds: the times of the newest profiled
// dispatch that completed it, zero if none did. A signal reused by a
// later packet, or read before its dispatch ended, gives another packet's
// times or a zero end, as on the hardware.
func (h *HSA) AMDProfilingGetDispatchTime(a hsa.Agent, s hsa.Signal) (hsa.DispatchTime, error) {
	const fn = "hsa_amd_profiling_get_dispatch_time"
	if !h.initialized() {
		return hsa.DispatchTime{}, h.err(fn, hsa.StatusErrorNotInitialized)
	}
	if _, ok := h.gpu(a); !ok {
		return hsa.DispatchTime{}, h.err(fn, hsa.StatusErrorInvalidAgent)
	}
	x, err := h.sig(fn, s)
	if err != nil {
		return hsa.DispatchTime{}, err
	}
	return hsa.DispatchTime{Start: x.startTS.Load(), End: x.endTS.Load()}, nil
}

// profileStart records a profiled dispatch's start in its completion
// signal (and clears the end the signal held from an earlier packet).
func (q *queue) profileStart(sig hsa.Signal) {
	if !q.profiling.Load() || sig == 0 {
		return
	}
	if s := q.m.signal(sig); s != nil {
		s.endTS.Store(0)
		s.startTS.Store(q.m.ticks())
	}
}

// profileEnd records the dispatch's end, before its signal is decremented.
func (q *queue) profileEnd(sig hsa.Signal) {
	if !q.profiling.Load() || sig == 0 {
		return
	}
	if s := q.m.signal(sig); s != nil {
		s.endTS.Store(max(q.m.ticks(), s.startTS.Load()))
	}
}
