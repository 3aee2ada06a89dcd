package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/rocsync/rocsync/hsa"
)

// ErrNoProfiling is returned by EnableTiming when the runtime cannot time
// dispatches.
var ErrNoProfiling = errors.New("queue: the HSA runtime has no dispatch profiling")

// TimingFunc receives when the op with ticket ran on the device, on the
// host's clock.
type TimingFunc = func(ticket uint64, start, end time.Time)

// timing is a queue's dispatch profiling, set once by EnableTiming.
type timing struct {
	prof   hsa.Profiler
	report TimingFunc
	clock  SystemClock
	// untimed marks the ring slots (by packet index) holding a barrier or
	// marker packet, which are not timed: only those packets pay for the
	// mark, dispatches pay nothing, and a queue not timing keeps its
	// in-flight entries small.
	untimed []bool
	// from is the first ticket submitted with timing on.
	from uint64
}

// SystemClock maps HSA system-clock ticks to the host clock: Ticks was
// the system clock's reading at Host.
type SystemClock struct {
	Ticks     uint64
	Host      time.Time
	Frequency uint64 // ticks per second
}

// ReadSystemClock pairs a reading of the runtime's system clock
// (HSA_SYSTEM_INFO_TIMESTAMP) with the host's clock read right after the
// call: the runtime read its clock at some instant during the call, so
// the device times mapped through the pair are late by at most the call's
// duration, never early. The trace relies on that: an op does not start on
// the GPU before the host submitted it. (The middle of the call put them
// early by up to half of it when the thread was descheduled inside the
// call: 46 µs under -race on a loaded machine.) Of clockReadings readings
// the quickest is kept.
func ReadSystemClock(prof hsa.Profiler) (SystemClock, error) {
	freq, err := prof.SystemInfoUint64(hsa.SystemInfoTimestampFrequency)
	if err != nil {
		return SystemClock{}, err
	}
	if freq == 0 {
		return SystemClock{}, fmt.Errorf("%w: the system clock's frequency is 0", ErrNoProfiling)
	}
	var best SystemClock
	var bestTook time.Duration
	for i := range clockReadings {
		before := time.Now()
		ticks, err := prof.SystemInfoUint64(hsa.SystemInfoTimestamp)
		after := time.Now()
		if err != nil {
			return SystemClock{}, err
		}
		if took := after.Sub(before); i == 0 || took < bestTook {
			best, bestTook = SystemClock{Ticks: ticks, Host: after, Frequency: freq}, took
		}
	}
	return best, nil
}

// clockReadings is how many readings ReadSystemClock makes (a reading costs
// a runtime call, under a microsecond unless the thread is descheduled).
const clockReadings = 8

// At is the host time of system-clock reading ticks.
func (c SystemClock) At(ticks uint64) time.Time {
	// Whole seconds and the rest apart, so that long runs at 1 GHz do not
	// overflow the multiplication.
	if ticks >= c.Ticks {
		d := ticks - c.Ticks
		return c.Host.Add(time.Duration(d/c.Frequency)*time.Second + time.Duration(d%c.Frequency*uint64(time.Second)/c.Frequency))
	}
	d := c.Ticks - ticks
	return c.Host.Add(-(time.Duration(d/c.Frequency)*time.Second + time.Duration(d%c.Frequency*uint64(time.Second)/c.Frequency)))
}

// EnableTiming turns on the runtime's dispatch profiling for the queue
// (hsa_amd_profiling_set_profiler_enabled) and reports to report when
// every dispatch submitted from then on ran on the device
// (hsa_amd_profiling_get_dispatch_time), as the dispatch retires: before
// its completion signal goes back to the pool and to another packet,
// which would overwrite the times. report is called with the queue's
// lock held and must not call the queue. Failed dispatches are not
// reported. It is an error wrapping ErrNoProfiling when the runtime
// cannot profile; a second call is an error too.
func (q *Queue) EnableTiming(report TimingFunc) error {
	prof, ok := q.rt.(hsa.Profiler)
	if !ok {
		return ErrNoProfiling
	}
	clock, err := ReadSystemClock(prof)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoProfiling, err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.timing != nil {
		return fmt.Errorf("queue: %s: timing already enabled", q.name)
	}
	if q.hq == nil {
		return fmt.Errorf("queue: %s: closed", q.name)
	}
	if err := prof.AMDProfilingSetProfilerEnabled(q.hq, true); err != nil {
		return fmt.Errorf("%w: %w", ErrNoProfiling, err)
	}
	q.timing = &timing{prof: prof, report: report, clock: clock, untimed: make([]bool, len(q.inflight)), from: q.lastTicket.Load() + 1}
	return nil
}

// reportTimeLocked reads the times of ticket t's dispatch from its
// completion signal, which has completed and not yet been released.
func (q *Queue) reportTimeLocked(t uint64, sig *Signal) {
	if slot := &q.timing.untimed[(t-1)&q.mask]; *slot {
		*slot = false
		return // a barrier or marker packet
	}
	if t < q.timing.from {
		return // submitted before timing was on
	}
	if from := q.brokenFrom.Load(); from != 0 && t >= from {
		return // rocsync completed the signal itself: no dispatch ran
	}
	dt, err := q.timing.prof.AMDProfilingGetDispatchTime(q.agent, sig.H)
	if err != nil || dt.Start == 0 || dt.End < dt.Start {
		q.timingLost.Add(1)
		return
	}
	q.timing.report(t, q.timing.clock.At(dt.Start), q.timing.clock.At(dt.End))
}

// TimingLost counts the timed dispatches whose times could not be read
// (the runtime refused, or the signal held none).
func (q *Queue) TimingLost() uint64 { return q.timingLost.Load() }
