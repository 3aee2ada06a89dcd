package queue_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

// narrowQueue is a queue with AgentScope on the rig's GPU, whose Flush
// puts a barrier-AND packet on a queue of its own (which releases at
// system scope) and counts the flushes.
func (r *rig) narrowQueue(t *testing.T, name string, flushes *int) *queue.Queue {
	agents, _ := r.rt.Agents()
	pools, _ := r.rt.MemoryPools(agents[0])
	fq := r.queue(t, name+"-flush", 64)
	q, err := queue.New(r.rt, queue.Config{Name: name, Agent: agents[1], Size: 64, KernargPool: pools[0],
		Signals: r.signals, Sinks: syncstate.Sinks{&r.stats}, AgentScope: true, Flush: func() error {
			*flushes++
			ft, err := fq.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{})
			if err != nil {
				return err
			}
			return fq.WaitHost(ft)
		}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// With AgentScope, dispatches release at agent scope, and a host wait
// makes what the ticket wrote visible to the host: with a marker that
// releases at system scope right after the newest ticket, and with a
// flush for an older one that a packet waiting for the host itself
// follows (a marker behind that packet would never complete). The hazard
// checker, which reports a host read that no system-scope release
// precedes, finds nothing.
//
// Without those releases (the SkipSystemRelease switch) the checker
// reports both reads.
func TestAgentScopeHostWaitsSeeTheWrites(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(map[bool]string{false: "releases", true: "no system-scope release"}[skip], func(t *testing.T) {
			testhooks.SkipSystemRelease.Store(skip)
			defer testhooks.SkipSystemRelease.Store(false)
			agentScopeHostWaits(t, skip)
		})
	}
}

func agentScopeHostWaits(t *testing.T, skip bool) {
	r := newRig(t, emu.Options{Hazards: true, MaxDelay: 100 * time.Microsecond, Seed: 5})
	var flushes int
	q := r.narrowQueue(t, "q", &flushes)
	require.Error(t, func() error {
		_, err := queue.New(r.rt, queue.Config{Name: "bad", AgentScope: true})
		return err
	}(), "AgentScope without Flush")
	buf, _ := r.m.HIP().Malloc(0, 64)
	buf2, _ := r.m.HIP().Malloc(0, 64)
	read := func(p uint64) float32 {
		var out [16]float32
		require.NoError(t, r.m.HIP().MemcpyDtoH(0, unsafe.Pointer(&out[0]), hip.DevicePtr(p), 64))
		return out[15]
	}

	t1 := r.fillDispatch(t, q, uint64(buf), 1)
	require.NoError(t, q.WaitHost(t1))
	require.Equal(t, t1+1, q.LastTicket(), "a marker follows the newest ticket")
	require.GreaterOrEqual(t, q.Completed(), t1)
	require.Equal(t, float32(1), read(uint64(buf)))
	require.Zero(t, flushes)

	// A packet after t2 waits for a signal the host completes only after
	// its wait for t2.
	hold := queue.Foreign(mustSignal(t, r.rt))
	t2 := r.fillDispatch(t, q, uint64(buf2), 2)
	_, err := q.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{hold})
	require.NoError(t, err)
	t3 := r.fillDispatch(t, q, uint64(buf), 3)
	require.Less(t, q.Completed(), t2)
	require.NoError(t, q.WaitHost(t2))
	require.GreaterOrEqual(t, q.Completed(), t2)
	require.Equal(t, float32(2), read(uint64(buf2)))
	r.rt.SignalStoreScrelease(hold.H, 0)
	require.NoError(t, q.WaitHost(t3))
	require.Equal(t, float32(3), read(uint64(buf)))
	if skip {
		require.Zero(t, flushes)
		hs := r.m.Hazards()
		require.Len(t, hs, 3, "%v", hs)
		for _, h := range hs {
			require.Equal(t, emu.HazardVisibility, h.Kind, "%v", h)
		}
		return
	}
	require.Equal(t, 1, flushes, "the wait for t2 flushed")
	require.Empty(t, r.m.Hazards())
}

func mustSignal(t *testing.T, rt hsa.Runtime) hsa.Signal {
	s, err := rt.SignalCreate(1, nil)
	require.NoError(t, err)
	return s
}

// A barrier-AND on another GPU's queue waits for a system-scope release
// after the producer's ticket (a marker the producer queue adds where none
// follows it), so what the producer released at agent scope reaches the
// other GPU: its fill of the same pinned buffer is ordered after the
// producer's and sees it, and the checker finds nothing. Without the
// release (SkipSystemRelease) it reports the other GPU's write as a
// visibility hazard.
func TestAgentScopeCrossGPUWaitReleasesAtSystemScope(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(map[bool]string{false: "releases", true: "no system-scope release"}[skip], func(t *testing.T) {
			testhooks.SkipSystemRelease.Store(skip)
			defer testhooks.SkipSystemRelease.Store(false)
			g := newTwoGPUs(t)
			qs := g.narrowPair(t)
			t0 := g.fill(t, qs[0], 0, 1)
			require.NoError(t, qs[1].WaitDevice([]syncstate.Fence{{TL: qs[0], Ticket: t0}}))
			require.Equal(t, t0+1, qs[0].LastTicket(), "a system-scope marker follows the producer's ticket")
			t1 := g.fill(t, qs[1], 1, 2)
			require.NoError(t, qs[1].WaitHost(t1))
			require.NoError(t, qs[0].WaitHost(t0))
			require.Equal(t, float32(2), *(*float32)(g.buf), "GPU 1's fill ran last")
			hz := g.m.Hazards()
			if !skip {
				require.Empty(t, hz)
				return
			}
			require.NotEmpty(t, hz)
			require.Equal(t, emu.HazardVisibility, hz[0].Kind, "%v", hz[0])
			require.Contains(t, hz[0].Queue, "gpu1")
			require.Contains(t, hz[0].PriorQ, "gpu0")
		})
	}
}

// narrowPair is two agent-scope queues, one per GPU of g, each flushing
// through a queue of its own.
func (g *twoGPUs) narrowPair(t *testing.T) [2]*queue.Queue {
	var qs [2]*queue.Queue
	for i := range qs {
		fq, err := queue.New(g.rt, queue.Config{Name: fmt.Sprintf("gpu%d-flush", i), Agent: g.agents[1+i], Size: 64,
			KernargPool: g.pool, Signals: g.signals})
		require.NoError(t, err)
		t.Cleanup(func() { _ = fq.Close() })
		c := g.config(i)
		c.AgentScope = true
		c.Flush = func() error {
			ft, err := fq.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{})
			if err != nil {
				return err
			}
			return fq.WaitHost(ft)
		}
		qs[i], err = queue.New(g.rt, c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = qs[i].Close() })
	}
	return qs
}

// Another GPU waits for a ticket that completed before its queue broke at
// a later packet. Its system-scope release is gone in both orders: the
// queue broke before the wait and takes no marker (systemSignalFor
// returned "complete" without one), or the marker went in behind the
// faulting packet and never ran (releaseBroken completed its signal
// without a release). Either way GPU 1's fill, ordered after GPU 0's,
// wrote past what GPU 0 had not written back: the checker reported a
// visibility hazard. The producer's queue now flushes in both.
func TestAgentScopeCrossGPUWaitOnABrokenQueue(t *testing.T) {
	for _, before := range []bool{true, false} {
		t.Run(map[bool]string{true: "broken before the wait", false: "broken after the wait"}[before], func(t *testing.T) {
			g := newTwoGPUs(t)
			qs := g.narrowPair(t)
			hold := queue.Foreign(mustSignal(t, g.rt))
			t0 := g.fill(t, qs[0], 0, 1)
			if !before {
				_, err := qs[0].BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{hold})
				require.NoError(t, err)
			}
			var ka [kernels.KernargSize]byte
			bad, err := qs[0].Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
			require.NoError(t, err)
			if before {
				require.Eventually(t, func() bool { return qs[0].Err() != nil }, time.Minute, 50*time.Microsecond)
			}
			require.NoError(t, qs[1].WaitDevice([]syncstate.Fence{{TL: qs[0], Ticket: t0}}))
			g.rt.SignalStoreScrelease(hold.H, 0)
			t1 := g.fill(t, qs[1], 1, 2)
			require.NoError(t, qs[1].WaitHost(t1), "GPU 1 waited only for work before the fault")
			require.ErrorIs(t, qs[0].WaitHost(bad), queue.ErrQueueBroken)
			require.NoError(t, qs[0].WaitHost(t0))
			require.Equal(t, float32(2), *(*float32)(g.buf), "GPU 1's fill ran last")
			require.Empty(t, g.m.Hazards())
		})
	}
}

// A broken queue's packets that never ran release nothing. rocsync
// completes their signals so that their waiters wake (releaseBroken), and
// a system-scope marker among them must not count as the release that
// makes the writes before the break visible outside the GPU: the wait
// that learns of the break flushes instead, and the host reads what the
// ticket before the break wrote with no visibility hazard. Counting the
// failed marker as a release skipped the flush, and the checker reported
// the read (the fault fuzzer's seed 3 with agent scope on).
func TestAgentScopeFailedMarkerReleasesNothing(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true, MaxDelay: 100 * time.Microsecond, Seed: 7})
	var flushes int
	q := r.narrowQueue(t, "q", &flushes)
	buf, _ := r.m.HIP().Malloc(0, 64)
	t1 := r.fillDispatch(t, q, uint64(buf), 1)
	var ka [kernels.KernargSize]byte
	_, err := q.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.NoError(t, err)
	mt, err := q.Marker(nil)
	require.NoError(t, err)
	require.ErrorIs(t, q.WaitHost(mt), queue.ErrQueueBroken, "the marker failed with the queue")
	require.Equal(t, 1, flushes, "learning of the break made the ticket before it visible")
	require.NoError(t, q.WaitHost(t1), "the ticket before the break succeeded")
	var out [16]float32
	require.NoError(t, r.m.HIP().MemcpyDtoH(0, unsafe.Pointer(&out[0]), buf, 64))
	require.Equal(t, float32(1), out[15])
	require.Empty(t, r.m.Hazards())
}

// A queue that waited on the device for failed work takes no more
// packets, though it did not break itself: a ticket before that wait
// succeeded, and another GPU waiting for it still needs its release.
// systemSignalFor looked only for a break, handed the waiter the ticket's
// own signal with no release, and the checker reported GPU 1's fill.
func TestAgentScopeCrossGPUWaitOnAnUpstreamFailedQueue(t *testing.T) {
	g := newTwoGPUs(t)
	qs := g.narrowPair(t)
	c := g.config(0)
	c.Name = "gpu0-producer"
	producer, err := queue.New(g.rt, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	var ka [kernels.KernargSize]byte
	bad, err := producer.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.NoError(t, err)
	t0 := g.fill(t, qs[0], 0, 1)
	require.NoError(t, qs[0].WaitDevice([]syncstate.Fence{{TL: producer, Ticket: bad}}))
	require.ErrorIs(t, producer.WaitHost(bad), queue.ErrQueueBroken)
	require.Eventually(t, func() bool { return qs[0].Err() != nil }, time.Minute, 50*time.Microsecond)
	require.NoError(t, qs[1].WaitDevice([]syncstate.Fence{{TL: qs[0], Ticket: t0}}))
	t1 := g.fill(t, qs[1], 1, 2)
	require.NoError(t, qs[1].WaitHost(t1))
	require.Equal(t, float32(2), *(*float32)(g.buf), "GPU 1's fill ran last")
	require.Empty(t, g.m.Hazards())
}

// A broken queue's failed barrier-AND that waited for a kernel on another
// queue of the GPU stands between that kernel and whoever waits for the
// barrier. The kernel released at agent scope; releaseBroken completed the
// barrier's signal once the kernel was done, with no release, and the
// host, told the barrier's ticket was done, wrote the kernel's buffer
// before the L2 wrote it back: the checker reported the host's write (the
// fault fuzzer's seed 305 under DeviceBridge with agent scope on: a freed
// array's block went back to the cache and an upload overwrote it). The
// break now flushes before it completes such a barrier.
func TestAgentScopeFailedBarrierKeepsTheReleaseOfWhatItWaitedFor(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true, MaxDelay: 100 * time.Microsecond, Seed: 11})
	agents, _ := r.rt.Agents()
	pools, _ := r.rt.MemoryPools(agents[0])
	var flushes atomic.Int32
	narrow := func(name string) *queue.Queue {
		fq := r.queue(t, name+"-flush", 64)
		q, err := queue.New(r.rt, queue.Config{Name: name, Agent: agents[1], Size: 64, KernargPool: pools[0],
			Signals: r.signals, AgentScope: true, Flush: func() error {
				ft, err := fq.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{})
				if err == nil {
					err = fq.WaitHost(ft)
				}
				flushes.Add(1)
				return err
			}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	producer, consumer := narrow("producer"), narrow("consumer")
	buf, _ := r.m.HIP().Malloc(0, 64)

	holdProducer, holdConsumer := queue.Foreign(mustSignal(t, r.rt)), queue.Foreign(mustSignal(t, r.rt))
	_, err := producer.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{holdProducer})
	require.NoError(t, err)
	fill := r.fillDispatch(t, producer, uint64(buf), 1)
	_, err = consumer.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{holdConsumer})
	require.NoError(t, err)
	var ka [kernels.KernargSize]byte
	_, err = consumer.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.NoError(t, err)
	require.NoError(t, consumer.WaitDevice([]syncstate.Fence{{TL: producer, Ticket: fill}}))
	barrier := consumer.LastTicket()

	// The consumer breaks at the bad dispatch; learning of it flushes once
	// (its first ticket succeeded), before the fill has run.
	r.rt.SignalStoreScrelease(holdConsumer.H, 0)
	require.Eventually(t, func() bool { return flushes.Load() == 1 }, time.Minute, 50*time.Microsecond)
	r.rt.SignalStoreScrelease(holdProducer.H, 0)
	require.Eventually(t, func() bool { return consumer.Completed() >= barrier }, time.Minute, 50*time.Microsecond)
	require.ErrorIs(t, consumer.Failed(barrier), queue.ErrQueueBroken)

	twos := [16]float32{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}
	require.NoError(t, r.m.HIP().MemcpyHtoD(0, buf, unsafe.Pointer(&twos[0]), 64))
	require.Empty(t, r.m.Hazards(), "the host wrote what the fill wrote before its write-back")
}

// With AgentScope, a dispatch acquires at agent scope unless an op asked
// for a system-scope acquire (AcquireSystem), which the next dispatch
// alone takes; a replay's first packet acquires at system scope and takes
// a pending request too; barrier-AND packets acquire nothing. Without
// AgentScope every packet acquires at system scope. The queues of one GPU share their writes; a timeline of
// another kind does not.
func TestAgentScopeAcquiresAtSystemScopeOnlyWhereAsked(t *testing.T) {
	r := newRig(t, emu.Options{})
	var flushes int
	q := r.narrowQueue(t, "narrow", &flushes)
	buf, _ := r.m.HIP().Malloc(0, 64)
	dispatchAcquires := func(f func()) [4]uint64 {
		before := r.m.HSA().FenceScopes()
		f()
		require.NoError(t, q.Drain())
		return r.m.HSA().FenceScopes().Sub(before).Acquire[hsa.FenceKindDispatch]
	}
	agent, system := func(n uint64) [4]uint64 { return [4]uint64{0, n, 0, 0} }, func(n uint64) [4]uint64 { return [4]uint64{0, 0, n, 0} }
	require.Equal(t, agent(2), dispatchAcquires(func() {
		r.fillDispatch(t, q, uint64(buf), 1)
		r.fillDispatch(t, q, uint64(buf), 2)
	}))
	require.Equal(t, system(1), dispatchAcquires(func() {
		q.AcquireSystem()
		q.AcquireSystem() // one request, however many ops make it
		r.fillDispatch(t, q, uint64(buf), 3)
	}))
	require.Equal(t, agent(1), dispatchAcquires(func() { r.fillDispatch(t, q, uint64(buf), 4) }))

	var ds []queue.Dispatch
	for i := range 3 {
		ds = append(ds, r.fillOf(uint64(buf), float64(i)))
	}
	rec, err := q.NewRecording(ds)
	require.NoError(t, err)
	defer func() { require.NoError(t, rec.Release()) }()
	got := dispatchAcquires(func() {
		q.AcquireSystem()
		_, err := q.Replay(rec)
		require.NoError(t, err)
		r.fillDispatch(t, q, uint64(buf), 5) // the replay took the request
	})
	require.Equal(t, [4]uint64{0, 3, 1, 0}, got)

	// A barrier-AND reads no memory: neither one that waits nor the
	// marker a host wait adds acquires anything.
	before := r.m.HSA().FenceScopes()
	_, err = q.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{})
	require.NoError(t, err)
	require.NoError(t, q.Drain())
	barriers := r.m.HSA().FenceScopes().Sub(before).Acquire[hsa.FenceKindBarrierAnd]
	require.NotZero(t, barriers[hsa.FenceScopeNone])
	require.Equal(t, [4]uint64{barriers[hsa.FenceScopeNone], 0, 0, 0}, barriers)

	wide := r.queue(t, "wide", 64)
	require.Equal(t, system(1), func() [4]uint64 {
		before := r.m.HSA().FenceScopes()
		require.NoError(t, wide.WaitHost(r.fillDispatch(t, wide, uint64(buf), 6)))
		return r.m.HSA().FenceScopes().Sub(before).Acquire[hsa.FenceKindDispatch]
	}())

	require.True(t, q.SharesWritesOf(wide), "a queue of the same GPU")
	require.True(t, q.SharesWritesOf(q))
	require.False(t, q.SharesWritesOf(&otherTimeline{}), "a timeline that is not an HSA queue")
}

// otherTimeline is a timeline that is not an HSA queue (a stream, a host
// lane): a queue shares none of its writes.
type otherTimeline struct{ syncstate.Timeline }

// A broken queue acquires at system scope, GPU-wide, through a flush
// before it completes its failed packets' signals, even where making the
// ticket before the break visible took no flush (the SkipSystemRelease
// switch stands in for a ticket already visible): a makeVisible that
// returned without flushing counted as that flush, and the queue then
// completed the failed signals with no acquire at all.
func TestBrokenQueueFlushesBeforeItReleasesItsFailedPackets(t *testing.T) {
	testhooks.SkipSystemRelease.Store(true)
	defer testhooks.SkipSystemRelease.Store(false)
	r := newRig(t, emu.Options{})
	agents, _ := r.rt.Agents()
	pools, _ := r.rt.MemoryPools(agents[0])
	fq := r.queue(t, "flush", 64)
	var flushes atomic.Int32
	q, err := queue.New(r.rt, queue.Config{Name: "q", Agent: agents[1], Size: 64, KernargPool: pools[0],
		Signals: r.signals, AgentScope: true, Flush: func() error {
			flushes.Add(1)
			ft, err := fq.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{})
			if err != nil {
				return err
			}
			return fq.WaitHost(ft)
		}})
	require.NoError(t, err)
	buf, _ := r.m.HIP().Malloc(0, 64)
	r.fillDispatch(t, q, uint64(buf), 1)
	r.m.Quiesce()
	q.Completed() // the fill is complete, and not yet visible
	var ka [kernels.KernargSize]byte
	_, err = q.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.NoError(t, err)
	// No host wait: it would make the fill visible itself, first.
	require.Eventually(t, func() bool { return q.Err() != nil }, 10*time.Second, time.Millisecond)
	_ = q.Close() // reports the break; it waits for the release of the failed packets
	require.GreaterOrEqual(t, flushes.Load(), int32(1), "no flush, so no acquire, before the failed signals completed")
}
