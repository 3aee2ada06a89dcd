package rocsync

import (
	"errors"
	"runtime"
	"testing"

	"github.com/rocsync/rocsync/userkernel"
)

// allocDevice opens the emulator (no checker, no delays: the hazard
// checker's clocks allocate by design) with SAXPY's reference registered.
func allocDevice(t *testing.T, p Policy) *Device {
	t.Helper()
	refs := &userkernel.References{}
	if err := refs.Register("saxpy", saxpyReference); err != nil {
		t.Fatal(err)
	}
	d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		KernelBuilder: userkernel.NewBuilder(userkernel.Options{CacheDir: t.TempDir()}),
		Emulator:      EmulatorOptions{KernelReferences: refs}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// allocsPerOp runs op enough times to grow every pool to what this load
// needs (signals, events, staging slots, the memory cache), then returns
// testing.AllocsPerRun over it. AllocsPerRun rounds the mean down, so a
// pool that still grows once in a few hundred runs does not fail the
// test, while a per-op allocation (1 or more every run) does.
func allocsPerOp(t *testing.T, tk *Task, op func() error) float64 {
	t.Helper()
	var err error
	for i := 0; i < 3000; i++ {
		if err = op(); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			if err := tk.Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := testing.AllocsPerRun(500, func() {
		if e := op(); e != nil && err == nil {
			err = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return n
}

// Every Into form, and every op kind through the one op path, submits
// without a Go allocation once the pools are warm: elementwise kernels,
// Gemm, a user kernel's Launch, LibraryCall, Upload, CopyBuffer, Sum, and
// crossings with their waits. The new-array forms allocate exactly their
// Array's own Go value, freeing one whose work is pending nothing; HostFunc
// exactly its handle and the function it queues. Under DeviceSide (kernels on the HSA queue, library work on the
// HIP stream) and Unified (everything on the stream).
func TestOpPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, p := range []Policy{DeviceSide, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			d := allocDevice(t, p)
			tk := d.DefaultTask()
			const n = 16
			x, err := d.FromFloat32(n, n, seq(n*n, func(i int) float32 { return float32(i % 5) }))
			if err != nil {
				t.Fatal(err)
			}
			y, _ := d.Empty(n, n, Float32)
			z, _ := d.Empty(n, n, Float32)
			s, _ := d.Empty(1, 1, Float32)
			host := make([]byte, n*n*4)
			libArgs := []Arg{In(x), Out(z)}
			lib := func(uintptr) error { return nil }
			hostArgs := []Arg{In(x)}
			hostFn := func(*HostAccess) error { return nil }
			var k *Kernel
			if src, err := userkernel.OpenCL(saxpySource); err == nil {
				k, err = d.LoadKernel(src, "saxpy")
				if err != nil && !errors.Is(err, userkernel.ErrNoCompiler) {
					t.Fatal(err)
				}
			}
			into := []struct {
				name string
				op   func() error
			}{
				{"ScaleInto", func() error { return tk.ScaleInto(y, 2, x) }},
				{"AddInto", func() error { return tk.AddInto(y, x, y) }},
				{"MulInto", func() error { return tk.MulInto(y, x, x) }},
				{"Fill", func() error { return tk.Fill(y, 1) }},
				{"MatMulInto", func() error { return tk.MatMulInto(z, x, y, false, false) }},
				{"Gemm", func() error { return tk.Gemm(false, true, 1, x, y, 1, z) }},
				{"Launch", func() error {
					if k == nil {
						return nil
					}
					return tk.Launch(k, Geometry{Dims: 1, Grid: [3]uint32{n * n, 1, 1}, Workgroup: [3]uint32{64, 1, 1}}, InOut(y), In(x), F32(2), U32(n*n))
				}},
				{"LibraryCall", func() error { return tk.LibraryCall(libArgs, lib) }},
				{"Upload", func() error { return tk.Upload(y, host) }},
				{"CopyBuffer", func() error { return tk.CopyBuffer(z, y) }},
				{"Sum", func() error { return tk.Sum(s, x, SumAll) }},
				// A kernel then a gemm reading its output, and back: the
				// crossings' waits (host waits under DeviceSide) too.
				{"crossings", func() error {
					if err := tk.MulInto(y, x, x); err != nil {
						return err
					}
					return tk.MatMulInto(z, y, x, false, false)
				}},
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			for _, c := range into {
				if got := allocsPerOp(t, tk, c.op); got != 0 {
					t.Errorf("%s: %v allocations per op, want 0", c.name, got)
				}
			}
			if k == nil {
				t.Log("Launch not measured: no OpenCL compiler")
			}
			exact := []struct {
				name   string
				allocs float64
				op     func() error
			}{
				// HostFunc's handle is fresh per call (one kept past its
				// function's return must stay dead), and the lane queues
				// a function value: two, whatever the operands.
				{"HostFunc (its HostAccess and the queued function)", 2, func() error { return tk.HostFunc(hostArgs, hostFn) }},
				{"Mul", 1, func() error {
					a, err := tk.Mul(x, x)
					if err != nil {
						return err
					}
					return a.Free()
				}},
				{"MatMul", 1, func() error {
					a, err := tk.MatMul(x, y, false, false)
					if err != nil {
						return err
					}
					return a.Free()
				}},
				{"seed chain (3 Mul, Synchronize, 3 Free)", 3, func() error {
					t1, err := tk.Mul(x, x)
					if err != nil {
						return err
					}
					t2, err := tk.Mul(x, t1)
					if err != nil {
						return err
					}
					t3, err := tk.Mul(x, t2)
					if err != nil {
						return err
					}
					return errors.Join(tk.Synchronize(), t1.Free(), t2.Free(), t3.Free())
				}},
			}
			for _, c := range exact {
				if got := allocsPerOp(t, tk, c.op); got != c.allocs {
					t.Errorf("%s: %v allocations, want %v", c.name, got, c.allocs)
				}
			}
		})
	}
}
