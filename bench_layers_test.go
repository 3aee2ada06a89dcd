package rocsync

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/cudadev"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// BenchmarkGPUDispatchLayers (ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda) splits
// the host cost of one op into the layers it passes, in one process: each
// round submits 32 elementwise multiplies (128×128) and 32 sgemms through
// every layer in turn on the same task's streams, timing the submission
// alone (the streams drain between layers, untimed), and the benchmark
// reports each layer's median ns per op over the rounds:
//   - lib: cuLaunchKernel / cublasSgemm_v2 on a thread locked once, with
//     the context made current once (what bench/rawcuda does);
//   - ctx: cuda.Ctx's call, which locks the thread and asks
//     cuCtxGetCurrent around every call;
//   - driver: the cudadev driver task (stream bookkeeping);
//   - into: the front API into a preallocated output (sync state);
//   - new: the front API making a new output array each op.
//
// The differences between neighbouring layers are what each layer adds.
func BenchmarkGPUDispatchLayers(b *testing.B) {
	if !gpuRun() || gpuBackend() != CUDA {
		b.Skip("set ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda")
	}
	const n, perRound = 128, 32
	d, err := Open(Options{Backend: CUDA, Policy: DeviceSide, LogLevel: LogOff})
	must(b, err)
	defer d.Close()
	t := d.DefaultTask()
	x, err := d.FromFloat32(n, n, randMatrix(1, n))
	must(b, err)
	y, err := d.FromFloat32(n, n, randMatrix(2, n))
	must(b, err)
	must(b, t.Synchronize())
	dt := t.drv.(*cudadev.Task)
	lib, err := cuda.Open()
	must(b, err)
	ctx, err := lib.PrimaryCtxRetain(0)
	must(b, err)
	defer func() { _ = ctx.Release() }()
	bl, err := cublas.Open()
	must(b, err)
	k, err := d.drv.Builtin(kernels.Mul, kernels.F32)
	must(b, err)
	args := kernels.Args{Out: uint64(y.ptr), A: uint64(x.ptr), B: uint64(x.ptr), N: n * n}
	pb, err := cuda.NewParamBlock(int(k.ArgsSize), k.ParamOffsets)
	must(b, err)
	defer pb.Free()
	var enc [kernels.KernargSize]byte
	args.Encode(enc[:], kernels.F32)
	copy(pb.Bytes(), enc[:k.ArgsSize])
	ks := cuda.Stream(dt.Kernel().Handle())
	h := cublas.Handle(dt.BLASHandle())
	grid := cuda.Dim3{X: (n*n + 255) / 256, Y: 1, Z: 1}
	block := cuda.Dim3{X: 256, Y: 1, Z: 1}
	fn := cuda.Function(k.Object)

	type layer struct {
		name string
		run  func() error
	}
	var fresh []*Array
	layers := []layer{
		{"mul/lib", func() error {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			must(b, ctx.MakeCurrent())
			for range perRound {
				if err := lib.LaunchKernel(fn, grid, block, 0, ks, pb.Params()); err != nil {
					return err
				}
			}
			return nil
		}},
		{"mul/ctx", func() error {
			for range perRound {
				if err := ctx.LaunchKernel(fn, grid, block, 0, ks, pb.Params()); err != nil {
					return err
				}
			}
			return nil
		}},
		{"mul/driver", func() error {
			for range perRound {
				if _, err := dt.Launch(kernels.Mul, kernels.F32, args); err != nil {
					return err
				}
			}
			return nil
		}},
		{"mul/into", func() error {
			for range perRound {
				if err := t.MulInto(y, x, x); err != nil {
					return err
				}
			}
			return nil
		}},
		{"mul/new", func() error {
			for range perRound {
				a, err := t.Mul(x, x)
				if err != nil {
					return err
				}
				fresh = append(fresh, a)
			}
			return nil
		}},
		{"gemm/lib", func() error {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			must(b, ctx.MakeCurrent())
			for range perRound {
				if err := bl.Sgemm(h, cublas.OpN, cublas.OpN, n, n, n, 1, cuda.DevicePtr(x.ptr), n, cuda.DevicePtr(x.ptr), n, 0, cuda.DevicePtr(y.ptr), n); err != nil {
					return err
				}
			}
			return nil
		}},
		{"gemm/driver", func() error {
			for range perRound {
				if _, err := dt.Gemm(kernels.F32, false, false, n, n, n, 1, x.ptr, n, x.ptr, n, 0, y.ptr, n); err != nil {
					return err
				}
			}
			return nil
		}},
		{"gemm/into", func() error {
			for range perRound {
				if err := t.MatMulInto(y, x, x, false, false); err != nil {
					return err
				}
			}
			return nil
		}},
		{"getcurrent", func() error {
			for range perRound {
				if _, err := lib.CtxGetCurrent(); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	drain := func() {
		must(b, t.Synchronize())
		must(b, ctx.Synchronize())
		for _, a := range fresh {
			must(b, a.Free())
		}
		fresh = fresh[:0]
	}
	times := make([][]float64, len(layers))
	for b.Loop() {
		for i, l := range layers {
			t0 := time.Now()
			if err := l.run(); err != nil {
				b.Fatal(l.name, err)
			}
			times[i] = append(times[i], float64(time.Since(t0).Nanoseconds())/perRound)
			drain()
		}
	}
	for i, l := range layers {
		slices.Sort(times[i])
		b.ReportMetric(times[i][len(times[i])/2], l.name+"-ns/op")
	}
}

// emulatedCUDA opens a device on the Go emulation of libcuda with two n×n
// arrays, x and y, written and drained.
func emulatedCUDA(b *testing.B, n int) (d *Device, x, y *Array) {
	b.Helper()
	testhooks.Switches.CUDAEmulator.Store(true)
	d, err := Open(Options{Backend: CUDA, Policy: DeviceSide, LogLevel: LogOff})
	testhooks.Switches.CUDAEmulator.Store(false)
	must(b, err)
	b.Cleanup(func() { _ = d.Close() })
	x, err = d.FromFloat32(n, n, randMatrix(1, n))
	must(b, err)
	y, err = d.FromFloat32(n, n, randMatrix(2, n))
	must(b, err)
	must(b, d.DefaultTask().Synchronize())
	return d, x, y
}

// BenchmarkEmulatedCUDAMulInto times BenchmarkGPUDispatchLayers' "into"
// op (a 128×128 multiply into an existing array) through every layer
// down to cudadev's backend, over the Go emulation of libcuda instead of
// the driver: rocsync's own Go per op with its data hot in the caches,
// plus the emulator's launch (a queued closure: 1 allocation per op,
// which is the emulator's). The device drains every 256 ops, untimed. Run
// in one process beside BenchmarkGPUDispatchLayers, it tells rocsync's
// instructions from what the driver call between two ops costs them.
func BenchmarkEmulatedCUDAMulInto(b *testing.B) {
	d, x, y := emulatedCUDA(b, 128)
	t := d.DefaultTask()
	for range 1000 {
		must(b, t.MulInto(y, x, x))
	}
	must(b, t.Synchronize())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(b, t.MulInto(y, x, x))
		if i%256 == 255 {
			b.StopTimer()
			must(b, t.Synchronize())
			b.StartTimer()
		}
	}
	b.StopTimer()
	must(b, t.Synchronize())
}

// floorOp is the part of an eager op y = x·x on task t that no faster
// front can drop without dropping what it guarantees (BenchmarkEagerFloor):
//   - guards: the device's close guard and the task's concurrent-use
//     guard (Close must not free what an op uses; one Task from two
//     goroutines is reported, not corrupted);
//   - sync: the sync state of y = x·x (read x, write y) on the task's
//     kernel stream, ordered and recorded at a real ticket of that stream
//     (the stream's throttle check, hold and ticket included), around an
//     enqueue that does nothing.
type floorOp struct {
	t      *Task
	x, y   *Array
	guards bool
	sync   bool
	ks     *stream.Stream
	tl     syncstate.Timeline
}

func newFloorOp(t *Task, x, y *Array, guards, sync bool) *floorOp {
	return &floorOp{t: t, x: x, y: y, guards: guards, sync: sync,
		ks: t.drv.(*cudadev.Task).Kernel(), tl: t.timeline(driver.LaneKernel)}
}

func enqueueNothing(uintptr) error { return nil }

// run makes op's parts once.
func (op *floorOp) run() error {
	t := op.t
	if op.guards {
		if err := t.dev.enterShard("floor", t.shard); err != nil {
			return err
		}
		defer t.dev.leaveShard(t.shard)
		if err := t.begin("floor"); err != nil {
			return err
		}
		defer t.end()
	}
	if !op.sync {
		return nil
	}
	s := syncstate.Op{Name: "floor"}
	s.Use(&op.x.st, syncstate.Read)
	s.Use(&op.y.st, syncstate.Write)
	if err := s.Begin(&t.dev.engine, op.tl, t.sinks); err != nil {
		return err
	}
	ticket, err := op.ks.Submit(enqueueNothing)
	if err != nil {
		s.Abort()
		return err
	}
	return s.Commit(ticket, t.sinks)
}

// BenchmarkEagerFloor times floorOp's parts apart from the op, on the
// emulated libcuda (so it runs on any host, the GPU hosts included),
// beside the whole op:
//   - guards, and sync (floorOp);
//   - stream: sync's stream part alone, the enqueue that does nothing;
//   - into: Task.MulInto itself, its launch the emulator's (a queued
//     closure, about half of it on a dev VM).
//
// guards + sync is the floor the front cannot go under; what into adds
// over it is the front's checks, the op's translation and the launch.
// The task drains every 256 ops, untimed.
func BenchmarkEagerFloor(b *testing.B) {
	d, x, y := emulatedCUDA(b, 8)
	t := d.DefaultTask()
	ks := t.drv.(*cudadev.Task).Kernel()
	for _, part := range []struct {
		name string
		run  func() error
	}{
		{"guards", newFloorOp(t, x, y, true, false).run},
		{"stream", func() error { _, err := ks.Submit(enqueueNothing); return err }},
		{"sync", newFloorOp(t, x, y, false, true).run},
		{"into", func() error { return t.MulInto(y, x, x) }},
	} {
		b.Run(part.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				must(b, part.run())
				if i%256 == 255 {
					b.StopTimer()
					must(b, t.Synchronize())
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkEagerFloorParallel is BenchmarkEagerFloor's guards and sync
// from GOMAXPROCS goroutines (set it with -cpu 1,2,4,...) that each submit
// on a task of their own to one device, as the README asks of concurrent
// submitters; the b.N ops are split between them. ns/op is wall time per
// op over all goroutines, so it falls as the goroutines run side by side
// and rises where they contend for a cache line (the device's close guard
// and counters are sharded by task for that reason; guard.go). The
// goroutines count their own ops: RunParallel's per-goroutine counters
// are small adjacent allocations, written every op, and would share lines.
func BenchmarkEagerFloorParallel(b *testing.B) {
	d, _, _ := emulatedCUDA(b, 1)
	for _, part := range []struct {
		name         string
		guards, sync bool
	}{{"guards", true, false}, {"sync", false, true}, {"guards+sync", true, true}} {
		b.Run(part.name, func(b *testing.B) {
			g := runtime.GOMAXPROCS(0)
			ops := make([]*floorOp, g)
			for i := range ops {
				t, err := d.NewTask()
				must(b, err)
				x, err := d.FromFloat32(8, 8, randMatrix(1, 8))
				must(b, err)
				y, err := d.FromFloat32(8, 8, randMatrix(2, 8))
				must(b, err)
				must(b, t.Synchronize())
				ops[i] = newFloorOp(t, x, y, part.guards, part.sync)
			}
			b.ResetTimer()
			done := make(chan error, g)
			for k, op := range ops {
				n := b.N / g // b.N ops in all
				if k < b.N%g {
					n++
				}
				go func() {
					var err error
					for i := 0; i < n && err == nil; i++ {
						if err = op.run(); err == nil && op.sync && i%256 == 255 {
							err = op.t.Synchronize() // the stream's throttle never waits
						}
					}
					done <- errors.Join(err, op.t.Synchronize())
				}()
			}
			for range ops {
				must(b, <-done)
			}
			b.StopTimer()
			for _, op := range ops {
				must(b, op.t.Close())
			}
		})
	}
}
