package stream

import (
	"errors"
	"fmt"
	"time"

	"github.com/rocsync/rocsync/hip"
)

// TimingAPI is the optional part of an API that times ops with events that
// record when the stream reached them (hipEventElapsedTime,
// cuEventElapsedTime).
type TimingAPI interface {
	// TimingEventCreate makes an event with timing on (no
	// DisableTiming flag).
	TimingEventCreate() (uintptr, error)
	// EventElapsed is the time from start's newest record to stop's; both
	// must be reached.
	EventElapsed(start, stop uintptr) (time.Duration, error)
}

// ErrNoTiming is returned by EnableTiming when the runtime cannot time
// ops.
var ErrNoTiming = errors.New("stream: the runtime has no timing events")

// TimingFunc receives when the op with ticket ran on the device, on the
// host's clock.
type TimingFunc = func(ticket uint64, start, end time.Time)

// timedOp is an op between two timing events.
type timedOp struct {
	ticket      uint64
	start, stop uintptr
}

// timing is a stream's op timing, set once by EnableTiming; guarded by
// the stream's mu.
type timing struct {
	api    TimingAPI
	report TimingFunc
	// ref is an event reached at refHost (as near as the host can tell):
	// every op's times are elapsed times from it.
	ref     uintptr
	refHost time.Time
	free    []uintptr // timing events not in use
	all     []uintptr
	pending []timedOp // in ticket order
	lost    uint64
}

// EnableTiming records a timing event before and after every op submitted
// from now on, and reports to report when each ran on the device once
// both are reached (at a later Completed, wait or Close). Times are
// elapsed times from a reference event recorded now and waited for, whose
// host time is taken when that wait returns: device times may so be late
// by up to the wait's return latency, never early. report is called with
// the stream's lock held and must not call the stream. It is an error
// wrapping ErrNoTiming when the API cannot time ops; a second call is an
// error too.
func (s *Stream) EnableTiming(report TimingFunc) error {
	api, ok := s.api.(TimingAPI)
	if !ok {
		return ErrNoTiming
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timing.Load() != nil {
		return fmt.Errorf("stream: %s: timing already enabled", s.name)
	}
	if s.s == 0 {
		return fmt.Errorf("%w: %s", ErrClosed, s.name)
	}
	ref, err := api.TimingEventCreate()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoTiming, err)
	}
	if err := s.api.EventRecord(ref, s.s); err != nil {
		_ = s.api.EventDestroy(ref)
		return fmt.Errorf("%w: %w", ErrNoTiming, err)
	}
	if err := s.api.EventSynchronize(ref); err != nil {
		_ = s.api.EventDestroy(ref)
		return fmt.Errorf("%w: %w", ErrNoTiming, err)
	}
	s.timing.Store(&timing{api: api, report: report, ref: ref, refHost: time.Now(), all: []uintptr{ref}})
	return nil
}

// event returns a timing event from the stream's own pool.
func (tm *timing) event() (uintptr, error) {
	if n := len(tm.free); n > 0 {
		e := tm.free[n-1]
		tm.free = tm.free[:n-1]
		return e, nil
	}
	e, err := tm.api.TimingEventCreate()
	if err != nil {
		return 0, err
	}
	tm.all = append(tm.all, e)
	return e, nil
}

// startLocked records the timing event before an op; 0 when it could not
// (the op goes untimed).
func (s *Stream) startTimingLocked(tm *timing) uintptr {
	ev, err := tm.event()
	if err == nil {
		if err = s.api.EventRecord(ev, s.s); err != nil {
			tm.free = append(tm.free, ev)
		}
	}
	if err != nil {
		tm.lost++
		return 0
	}
	return ev
}

// stopTimingLocked records the timing event after the op with ticket t
// that start preceded; ok is false when the op failed to enqueue.
func (s *Stream) stopTimingLocked(tm *timing, start uintptr, t uint64, ok bool) {
	if start == 0 {
		return
	}
	if !ok {
		tm.free = append(tm.free, start)
		return
	}
	stop, err := tm.event()
	if err == nil {
		if err = s.api.EventRecord(stop, s.s); err != nil {
			tm.free = append(tm.free, stop)
		}
	}
	if err != nil {
		tm.free = append(tm.free, start)
		tm.lost++
		return
	}
	tm.pending = append(tm.pending, timedOp{ticket: t, start: start, stop: stop})
}

// reportTimedLocked reports the timed ops whose stop events are reached,
// oldest first, and recycles their events. A failed op (the stream's
// error covers it) is dropped unreported.
func (s *Stream) reportTimedLocked(tm *timing) {
	k := 0
	for ; k < len(tm.pending); k++ {
		p := tm.pending[k]
		if s.health.Failed(p.ticket) == nil {
			reached, err := s.api.EventQuery(p.stop)
			if err == nil && !reached {
				break
			}
			from, err1 := tm.api.EventElapsed(tm.ref, p.start)
			to, err2 := tm.api.EventElapsed(tm.ref, p.stop)
			if err == nil && err1 == nil && err2 == nil {
				tm.report(p.ticket, tm.refHost.Add(from), tm.refHost.Add(max(to, from)))
			} else {
				tm.lost++
			}
		}
		tm.free = append(tm.free, p.start, p.stop)
	}
	if k > 0 {
		n := copy(tm.pending, tm.pending[k:])
		tm.pending = tm.pending[:n]
	}
}

// pollTiming reports what timed ops it can without blocking.
func (s *Stream) pollTiming(tm *timing) {
	if !s.mu.TryLock() {
		return
	}
	if len(tm.pending) != 0 {
		s.reportTimedLocked(tm)
	}
	s.mu.Unlock()
}

// TimingLost counts the timed ops whose times could not be had.
func (s *Stream) TimingLost() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tm := s.timing.Load(); tm != nil {
		return tm.lost
	}
	return 0
}

// destroyTimingLocked reports what is reached and destroys the timing
// events (Close, after the drain).
func (s *Stream) destroyTimingLocked() error {
	tm := s.timing.Load()
	if tm == nil {
		return nil
	}
	s.reportTimedLocked(tm)
	tm.lost += uint64(len(tm.pending))
	tm.pending = nil
	var first error
	for _, e := range tm.all {
		if err := s.api.EventDestroy(e); err != nil && first == nil {
			first = err
		}
	}
	tm.all, tm.free = nil, nil
	return first
}

// TimingEventCreate implements TimingAPI: hipEventCreateWithFlags without
// hipEventDisableTiming.
func (h hipAPI) TimingEventCreate() (uintptr, error) {
	e, err := h.rt.EventCreate(h.device, 0)
	return uintptr(e), err
}

// EventElapsed implements TimingAPI with hipEventElapsedTime (float
// milliseconds: microsecond resolution for the first seconds of a trace).
func (h hipAPI) EventElapsed(start, stop uintptr) (time.Duration, error) {
	ms, err := h.rt.EventElapsedTime(hip.Event(start), hip.Event(stop))
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}
