package queue_test

import (
	"testing"
	"time"

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
		signals := queue.NewSignalPool(rt, 0)
		var qs [2]*queue.Queue
		var fill [2]uint64
		for g := range qs {
			require.NoError(t, rt.ExecutableLoadAgentCodeObject(exe, agents[1+g], rd))
		}
		require.NoError(t, rt.ExecutableFreeze(exe))
		for g := range qs {
			sym, err := rt.ExecutableSymbolByName(exe, kernels.Fill.Symbol(kernels.F32), agents[1+g])
			require.NoError(t, err)
			fill[g], err = rt.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject)
			require.NoError(t, err)
			qs[g], err = queue.New(rt, queue.Config{Name: "gpu" + string(rune('0'+g)), Agent: agents[1+g], Size: 64,
				KernargPool: pools[0], Signals: signals, Place: uint64(g + 1)})
			require.NoError(t, err)
		}
		require.True(t, syncstate.CrossDevice(qs[1], qs[0]))
		require.True(t, qs[1].CanWaitPeer(syncstate.DomainKernel))
		buf, err := m.HIP().HostMalloc(64)
		require.NoError(t, err)
		dispatch := func(g int, v float64) uint64 {
			args := kernels.Args{Out: uint64(uintptr(buf)), Alpha: v, N: 16}
			var ka [kernels.KernargSize]byte
			args.Encode(ka[:], kernels.F32)
			ticket, err := qs[g].Dispatch(&queue.Dispatch{KernelObject: fill[g], Grid: 16, Workgroup: 16, Kernarg: ka[:]})
			require.NoError(t, err)
			return ticket
		}
		t0 := dispatch(0, 1)
		if wait {
			require.NoError(t, qs[1].WaitDevice([]syncstate.Fence{{TL: qs[0], Ticket: t0}}))
		} else {
			// Let GPU 0 finish, unobserved by the host: only the checker
			// (not Go's race detector) is to see the race.
			m.Quiesce()
		}
		t1 := dispatch(1, 2)
		require.NoError(t, qs[1].WaitHost(t1))
		require.NoError(t, qs[0].WaitHost(t0))
		if wait {
			require.Empty(t, m.Hazards())
			require.Equal(t, float32(2), *(*float32)(buf), "GPU 1's fill ran last")
		} else {
			hz := m.Hazards()
			require.NotEmpty(t, hz, "the checker missed a race between two GPUs' queues")
			require.Equal(t, emu.HazardWriteWrite, hz[0].Kind)
			require.NotEqual(t, hz[0].Queue, hz[0].PriorQ)
		}
		for _, q := range qs {
			require.NoError(t, q.Close())
		}
	}
}
