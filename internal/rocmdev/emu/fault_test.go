package emu

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/rocblas"
)

// An injected dispatch fault breaks the queue like a memory fault: the
// callback fires, the packet's signal stays at 1, later packets do not run.
func TestInjectedDispatchFaultBreaksTheQueue(t *testing.T) {
	r := newRig(t, Options{})
	buf, err := r.m.HIP().Malloc(0, 4*8)
	require.NoError(t, err)
	ok := r.submit(t, "fill", true, kernels.Args{Out: uint64(buf), N: 8, Alpha: 1})
	r.wait(ok)
	var asked []string
	r.m.SetFaultInjector(func(op string) bool { asked = append(asked, op); return strings.Contains(op, "add") })
	bad := r.submit(t, "add", true, kernels.Args{Out: uint64(buf), A: uint64(buf), B: uint64(buf), N: 8})
	after := r.submit(t, "fill", true, kernels.Args{Out: uint64(buf), N: 8, Alpha: 2})
	select {
	case s := <-r.qerr:
		require.Equal(t, hsa.StatusErrorMemoryFault, s)
	case <-time.After(5 * time.Second):
		t.Fatal("no queue error")
	}
	require.Equal(t, []string{kernels.Add.KernelName(kernels.F32)}, asked)
	require.EqualValues(t, 1, r.h.SignalWaitScacquire(bad, hsa.ConditionLt, 1, uint64(5*time.Millisecond), hsa.WaitStateBlocked))
	require.EqualValues(t, 1, r.h.SignalLoadScacquire(after))
}

// An injected gemm fault makes the stream's error sticky; an event recorded
// after it completes carrying the error (no host wait hangs), and a stream
// that waits for that event inherits the error.
func TestInjectedGemmFaultTravelsWithEvents(t *testing.T) {
	m := New(Options{FaultInjector: func(op string) bool { return op == "rocblas_sgemm" }})
	hp, b := m.HIP(), m.BLAS()
	s1, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	s2, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	a, _ := hp.Malloc(0, 16)
	h, _ := b.CreateHandle(0)
	require.NoError(t, b.SetStream(h, s1))
	require.NoError(t, b.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, 2, 2, 2, 1, a, 2, a, 2, 0, a, 2))
	ev, _ := hp.EventCreate(0, hip.EventDisableTiming)
	require.NoError(t, hp.EventRecord(ev, s1))
	done := make(chan error, 1)
	go func() { done <- hp.EventSynchronize(ev) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorLaunchFailure})
		require.ErrorContains(t, err, injectedFault)
	case <-time.After(5 * time.Second):
		t.Fatal("hipEventSynchronize on an event recorded after a fault hangs")
	}
	require.ErrorIs(t, hp.EventQuery(ev), &hip.Error{Code: hip.ErrorLaunchFailure})
	require.NoError(t, hp.StreamWaitEvent(s2, ev))
	require.NoError(t, hp.MemsetAsync(a, 0, 16, s2))
	require.ErrorIs(t, hp.StreamSynchronize(s2), &hip.Error{Code: hip.ErrorLaunchFailure})
	require.ErrorIs(t, hp.StreamSynchronize(s1), &hip.Error{Code: hip.ErrorLaunchFailure})
	// A later record on a healthy stream clears the event's error.
	s3, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, hp.EventRecord(ev, s3))
	require.NoError(t, hp.EventSynchronize(ev))
}

// hipStreamWaitEvent waits for the record the event had when it was
// called, and inherits that record's outcome, even if the event is
// recorded again (here on a healthy stream) and completes before the
// waiting stream reaches the wait. The emulator used to read whatever the
// newest record said, so the waiter missed the fault (and joined a later
// clock): a stream behind a failed producer ran as if it had succeeded
// (found by rocsync's fault fuzzer under Unified, where pooled events are
// reused across streams).
func TestStreamWaitEventKeepsTheCapturedRecord(t *testing.T) {
	m := New(Options{FaultInjector: func(op string) bool { return op == "rocblas_sgemm" }})
	hp, b := m.HIP(), m.BLAS()
	s1, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	s2, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	s3, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	a, _ := hp.Malloc(0, 16)
	h, _ := b.CreateHandle(0)
	require.NoError(t, b.SetStream(h, s1))
	require.NoError(t, b.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, 2, 2, 2, 1, a, 2, a, 2, 0, a, 2))
	ev, _ := hp.EventCreate(0, hip.EventDisableTiming)
	require.NoError(t, hp.EventRecord(ev, s1))
	require.ErrorIs(t, hp.EventSynchronize(ev), &hip.Error{Code: hip.ErrorLaunchFailure})
	release := m.Hold()
	require.NoError(t, hp.MemsetAsync(a, 0, 16, s2)) // held: s2 has not reached the wait
	require.NoError(t, hp.StreamWaitEvent(s2, ev))
	require.NoError(t, hp.EventRecord(ev, s3)) // a record is not held
	require.NoError(t, hp.EventSynchronize(ev))
	release()
	require.ErrorIs(t, hp.StreamSynchronize(s2), &hip.Error{Code: hip.ErrorLaunchFailure})
}
