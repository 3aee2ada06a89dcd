package queue_test

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

// HSA signals are system-wide: a barrier-AND packet on a queue of GPU 1
// waits for the completion signal of a dispatch on GPU 0's queue. Two fills
// of the same pinned buffer (which both GPUs reach), one per GPU, are
// ordered by it, and the hazard checker, which sees both GPUs and pinned
// memory, finds nothing; without the wait it reports the write/write race
// between the two GPUs' queues.
func TestBarrierAndWaitsForAnotherGPUsSignal(t *testing.T) {
	for _, wait := range []bool{true, false} {
		g := newTwoGPUs(t)
		var qs [2]*queue.Queue
		for i := range qs {
			var err error
			qs[i], err = queue.New(g.rt, g.config(i))
			require.NoError(t, err)
		}
		require.True(t, syncstate.CrossDevice(qs[1], qs[0]))
		require.True(t, qs[1].CanWaitPeer(syncstate.DomainKernel))
		t0 := g.fill(t, qs[0], 0, 1)
		if wait {
			require.NoError(t, qs[1].WaitDevice([]syncstate.Fence{{TL: qs[0], Ticket: t0}}))
		} else {
			// Let GPU 0 finish, unobserved by the host: only the checker
			// (not Go's race detector) is to see the race.
			g.m.Quiesce()
		}
		t1 := g.fill(t, qs[1], 1, 2)
		require.NoError(t, qs[1].WaitHost(t1))
		require.NoError(t, qs[0].WaitHost(t0))
		if wait {
			require.Empty(t, g.m.Hazards())
			require.Equal(t, float32(2), *(*float32)(g.buf), "GPU 1's fill ran last")
		} else {
			hz := g.m.Hazards()
			require.NotEmpty(t, hz, "the checker missed a race between two GPUs' queues")
			require.Equal(t, emu.HazardWriteWrite, hz[0].Kind)
			require.NotEqual(t, hz[0].Queue, hz[0].PriorQ)
		}
		for _, q := range qs {
			require.NoError(t, q.Close())
		}
	}
}

// twoGPUs is an emulated machine of two GPUs (hazard checker and random
// delays on) with the fill kernel loaded on both and a pinned buffer both
// reach.
type twoGPUs struct {
	m       *emu.Machine
	rt      hsa.Runtime
	agents  []hsa.Agent
	pool    hsa.MemoryPool
	signals *queue.SignalPool
	fillKO  [2]uint64 // the fill kernel's object on each GPU
	buf     unsafe.Pointer
}

func newTwoGPUs(t *testing.T) *twoGPUs {
	m := emu.New(emu.Options{Devices: 2, Hazards: true, MaxDelay: 200 * time.Microsecond, Seed: 9})
	rt := m.HSA()
	require.NoError(t, rt.Init())
	agents, err := rt.Agents()
	require.NoError(t, err)
	require.Len(t, agents, 3) // the CPU and two GPUs
	code, err := kernels.CodeObject(m.Options().ISA)
	require.NoError(t, err)
	rd, err := rt.CodeObjectReaderCreateFromMemory(code)
	require.NoError(t, err)
	exe, err := rt.ExecutableCreateAlt(hsa.ProfileFull, 0)
	require.NoError(t, err)
	pools, err := rt.MemoryPools(agents[0])
	require.NoError(t, err)
	g := &twoGPUs{m: m, rt: rt, agents: agents, pool: pools[0], signals: queue.NewSignalPool(rt, 0)}
	for i := range g.fillKO {
		require.NoError(t, rt.ExecutableLoadAgentCodeObject(exe, agents[1+i], rd))
	}
	require.NoError(t, rt.ExecutableFreeze(exe))
	for i := range g.fillKO {
		sym, err := rt.ExecutableSymbolByName(exe, kernels.Fill.Symbol(kernels.F32), agents[1+i])
		require.NoError(t, err)
		g.fillKO[i], err = rt.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject)
		require.NoError(t, err)
	}
	g.buf, err = m.HIP().HostMalloc(64)
	require.NoError(t, err)
	return g
}

// config is a queue on GPU i ("gpu<i>", placed on device i+1).
func (g *twoGPUs) config(i int) queue.Config {
	return queue.Config{Name: fmt.Sprintf("gpu%d", i), Agent: g.agents[1+i], Size: 64,
		KernargPool: g.pool, Signals: g.signals, Place: uint64(i + 1)}
}

// fill dispatches a fill of the pinned buffer with v on q, a queue of GPU
// i, and returns its ticket.
func (g *twoGPUs) fill(t *testing.T, q *queue.Queue, i int, v float64) uint64 {
	args := kernels.Args{Out: uint64(uintptr(g.buf)), Alpha: v, N: 16}
	var ka [kernels.KernargSize]byte
	args.Encode(ka[:], kernels.F32)
	ticket, err := q.Dispatch(&queue.Dispatch{KernelObject: g.fillKO[i], Grid: 16, Workgroup: 16, Kernarg: ka[:]})
	require.NoError(t, err)
	return ticket
}
