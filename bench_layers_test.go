package rocsync

import (
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

// BenchmarkEmulatedCUDAMulInto times BenchmarkGPUDispatchLayers' "into"
// op (a 128×128 multiply into an existing array) through every layer
// down to cudadev's backend, over the Go emulation of libcuda instead of
// the driver: rocsync's own Go per op with its data hot in the caches,
// plus the emulator's launch (a queued closure: 1 allocation per op,
// which is the emulator's). The device drains every 256 ops, untimed. Run
// in one process beside BenchmarkGPUDispatchLayers, it tells rocsync's
// instructions from what the driver call between two ops costs them.
func BenchmarkEmulatedCUDAMulInto(b *testing.B) {
	testhooks.Switches.CUDAEmulator.Store(true)
	d, err := Open(Options{Backend: CUDA, Policy: DeviceSide, LogLevel: LogOff})
	testhooks.Switches.CUDAEmulator.Store(false)
	must(b, err)
	defer d.Close()
	t := d.DefaultTask()
	x, err := d.FromFloat32(128, 128, randMatrix(1, 128))
	must(b, err)
	y, err := d.FromFloat32(128, 128, randMatrix(2, 128))
	must(b, err)
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

// BenchmarkEagerFloor times the parts of an eager op that no faster code
// can drop without dropping what they guarantee, on the emulated libcuda
// (so it runs on any host, the GPU hosts included), beside the whole op:
//   - guards: the device's close guard and the task's concurrent-use
//     guard (Close must not free what an op uses; one Task from two
//     goroutines is reported, not corrupted);
//   - stream: the stream's throttle check, hold and ticket around an
//     enqueue that does nothing;
//   - sync: the sync state of y = x·x (read x, write y) on the task's
//     kernel stream, ordered and recorded at a real ticket of that stream
//     (the stream's part included);
//   - into: Task.MulInto itself, its launch the emulator's (a queued
//     closure, about half of it on a dev VM).
//
// guards + sync is the floor the front cannot go under; what into adds
// over it is the front's checks, the op's translation and the launch.
func BenchmarkEagerFloor(b *testing.B) {
	testhooks.Switches.CUDAEmulator.Store(true)
	d, err := Open(Options{Backend: CUDA, Policy: DeviceSide, LogLevel: LogOff})
	testhooks.Switches.CUDAEmulator.Store(false)
	must(b, err)
	defer d.Close()
	t := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, randMatrix(1, 8))
	must(b, err)
	y, err := d.FromFloat32(1, 64, randMatrix(2, 8))
	must(b, err)
	must(b, t.Synchronize())
	ks := t.drv.(*cudadev.Task).Kernel()
	tl := t.timeline(driver.LaneKernel)
	nothing := func(uintptr) error { return nil }
	drainEvery := func(b *testing.B, i int) {
		if i%256 == 255 {
			b.StopTimer()
			must(b, t.Synchronize())
			b.StartTimer()
		}
	}
	b.Run("guards", func(b *testing.B) {
		for b.Loop() {
			must(b, d.enterShard("floor", t.shard))
			must(b, t.begin("floor"))
			t.end()
			d.leaveShard(t.shard)
		}
	})
	b.Run("stream", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_, err := ks.Submit(nothing)
			must(b, err)
			drainEvery(b, i)
		}
	})
	b.Run("sync", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			op := syncstate.Op{Name: "floor"}
			op.Use(&x.st, syncstate.Read)
			op.Use(&y.st, syncstate.Write)
			must(b, op.Begin(&d.engine, tl, t.sinks))
			ticket, err := ks.Submit(nothing)
			must(b, err)
			must(b, op.Commit(ticket, t.sinks))
			drainEvery(b, i)
		}
	})
	b.Run("into", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			must(b, t.MulInto(y, x, x))
			drainEvery(b, i)
		}
	})
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
	testhooks.Switches.CUDAEmulator.Store(true)
	d, err := Open(Options{Backend: CUDA, Policy: DeviceSide, LogLevel: LogOff})
	testhooks.Switches.CUDAEmulator.Store(false)
	must(b, err)
	defer d.Close()
	nothing := func(uintptr) error { return nil }
	for _, part := range []string{"guards", "sync", "guards+sync"} {
		b.Run(part, func(b *testing.B) {
			g := runtime.GOMAXPROCS(0)
			type worker struct {
				t    *Task
				x, y *Array
			}
			workers := make([]worker, g)
			for i := range workers {
				t, err := d.NewTask()
				must(b, err)
				x, err := d.FromFloat32(1, 64, randMatrix(1, 8))
				must(b, err)
				y, err := d.FromFloat32(1, 64, randMatrix(2, 8))
				must(b, err)
				must(b, t.Synchronize())
				workers[i] = worker{t, x, y}
			}
			guards, sync := part != "sync", part != "guards"
			b.ResetTimer()
			done := make(chan error, g)
			for w := range workers {
				go func(w worker, n int) {
					t, x, y := w.t, w.x, w.y
					ks := t.drv.(*cudadev.Task).Kernel()
					tl := t.timeline(driver.LaneKernel)
					var err error
					for i := 1; i <= n && err == nil; i++ {
						if guards {
							if err = t.dev.enterShard("floor", t.shard); err != nil {
								break
							}
							if err = t.begin("floor"); err != nil {
								break
							}
						}
						if sync {
							op := syncstate.Op{Name: "floor"}
							op.Use(&x.st, syncstate.Read)
							op.Use(&y.st, syncstate.Write)
							if err = op.Begin(&d.engine, tl, t.sinks); err == nil {
								var ticket uint64
								if ticket, err = ks.Submit(nothing); err == nil {
									err = op.Commit(ticket, t.sinks)
								}
							}
						}
						if guards {
							t.end()
							t.dev.leaveShard(t.shard)
						}
						if sync && i%256 == 0 && err == nil {
							err = t.Synchronize()
						}
					}
					done <- err
				}(workers[w], (b.N+g-1)/g)
			}
			for range workers {
				must(b, <-done)
			}
			b.StopTimer()
			for _, w := range workers {
				must(b, w.t.Close())
			}
		})
	}
}
