package queue_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

type rig struct {
	m       *emu.Machine
	rt      hsa.Runtime
	signals *queue.SignalPool
	stats   syncstate.Stats
	fill    uint64
}

func newRig(t *testing.T, o emu.Options) *rig {
	m := emu.New(o)
	rt := m.HSA()
	require.NoError(t, rt.Init())
	r := &rig{m: m, rt: rt, signals: queue.NewSignalPool(rt, 0)}
	code, err := kernels.CodeObject(m.Options().ISA)
	require.NoError(t, err)
	rd, err := rt.CodeObjectReaderCreateFromMemory(code)
	require.NoError(t, err)
	agents, _ := rt.Agents()
	exe, _ := rt.ExecutableCreateAlt(hsa.ProfileFull, 0)
	require.NoError(t, rt.ExecutableLoadAgentCodeObject(exe, agents[1], rd))
	require.NoError(t, rt.ExecutableFreeze(exe))
	sym, err := rt.ExecutableSymbolByName(exe, kernels.Fill.Symbol(kernels.F32), agents[1])
	require.NoError(t, err)
	r.fill, err = rt.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject)
	require.NoError(t, err)
	return r
}

func (r *rig) queue(t *testing.T, name string, size uint32) *queue.Queue {
	agents, _ := r.rt.Agents()
	pools, _ := r.rt.MemoryPools(agents[0])
	q, err := queue.New(r.rt, queue.Config{Name: name, Agent: agents[1], Size: size, KernargPool: pools[0],
		Signals: r.signals, Sinks: syncstate.Sinks{&r.stats}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// fillOf is the dispatch that fills 16 floats at buf with v.
func (r *rig) fillOf(buf uint64, v float64) queue.Dispatch {
	args := kernels.Args{Out: buf, Alpha: v, N: 16}
	ka := make([]byte, kernels.KernargSize)
	args.Encode(ka, kernels.F32)
	return queue.Dispatch{KernelObject: r.fill, Grid: 16, Workgroup: 16, Kernarg: ka}
}

func (r *rig) fillDispatch(t *testing.T, q *queue.Queue, buf uint64, v float64) uint64 {
	d := r.fillOf(buf, v)
	ticket, err := q.Dispatch(&d)
	require.NoError(t, err)
	return ticket
}

func TestTicketsAndCompletion(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true})
	q := r.queue(t, "q", 64)
	buf, _ := r.m.HIP().Malloc(0, 64)
	t1 := r.fillDispatch(t, q, uint64(buf), 1)
	t2 := r.fillDispatch(t, q, uint64(buf), 2)
	require.Equal(t, t1+1, t2)
	require.NoError(t, q.WaitHost(t2))
	require.GreaterOrEqual(t, q.Completed(), t2, "waiting for t2 completes everything before it")
	require.Empty(t, r.m.Hazards())
}

// More fences than one barrier-AND packet holds are chained, and the
// consumer is ordered after all of them.
func TestWaitDeviceChainsBarrierPackets(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true, MaxDelay: 200 * time.Microsecond, Seed: 3})
	consumer := r.queue(t, "consumer", 64)
	var fences []syncstate.Fence
	bufs := make([]uint64, 7)
	release := r.m.Hold()
	for i := range bufs {
		p := r.queue(t, "producer", 64)
		b, _ := r.m.HIP().Malloc(0, 64)
		bufs[i] = uint64(b)
		fences = append(fences, syncstate.Fence{TL: p, Ticket: r.fillDispatch(t, p, bufs[i], float64(i))})
	}
	before := consumer.LastTicket()
	require.NoError(t, consumer.WaitDevice(fences))
	require.EqualValues(t, 2, consumer.LastTicket()-before, "7 signals need two barrier-AND packets")
	var last uint64
	for _, b := range bufs {
		last = r.fillDispatch(t, consumer, b, 9) // overwrites what each producer wrote
	}
	release()
	require.NoError(t, consumer.WaitHost(last))
	require.Empty(t, r.m.Hazards(), "the consumer's writes are ordered after the producers'")
}

// A full ring makes the submitter wait for the oldest packet (a throttle
// host wait) instead of overwriting it.
func TestFullRingThrottles(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true})
	q := r.queue(t, "small", 64)
	buf, _ := r.m.HIP().Malloc(0, 64)
	release := r.m.Hold()
	go func() { time.Sleep(10 * time.Millisecond); release() }()
	var last uint64
	for i := 0; i < 200; i++ {
		last = r.fillDispatch(t, q, uint64(buf), float64(i))
	}
	require.NoError(t, q.WaitHost(last))
	require.NotZero(t, r.stats.Snapshot().HostWaitsFor(syncstate.ReasonThrottle))
	out := make([]float32, 16)
	require.NoError(t, r.m.HIP().MemcpyDtoH(0, unsafePtr(out), buf, 64))
	require.Equal(t, float32(199), out[0])
	require.LessOrEqual(t, r.signals.Created(), uint64(64), "signals are recycled once packets retire")
}

// An asynchronous queue error reaches the waits of the work on that queue.
func TestQueueErrorReachesWaiters(t *testing.T) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	var ka [kernels.KernargSize]byte
	ticket, err := q.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.NoError(t, err)
	err = q.WaitHost(ticket)
	require.ErrorIs(t, err, queue.ErrQueueBroken)
	var he *hsa.Error
	require.True(t, errors.As(err, &he))
	require.Equal(t, hsa.StatusErrorMemoryFault, he.Status)
	_, err = q.Dispatch(&queue.Dispatch{KernelObject: r.fill, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.ErrorIs(t, err, queue.ErrQueueBroken, "a broken queue takes no more work")
}

func TestKernargTooLarge(t *testing.T) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	_, err := q.Dispatch(&queue.Dispatch{KernelObject: r.fill, Grid: 1, Workgroup: 1, Kernarg: make([]byte, queue.KernargSlot+1)})
	require.ErrorIs(t, err, queue.ErrKernargTooLarge)
}

func TestSizeMustBePowerOfTwo(t *testing.T) {
	r := newRig(t, emu.Options{})
	agents, _ := r.rt.Agents()
	_, err := queue.New(r.rt, queue.Config{Agent: agents[1], Size: 100, Signals: r.signals})
	require.Error(t, err)
}

// A marker completes a signal of another pool (here GPU-only, which has a
// value address) once everything before it has completed, and drops its
// reference when it retires.
func TestMarkerCompletesAForeignSignal(t *testing.T) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	buf, err := r.m.HIP().Malloc(0, 64)
	require.NoError(t, err)
	release := r.m.Hold()
	first := r.fillDispatch(t, q, uint64(buf), 1)
	gpuOnly := queue.NewSignalPool(r.rt, hsa.SignalAttrAMDGPUOnly)
	sig, err := gpuOnly.Get()
	require.NoError(t, err)
	_, err = r.rt.SignalValuePointer(sig.H)
	require.NoError(t, err)
	sig.Retain()
	mark, err := q.Marker(sig)
	require.NoError(t, err)
	require.Equal(t, first+1, mark)
	require.EqualValues(t, 1, r.rt.SignalLoadScacquire(sig.H), "completed before the dispatch ahead of it")
	release()
	require.NoError(t, q.WaitHost(mark))
	require.EqualValues(t, 0, r.rt.SignalLoadScacquire(sig.H))
	sig.Release()
	again, err := gpuOnly.Get() // back in its pool: both references dropped
	require.NoError(t, err)
	require.Same(t, sig, again)
	again.Release()
	require.EqualValues(t, 1, gpuOnly.Created())
	require.NoError(t, gpuOnly.Destroy())
}

// A device wait on a broken consumer queue returns the queue's error and
// gives back the producers' signals, whatever their number; it once sliced
// past the end when fewer signals than one packet holds were left over.
func TestWaitDeviceOnBrokenQueueReturnsItsError(t *testing.T) {
	for _, producers := range []int{1, 4, 5, 7} {
		r := newRig(t, emu.Options{})
		consumer := r.queue(t, "consumer", 64)
		var ka [kernels.KernargSize]byte
		bad, err := consumer.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
		require.NoError(t, err)
		require.ErrorIs(t, consumer.WaitHost(bad), queue.ErrQueueBroken)

		release := r.m.Hold()
		var fences []syncstate.Fence
		for i := 0; i < producers; i++ {
			p := r.queue(t, "producer", 64)
			b, _ := r.m.HIP().Malloc(0, 64)
			fences = append(fences, syncstate.Fence{TL: p, Ticket: r.fillDispatch(t, p, uint64(b), 1)})
		}
		panicked := func() (v any) {
			defer func() { v = recover() }()
			err = consumer.WaitDevice(fences)
			return nil
		}()
		release() // before any assertion, or a failure would leave the producers held
		require.Nil(t, panicked, "%d producers", producers)
		require.ErrorIs(t, err, queue.ErrQueueBroken, "%d producers", producers)
		for _, f := range fences {
			require.NoError(t, f.TL.WaitHost(f.Ticket))
		}
	}
}

// A failure reported outside the queue (a GPU memory fault's system event)
// breaks it: a host waiter already blocked on a packet that will never
// complete returns the cause promptly, and later submissions fail with it.
func TestBreakWakesBlockedWaiter(t *testing.T) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	buf, err := r.m.HIP().Malloc(0, 64)
	require.NoError(t, err)
	release := r.m.Hold() // the packet never runs: like an evicted queue
	defer release()
	ticket := r.fillDispatch(t, q, uint64(buf), 1)
	done := make(chan error, 1)
	go func() { done <- q.WaitHost(ticket) }()
	select {
	case err := <-done:
		t.Fatalf("WaitHost returned %v before the packet ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	cause := errors.New("gpu0 faulted")
	q.Break(cause)
	select {
	case err := <-done:
		require.ErrorIs(t, err, queue.ErrQueueBroken)
		require.ErrorIs(t, err, cause)
	case <-time.After(5 * time.Second):
		t.Fatal("a waiter blocked on the signal did not notice Break")
	}
	_, err = q.Dispatch(&queue.Dispatch{KernelObject: r.fill, Grid: 16, Workgroup: 16})
	require.ErrorIs(t, err, cause)
	q.Break(errors.New("second cause")) // the first is kept
	require.ErrorIs(t, q.Err(), cause)
	require.NotContains(t, q.Err().Error(), "second cause")
}

// Whichever of the queue's own error and the outside cause arrives first,
// the error waiters get names both.
func TestBreakAfterQueueErrorNamesBoth(t *testing.T) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	var ka [kernels.KernargSize]byte
	ticket, err := q.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.NoError(t, err)
	require.ErrorIs(t, q.WaitHost(ticket), &hsa.Error{Status: hsa.StatusErrorMemoryFault})
	cause := errors.New("gpu0 faulted")
	q.Break(cause)
	err = q.WaitHost(ticket)
	require.ErrorIs(t, err, queue.ErrQueueBroken)
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorMemoryFault})
}
