package rocmdev_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// eventSpy passes system event registration through to the emulator and
// keeps the handler, so a test can hand it events of its own.
type eventSpy struct {
	hsa.Runtime
	handler hsa.SystemEventFunc
	fail    error
}

func (s *eventSpy) RegisterSystemEventHandler(fn hsa.SystemEventFunc) (func(), error) {
	if s.fail != nil {
		return nil, s.fail
	}
	s.handler = fn
	return s.Runtime.RegisterSystemEventHandler(fn)
}

func openAll(t *testing.T, m *emu.Machine, rt rocmdev.Runtimes) []driver.Device {
	t.Helper()
	require.NoError(t, m.HSA().Init())
	devs, err := rocmdev.Open(rt, func(int) driver.DeviceConfig {
		return driver.DeviceConfig{Policy: syncstate.DeviceSide, Stats: new(syncstate.Stats)}
	})
	require.NoError(t, err)
	return devs
}

// Open registers one handler for its runtime, which claims memory faults
// of its own open GPUs only (ROCr then reports anything else as it would
// without rocsync), breaks the faulting device alone, and is retired with
// the runtime's last reference.
func TestFaultHandlerClaimsOnlyItsGPUs(t *testing.T) {
	m := emu.New(emu.Options{Devices: 2})
	spy := &eventSpy{Runtime: m.HSA()}
	rt := runtimes(m)
	rt.HSA = spy
	devs := openAll(t, m, rt)
	require.Len(t, devs, 2)
	require.Equal(t, 1, m.HSA().SystemEventHandlers(), "one handler per Open")
	all, err := m.HSA().Agents()
	require.NoError(t, err)
	gpu0, gpu1 := all[1], all[2]
	d0, d1 := devs[0].(*rocmdev.Device), devs[1].(*rocmdev.Device)

	task, err := d0.NewTask(syncstate.Sinks{})
	require.NoError(t, err)
	fault := func(a hsa.Agent) hsa.SystemEvent {
		return hsa.SystemEvent{Type: hsa.EventGPUMemoryFault,
			MemoryFault: hsa.MemoryFault{Agent: a, Address: 0x1000, Reason: hsa.MemoryFaultPageNotPresent}}
	}
	require.False(t, spy.handler(hsa.SystemEvent{Type: 7}), "an event type it does not know")
	require.False(t, spy.handler(fault(0x999)), "an agent rocsync does not drive")
	require.NoError(t, d0.Fault())

	require.True(t, spy.handler(fault(gpu0)))
	err = d0.Fault()
	require.ErrorIs(t, err, hsa.ErrMemoryFault)
	var mf *hsa.MemoryFaultError
	require.ErrorAs(t, err, &mf)
	require.Equal(t, fault(gpu0).MemoryFault, mf.Fault)
	require.NoError(t, d1.Fault(), "the other GPU is not faulted")
	require.ErrorIs(t, task.(*rocmdev.Task).HSAQueue().Err(), hsa.ErrMemoryFault, "its queue is broken")
	_, err = driver.LaunchBuiltin(d0, task, new(driver.DispatchOp), kernels.Fill, kernels.F32, kernels.Args{N: 1})
	require.ErrorIs(t, err, hsa.ErrMemoryFault, "no new work on a faulted GPU")
	_, err = d0.NewTask(syncstate.Sinks{})
	require.ErrorIs(t, err, hsa.ErrMemoryFault)
	require.True(t, spy.handler(fault(gpu0)), "a second fault is claimed too")
	require.Equal(t, mf, func() *hsa.MemoryFaultError { var x *hsa.MemoryFaultError; errors.As(d0.Fault(), &x); return x }(),
		"the first fault is kept")

	require.NoError(t, task.Close(), "nothing was in flight")
	require.NoError(t, d0.Close())
	require.False(t, spy.handler(fault(gpu0)), "a closed GPU is not rocsync's any more")
	require.True(t, spy.handler(fault(gpu1)))
	require.NoError(t, d1.Close())
	require.Zero(t, m.HSA().SystemEventHandlers(), "retired with the runtime")
	require.Zero(t, m.HSA().InitCount())
}

// Without the handler a fault would abort the process: Open fails instead,
// and gives its hsa_init reference back.
func TestOpenFailsWithoutFaultHandler(t *testing.T) {
	m := emu.New(emu.Options{})
	rt := runtimes(m)
	rt.HSA = &eventSpy{Runtime: m.HSA(), fail: &hsa.Error{Func: "hsa_amd_register_system_event_handler", Status: hsa.StatusError}}
	require.NoError(t, m.HSA().Init())
	_, err := rocmdev.Open(rt, func(int) driver.DeviceConfig { return driver.DeviceConfig{Stats: new(syncstate.Stats)} })
	require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusError})
	require.Zero(t, m.HSA().InitCount())
}

// A fault that arrives while Close drains the device's queues (holding the
// queue pool's lock) still breaks them: with no queue error, as on KFD
// without the debugger interface, the handler's Break is the only thing
// that can end the drain, so it must not need that lock.
func TestFaultDuringCloseEndsTheDrain(t *testing.T) {
	m := emu.New(emu.Options{})
	m.SetVMFaultQueueErrors(false)
	devs := openAll(t, m, runtimes(m))
	d := devs[0].(*rocmdev.Device)
	testhooks.SkipKernargAllowAccess.Store(true)
	task, err := d.NewTask(syncstate.Sinks{})
	testhooks.SkipKernargAllowAccess.Store(false)
	require.NoError(t, err)
	out, err := d.Malloc(64)
	require.NoError(t, err)
	release := m.Hold()
	_, err = driver.LaunchBuiltin(d, task, new(driver.DispatchOp), kernels.Fill, kernels.F32, kernels.Args{Out: uint64(out), N: 16, Alpha: 1})
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	time.Sleep(100 * time.Millisecond) // Close is draining the held queue
	release()
	select {
	case err := <-closed:
		require.ErrorIs(t, err, hsa.ErrMemoryFault)
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung: the fault handler could not break the queue it drains")
	}
}

// eventSwallower registers a handler that claims every event without
// passing it on: rocmdev's handler never hears of a fault, as where a
// runtime reports it through the queue alone.
type eventSwallower struct{ hsa.Runtime }

func (s eventSwallower) RegisterSystemEventHandler(hsa.SystemEventFunc) (func(), error) {
	return s.Runtime.RegisterSystemEventHandler(func(hsa.SystemEvent) bool { return true })
}

// A queue that reports a memory violation holds it back for the system
// event that names the address; if none comes within the grace, the
// device breaks anyway, every timeline of it, with a fault whose address
// is unknown, and the queue's own error in the chain.
func TestMemoryViolationWithoutSystemEventBreaksTheDevice(t *testing.T) {
	defer rocmdev.SetMemoryViolationGrace(50 * time.Millisecond)()
	m := emu.New(emu.Options{})
	m.SetVMFaultQueueErrorFirst(true)
	rt := runtimes(m)
	rt.HSA = eventSwallower{m.HSA()}
	devs := openAll(t, m, rt)
	d := devs[0].(*rocmdev.Device)
	other, err := d.NewTask(syncstate.Sinks{})
	require.NoError(t, err)
	testhooks.SkipKernargAllowAccess.Store(true)
	task, err := d.NewTask(syncstate.Sinks{})
	testhooks.SkipKernargAllowAccess.Store(false)
	require.NoError(t, err)
	out, err := d.Malloc(64)
	require.NoError(t, err)
	ticket, err := driver.LaunchBuiltin(d, task, new(driver.DispatchOp), kernels.Fill, kernels.F32, kernels.Args{Out: uint64(out), N: 16, Alpha: 1})
	require.NoError(t, err)
	err = task.Timeline(driver.LaneKernel).WaitHost(ticket)
	require.ErrorIs(t, err, hsa.ErrMemoryFault)
	require.ErrorIs(t, err, &hsa.Error{Func: "queue", Status: hsa.StatusErrorMemoryApertureViolation}, "the queue's own report is kept")
	var mf *hsa.MemoryFaultError
	require.ErrorAs(t, err, &mf)
	require.True(t, mf.OnlyQueueError)
	require.Contains(t, err.Error(), "address unknown")
	require.ErrorIs(t, d.Fault(), hsa.ErrMemoryFault, "the whole device is broken")
	require.ErrorIs(t, other.(*rocmdev.Task).HSAQueue().Err(), hsa.ErrMemoryFault, "the device's other queues too")
	require.NoError(t, other.Close())
	require.ErrorIs(t, task.Close(), hsa.ErrMemoryFault)
	require.ErrorIs(t, d.Close(), hsa.ErrMemoryFault)
}
