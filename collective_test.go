package rocsync

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/rocmdev/emu"
)

// openCollEmu opens n emulated GPUs with the hazard checker and random
// delays, and a task on each.
func openCollEmu(t *testing.T, n int, p Policy, mod func(*Options)) ([]*Device, []*Task) {
	t.Helper()
	o := Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		Emulator: EmulatorOptions{Devices: n, HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: uint64(7 + n)}}
	if mod != nil {
		mod(&o)
	}
	devs, err := OpenAll(o)
	require.NoError(t, err)
	tasks := make([]*Task, n)
	for i, d := range devs {
		t.Cleanup(func() { _ = d.Close() })
		tasks[i], err = d.NewTask()
		require.NoError(t, err)
	}
	return devs, tasks
}

func requireNoHazards(t *testing.T, devs []*Device) {
	t.Helper()
	for _, d := range devs {
		require.Empty(t, d.Hazards(), "hazards on %v", d)
	}
}

// The three collectives as ops: each rank's input is written by a kernel
// on its HSA queue just before (so the collective on the library stream
// must wait for it on the device or host), and the result is read by a
// kernel after.
func TestCollectivesOnEmulator(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, p := range []Policy{DeviceSide, SkipSameQueue, Unified} {
			t.Run(fmt.Sprintf("%d/%v", n, p), func(t *testing.T) {
				devs, tasks := openCollEmu(t, n, p, nil)
				checkCollectivesAsOps(t, devs, tasks)
				requireNoHazards(t, devs)
			})
		}
	}
}

// checkCollectivesAsOps runs the three collectives over one task per
// device (a communicator of every device), each between kernels that
// write its input and read its output, and checks the results against
// the CPU, with the parts submitted either way (CommSubmit).
func checkCollectivesAsOps(t *testing.T, devs []*Device, tasks []*Task) {
	t.Helper()
	for _, m := range []CommSubmit{SubmitGroup, SubmitThreads} {
		checkCollectivesSubmitted(t, devs, tasks, m)
	}
}

// checkCollectivesSubmitted is checkCollectivesAsOps with the parts
// submitted as m says.
func checkCollectivesSubmitted(t *testing.T, devs []*Device, tasks []*Task, m CommSubmit) {
	t.Helper()
	n := len(tasks)
	comm, err := NewCommunicator(tasks...)
	require.NoError(t, err)
	defer func() { require.NoError(t, comm.Close()) }()
	require.NoError(t, comm.SetSubmit(m))
	require.Equal(t, n, comm.Ranks())
	const rows, cols = 3, 5
	xs, sends, gathered := make([]*Array, n), make([]*Array, n), make([]*Array, n)
	for r := range n {
		host := make([]float32, rows*cols)
		for i := range host {
			host[i] = float32(r+1) + float32(i)/8
		}
		base, err := devs[r].FromFloat32(rows, cols, host)
		require.NoError(t, err)
		xs[r], err = tasks[r].Scale(2, base) // written on the kernel queue
		require.NoError(t, err)
		sends[r], err = tasks[r].Copy(xs[r])
		require.NoError(t, err)
		gathered[r], err = devs[r].Empty(n*rows, cols, Float32)
		require.NoError(t, err)
	}
	require.NoError(t, comm.AllReduce(ReduceSum, xs...))
	require.NoError(t, comm.AllGather(sends, gathered))
	outs := make([]*Array, n)
	for r := range n {
		outs[r], err = tasks[r].Scale(1, xs[r]) // reads the result on the kernel queue
		require.NoError(t, err)
	}
	for r := range n {
		got, err := outs[r].Float32s()
		require.NoError(t, err)
		for i, v := range got {
			var want float32
			for q := range n {
				want += 2 * (float32(q+1) + float32(i)/8)
			}
			require.InDelta(t, want, v, 1e-4, "all-reduce rank %d element %d", r, i)
		}
		g, err := gathered[r].Float32s()
		require.NoError(t, err)
		for i, v := range g {
			q, j := i/(rows*cols), i%(rows*cols)
			require.Equal(t, 2*(float32(q+1)+float32(j)/8), v, "all-gather rank %d element %d", r, i)
		}
	}
	// Broadcast from the last rank over the all-reduced arrays'
	// copies: the non-roots' old values are overwritten.
	root := n - 1
	bs := make([]*Array, n)
	for r := range n {
		bs[r], err = tasks[r].Scale(float64(r+1), xs[r])
		require.NoError(t, err)
	}
	require.NoError(t, comm.Broadcast(root, bs...))
	want, err := bs[root].Float32s()
	require.NoError(t, err)
	for r := range n {
		got, err := bs[r].Float32s()
		require.NoError(t, err)
		require.Equal(t, want, got, "broadcast rank %d", r)
	}
}

// A data-parallel training step of linear regression: per device, the
// gradient of its shard (gemms on the library stream, elementwise on the
// HSA queue), all-reduced, then the same SGD update on every device. The
// weights equal a CPU run on the whole batch.
func TestAllReduceInTrainingStep(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			devs, tasks := openCollEmu(t, n, DeviceSide, nil)
			comm, err := NewCommunicator(tasks...)
			require.NoError(t, err)
			defer comm.Close()
			const shard, in, steps = 4, 3, 3
			const lr = 0.05
			batch := n * shard
			x, y := make([]float64, batch*in), make([]float64, batch)
			for i := range x {
				x[i] = math.Sin(float64(i)) / 2
			}
			for i := range y {
				y[i] = math.Cos(float64(i))
			}
			w0 := []float64{0.1, -0.2, 0.3}
			ws, xs, ys := make([]*Array, n), make([]*Array, n), make([]*Array, n)
			for r := range n {
				ws[r], err = devs[r].FromFloat64(in, 1, w0)
				require.NoError(t, err)
				xs[r], err = devs[r].FromFloat64(shard, in, x[r*shard*in:(r+1)*shard*in])
				require.NoError(t, err)
				ys[r], err = devs[r].FromFloat64(shard, 1, y[r*shard:(r+1)*shard])
				require.NoError(t, err)
			}
			grads := make([]*Array, n)
			for range steps {
				for r, tk := range tasks {
					pred, err := tk.MatMul(xs[r], ws[r], false, false) // library stream
					require.NoError(t, err)
					diff, err := tk.Sub(pred, ys[r]) // HSA queue
					require.NoError(t, err)
					if grads[r] == nil {
						grads[r], err = devs[r].Empty(in, 1, Float64)
						require.NoError(t, err)
					}
					require.NoError(t, tk.MatMulInto(grads[r], xs[r], diff, true, false))
					require.NoError(t, pred.Free())
					require.NoError(t, diff.Free())
				}
				require.NoError(t, comm.AllReduce(ReduceSum, grads...))
				for r, tk := range tasks {
					require.NoError(t, tk.AXPYInto(ws[r], -lr*2/float64(batch), grads[r], ws[r])) // HSA queue
				}
			}
			// The CPU reference on the whole batch.
			w := append([]float64(nil), w0...)
			for range steps {
				g := make([]float64, in)
				for b := range batch {
					var p float64
					for k := range in {
						p += x[b*in+k] * w[k]
					}
					for k := range in {
						g[k] += x[b*in+k] * (p - y[b])
					}
				}
				for k := range in {
					w[k] -= lr * 2 / float64(batch) * g[k]
				}
			}
			for r := range n {
				got, err := ws[r].Float64s()
				require.NoError(t, err)
				require.InDeltaSlice(t, w, got, 1e-12, "rank %d", r)
			}
			requireNoHazards(t, devs)
		})
	}
}

// raceProgram writes each rank's array with a kernel on its HSA queue and
// all-reduces it on the library stream: only rocsync's device-side waits
// order the two.
func raceProgram(t *testing.T, devs []*Device, tasks []*Task, comm *Communicator) {
	xs := make([]*Array, len(tasks))
	for r, tk := range tasks {
		base, err := devs[r].FromFloat32(64, 64, make([]float32, 64*64))
		require.NoError(t, err)
		xs[r], err = tk.Scale(3, base)
		require.NoError(t, err)
	}
	devs[0].machine().Quiesce() // the kernels finish, unobserved by the host (ordered for Go's race detector)
	_ = comm.AllReduce(ReduceSum, xs...)
	for _, tk := range tasks {
		_ = tk.Synchronize()
	}
}

// The checker proves the collective's declared accesses and rocsync's
// waits matter: leave rank 1's access out, or rocsync's waits, and the
// race between the kernel that wrote the array and the collective is
// reported.
func TestCollectiveWithoutDeclaredAccessOrWaitIsARace(t *testing.T) {
	t.Run("declared", func(t *testing.T) {
		devs, tasks := openCollEmu(t, 2, DeviceSide, nil)
		comm, err := NewCommunicator(tasks...)
		require.NoError(t, err)
		defer comm.Close()
		raceProgram(t, devs, tasks, comm)
		requireNoHazards(t, devs)
	})
	t.Run("access left out", func(t *testing.T) {
		devs, tasks := openCollEmu(t, 2, DeviceSide, nil)
		comm, err := NewCommunicator(tasks...)
		require.NoError(t, err)
		defer comm.Close()
		comm.dropAccess = func(rank int) bool { return rank == 1 }
		raceProgram(t, devs, tasks, comm)
		hs := devs[1].Hazards() // the machine's: both GPUs'
		require.NotEmpty(t, hs, "the checker must see the undeclared access")
		for _, h := range hs {
			require.ErrorIs(t, h, emu.ErrHazard)
			require.Contains(t, h.Error(), "ncclAllReduce (rank 1 of 2", "only rank 1 left its access out")
			require.NotContains(t, h.Error(), "rank 0")
		}
	})
	t.Run("waits removed", func(t *testing.T) {
		devs, tasks := openCollEmu(t, 2, DeviceSide, func(o *Options) { o.test.DisableWaits = true })
		comm, err := NewCommunicator(tasks...)
		require.NoError(t, err)
		defer comm.Close()
		raceProgram(t, devs, tasks, comm)
		var found bool
		for _, d := range devs {
			for _, h := range d.Hazards() {
				found = found || strings.Contains(h.Error(), "ncclAllReduce")
			}
		}
		require.True(t, found, "the checker must see the missing wait")
	})
}

// A rank that never calls the collective: the others' parts fail after
// WaitTimeout instead of hanging, and the read-back returns the error.
func TestCollectiveMissingRankTimesOut(t *testing.T) {
	// Two separate Opens, each with one GPU, model two processes.
	var devs [2]*Device
	var tasks [2]*Task
	for r := range 2 {
		d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, WaitTimeout: 300 * time.Millisecond,
			Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: uint64(r)}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		devs[r] = d
		tasks[r], err = d.NewTask()
		require.NoError(t, err)
	}
	id, err := devs[0].NewUniqueID()
	require.NoError(t, err)
	text := id.String()
	var comms [2]*Communicator
	var errs [2]error
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			id, err := ParseUniqueID(text)
			if err != nil {
				errs[r] = err
				return
			}
			comms[r], errs[r] = JoinCommunicator(tasks[r], id, r, 2)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	// Both ranks: a correct all-reduce across the two "processes".
	xs := [2]*Array{}
	for r := range 2 {
		xs[r], err = devs[r].FromFloat32(1, 4, []float32{1, 2, 3, float32(r)})
		require.NoError(t, err)
	}
	for r := range 2 {
		wg.Go(func() { errs[r] = comms[r].AllReduce(ReduceSum, xs[r]) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	for r := range 2 {
		got, err := xs[r].Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{2, 4, 6, 1}, got)
	}
	// Only rank 0 calls the next one.
	start := time.Now()
	require.NoError(t, comms[0].AllReduce(ReduceSum, xs[0]))
	_, err = xs[0].Float32s()
	require.Error(t, err)
	require.True(t, errors.Is(err, ErrTimeout) || errors.Is(err, ErrFault), "%v", err)
	require.Less(t, time.Since(start), 10*time.Second)
	// The stream's error names the rendezvous that failed.
	err = tasks[0].Synchronize()
	require.ErrorIs(t, err, ErrFault)
	require.Contains(t, err.Error(), "ranks [1]")
	require.NoError(t, comms[1].Close())
	require.Error(t, comms[0].Close())
	requireNoHazards(t, devs[:])

	// A join that no other rank makes times out too.
	lone, err := devs[1].NewUniqueID()
	require.NoError(t, err)
	t1, err := devs[1].NewTask()
	require.NoError(t, err)
	_, err = JoinCommunicator(t1, lone, 0, 2)
	require.ErrorIs(t, err, ErrTimeout)
}

// Bad input is a typed error, before anything is submitted: the
// communicator stays usable.
func TestCollectiveBadInputs(t *testing.T) {
	devs, tasks := openCollEmu(t, 2, DeviceSide, nil)
	comm, err := NewCommunicator(tasks...)
	require.NoError(t, err)
	defer comm.Close()
	mk := func(d int, rows, cols int, dt DType) *Array {
		a, err := devs[d].Empty(rows, cols, dt)
		require.NoError(t, err)
		return a
	}
	a0, a1 := mk(0, 2, 3, Float32), mk(1, 2, 3, Float32)
	require.ErrorIs(t, comm.AllReduce(ReduceSum, a0), ErrInvalid, "one array for two ranks")
	require.ErrorIs(t, comm.AllReduce(ReduceSum, a0, nil), ErrNilArray)
	require.ErrorIs(t, comm.AllReduce(ReduceSum, a1, a0), ErrDeviceMismatch)
	require.ErrorIs(t, comm.AllReduce(ReduceSum, a0, mk(1, 2, 3, Float64)), ErrDType)
	require.ErrorIs(t, comm.AllReduce(ReduceSum, a0, mk(1, 3, 2, Float32)), ErrShape)
	require.ErrorIs(t, comm.AllReduce(ReduceOp(9), a0, a1), ErrInvalid)
	require.ErrorIs(t, comm.Broadcast(2, a0, a1), ErrInvalid)
	require.ErrorIs(t, comm.AllGather([]*Array{a0, a1}, []*Array{mk(0, 2, 3, Float32), mk(1, 4, 3, Float32)}), ErrShape)
	require.ErrorIs(t, comm.AllGather([]*Array{a0, a1}, []*Array{mk(0, 4, 3, Float64), mk(1, 4, 3, Float32)}), ErrDType)
	freed := mk(1, 2, 3, Float32)
	require.NoError(t, freed.Free())
	require.ErrorIs(t, comm.AllReduce(ReduceSum, a0, freed), ErrFreed)
	var nilComm *Communicator
	require.ErrorIs(t, nilComm.AllReduce(ReduceSum, a0), ErrInvalid)
	_, err = NewCommunicator()
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewCommunicator(tasks[0], tasks[0])
	require.ErrorIs(t, err, ErrInvalid)
	other, err := devs[0].NewTask()
	require.NoError(t, err)
	_, err = NewCommunicator(tasks[0], other)
	require.ErrorIs(t, err, ErrInvalid, "two ranks on one GPU")
	_, err = JoinCommunicator(tasks[0], UniqueID{}, 2, 2)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = ParseUniqueID("zz")
	require.ErrorIs(t, err, ErrInvalid)

	// Still usable.
	require.NoError(t, comm.AllReduce(ReduceMax, a0, a1))
	_, err = a1.Float32s()
	require.NoError(t, err)
	requireNoHazards(t, devs)
	require.NoError(t, comm.Close())
	require.ErrorIs(t, comm.AllReduce(ReduceSum, a0, a1), ErrClosed)
	require.NoError(t, comm.Close())
}
