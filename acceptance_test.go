package rocsync

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/emu"
	"github.com/rocsync/rocsync/internal/reference"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

const n128 = 128

// The acceptance suite runs on the emulator by default, with the hazard
// checker and random delays on. With ROCSYNC_GPU=1 it runs on real
// hardware instead: ROCSYNC_BACKEND picks rocm (the default) or cuda. In a
// child of TestROCmSuiteOnSimulatedDriver it runs on the ROCm backend over
// the real ROCm 5.2.3 libraries and the simulated driver (suiteOn).
func gpuRun() bool { return suiteOn() != onEmulator }

func gpuBackend() Backend {
	if suiteOn() == onHardware && os.Getenv("ROCSYNC_BACKEND") == "cuda" {
		return CUDA
	}
	return ROCm
}

// openStrict opens the device the suite runs on; on the emulator the test
// fails if the hazard checker finds anything.
func openStrict(t *testing.T, p Policy, mod ...func(*Options)) *Device {
	t.Helper()
	o := Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 7}}
	if gpuRun() {
		o.Backend = gpuBackend()
	}
	for _, f := range mod {
		f(&o)
	}
	d, err := Open(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		if !o.disableWaits {
			require.Empty(t, d.Hazards(), "hazard checker fired")
		}
	})
	return d
}

// emulatorOnly skips tests that need the emulator's instruments.
func emulatorOnly(t *testing.T, d *Device, why string) {
	if !d.Emulated() {
		t.Skipf("needs the emulator: %s", why)
	}
}

// instrumentedOnly skips tests that hold the device or inspect its
// allocations, which the emulator and the simulated driver can and real
// hardware cannot.
func instrumentedOnly(t *testing.T, d *Device, why string) {
	if !d.Emulated() && suiteOn() != onSimulatedDriver {
		t.Skipf("needs the emulator or the simulated driver: %s", why)
	}
}

// holdDevice keeps every queue of the device from starting more work until
// the returned function is called. On the simulated driver it first runs
// one kernel: the kernels load on first use, and ROCr's loader copies them
// to the GPU with blit kernels that a held GPU would never run.
func holdDevice(t *testing.T, d *Device) func() {
	t.Helper()
	if d.Emulated() {
		return d.machine().Hold()
	}
	loadKernels(t, d)
	return holdSimulatedGPU(t)
}

// loadKernels runs one kernel to completion, so that the kernels are loaded
// before the simulated GPU is held.
func loadKernels(t *testing.T, d *Device) {
	t.Helper()
	w, err := d.FromFloat32(1, 1, []float32{2})
	require.NoError(t, err)
	v, err := d.DefaultTask().Mul(w, w)
	require.NoError(t, err)
	_, err = v.Float32s()
	require.NoError(t, err)
	require.NoError(t, v.Free())
	require.NoError(t, w.Free())
}

// busy keeps tk's kernel timeline busy for a while, so that work
// submitted behind it is still pending when the host reaches the next
// crossing, as on a GPU behind a fast host. On the emulator it holds
// every queue for a moment, on the simulated driver every command
// processor; on hardware it queues long kernels ahead.
func busy(t *testing.T, d *Device, tk *Task) {
	t.Helper()
	if d.Policy() == WaitAlways {
		return // every op is waited for: nothing can be pending
	}
	switch {
	case d.Emulated():
		release := d.machine().Hold()
		go func() { time.Sleep(50 * time.Millisecond); release() }()
		return
	case suiteOn() == onSimulatedDriver:
		// The kernels load through the GPU (ROCr's blit kernels), so they
		// load first; the hold is longer than the emulator's because the
		// real libraries' host side is slower (race builds, shared CPUs).
		loadKernels(t, d)
		release := holdSimulatedGPU(t)
		go func() { time.Sleep(250 * time.Millisecond); release() }()
		return
	}
	scratch, err := d.Empty(4096, 4096, Float32)
	require.NoError(t, err)
	for i := 0; i < 200; i++ {
		require.NoError(t, tk.Fill(scratch, float64(i)))
	}
	require.NoError(t, scratch.Free())
}

func randMatrix(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n*n)
	for i := range out {
		out[i] = r.Float32() - 0.5
	}
	return out
}

func requireClose(t *testing.T, want []float64, got []float32, rel float64) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	scale := 0.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range want {
		if math.Abs(want[i]-float64(got[i])) > rel*scale+1e-30 {
			t.Fatalf("element %d: want %g, got %g (scale %g)", i, want[i], got[i], scale)
		}
	}
}

// seedProgram runs one of the seed's programs and returns the result array
// and the device stats between the start and the final Synchronize.
type seedProgram struct {
	name  string
	run   func(t *testing.T, tk *Task, x *Array) *Array
	ref   func(x []float64) []float64
	waits map[Policy]uint64 // host waits before the final Synchronize
	// boundary is the number of boundary host waits under SkipSameQueue
	// and DeviceSide (the other policies have none).
	boundary int
}

var seedPrograms = []seedProgram{
	{
		name: "matmul",
		run: func(t *testing.T, tk *Task, x *Array) *Array {
			t1, err := tk.MatMul(x, x, false, false)
			require.NoError(t, err)
			t2, err := tk.MatMul(x, t1, false, false)
			require.NoError(t, err)
			t3, err := tk.MatMul(x, t2, false, false)
			require.NoError(t, err)
			require.NoError(t, t1.Free())
			require.NoError(t, t2.Free())
			return t3
		},
		ref: func(x []float64) []float64 {
			return reference.MatMul(x, reference.MatMul(x, reference.MatMul(x, x, n128), n128), n128)
		},
		waits:    map[Policy]uint64{WaitAlways: 3, SkipSameQueue: 0, DeviceSide: 0, Unified: 0, DeviceBridge: 0},
		boundary: 0,
	},
	{
		name: "elementwise",
		run: func(t *testing.T, tk *Task, x *Array) *Array {
			t1, err := tk.Mul(x, x)
			require.NoError(t, err)
			t2, err := tk.Mul(x, t1)
			require.NoError(t, err)
			t3, err := tk.Mul(x, t2)
			require.NoError(t, err)
			require.NoError(t, t1.Free())
			require.NoError(t, t2.Free())
			return t3
		},
		ref:      func(x []float64) []float64 { return reference.Mul(x, reference.Mul(x, reference.Mul(x, x))) },
		waits:    map[Policy]uint64{WaitAlways: 3, SkipSameQueue: 0, DeviceSide: 0, Unified: 0, DeviceBridge: 0},
		boundary: 0,
	},
	{
		name: "mixed",
		run: func(t *testing.T, tk *Task, x *Array) *Array {
			t1, err := tk.Mul(x, x)
			require.NoError(t, err)
			t2, err := tk.MatMul(t1, x, false, false)
			require.NoError(t, err)
			require.NoError(t, t1.Free())
			return t2
		},
		ref:      func(x []float64) []float64 { return reference.MatMul(reference.Mul(x, x), x, n128) },
		waits:    map[Policy]uint64{WaitAlways: 2, SkipSameQueue: 1, DeviceSide: 1, Unified: 0, DeviceBridge: 0},
		boundary: 1,
	},
}

func TestSeedPrograms(t *testing.T) {
	for _, prog := range seedPrograms {
		for _, p := range syncstate.Policies {
			t.Run(prog.name+"/"+p.String(), func(t *testing.T) {
				d := openStrict(t, p)
				tk := d.DefaultTask()
				host := randMatrix(1, n128)
				x, err := d.FromFloat32(n128, n128, host)
				require.NoError(t, err)
				// Keep the device busy while the host submits: then a
				// crossing always finds its producer pending, and the
				// counts are exact.
				busy(t, d, tk)
				before := d.Stats()
				out := prog.run(t, tk, x)
				mid := d.Stats().Sub(before)
				want := expectedPolicy(t, p)
				require.Equal(t, prog.waits[want], mid.HostWaitsTotal(), "host waits before Synchronize: %v", mid)
				switch want {
				case WaitAlways:
					require.Equal(t, prog.waits[p], mid.HostWaitsFor(ReasonWaitAlways), "%v", mid)
				case SkipSameQueue, DeviceSide:
					require.EqualValues(t, prog.boundary, mid.HostWaitsFor(ReasonBoundary), "%v", mid)
				}
				require.NoError(t, tk.Synchronize())
				got, err := out.Float32s()
				require.NoError(t, err)
				requireClose(t, prog.ref(reference.Widen(host)), got, 1e-4)
				require.NoError(t, out.Free())
				require.NoError(t, x.Free())
			})
		}
	}
}

// An op on queue B that overwrites an array still being read on queue A
// must wait for that read.
func TestWriteAfterRead(t *testing.T) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := openStrict(t, p)
			a, err := d.NewTask()
			require.NoError(t, err)
			b, err := d.NewTask()
			require.NoError(t, err)
			host := randMatrix(2, 64)
			x, err := d.FromFloat32(64, 64, host)
			require.NoError(t, err)
			busy(t, d, a)         // keep A's read pending
			y, err := a.Mul(x, x) // reads x on A's kernel queue
			require.NoError(t, err)
			before := b.Stats()
			require.NoError(t, b.Fill(x, 5)) // overwrites x on B's
			st := b.Stats().Sub(before)
			switch p {
			case DeviceSide, Unified, DeviceBridge:
				require.EqualValues(t, 1, st.DeviceWaits, "%v", st)
				require.Zero(t, st.HostWaitsTotal(), "%v", st)
			case SkipSameQueue:
				require.EqualValues(t, 1, st.HostWaitsFor(ReasonCrossQueue), "%v", st)
			}
			got, err := y.Float32s()
			require.NoError(t, err)
			requireClose(t, reference.Mul(reference.Widen(host), reference.Widen(host)), got, 1e-6)
			xs, err := x.Float32s()
			require.NoError(t, err)
			for _, v := range xs {
				require.Equal(t, float32(5), v)
			}
		})
	}
}

// x = x*x records one fence, and three in a row leave one pending fence.
func TestAliasingRecordsOneFence(t *testing.T) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := openStrict(t, p)
			tk := d.DefaultTask()
			host := []float32{1.5, -2, 0.5, 3}
			x, err := d.FromFloat32(2, 2, host)
			require.NoError(t, err)
			busy(t, d, tk)
			for i := 0; i < 3; i++ {
				require.NoError(t, tk.MulInto(x, x, x))
				x.st.Lock()
				require.Zero(t, x.st.ReadersLocked(), "an aliased read must not leave a reader fence")
				require.False(t, x.st.WriterLocked().IsZero())
				x.st.Unlock()
			}
			if p != WaitAlways {
				require.Equal(t, 1, x.PendingFences())
			}
			got, err := x.Float32s()
			require.NoError(t, err)
			for i, v := range host {
				require.Equal(t, float32(math.Pow(float64(v), 8)), got[i])
			}
			require.Equal(t, 0, x.PendingFences())
		})
	}
}

// Two tasks on two goroutines share arrays: the HSA→HSA crossings wait on
// the device under DeviceSide, with no host wait.
func TestTwoTasksSharingArrays(t *testing.T) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := openStrict(t, p)
			producer, err := d.NewTask()
			require.NoError(t, err)
			consumer, err := d.NewTask()
			require.NoError(t, err)
			host := randMatrix(3, 32)
			x, err := d.FromFloat32(32, 32, host)
			require.NoError(t, err)
			const rounds = 20
			ch := make(chan *Array)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(ch)
				for i := 0; i < rounds; i++ {
					y, err := producer.Mul(x, x)
					if !assertNoErr(t, err) {
						return
					}
					ch <- y
				}
			}()
			before := consumer.Stats()
			var outs []*Array
			for y := range ch {
				z, err := consumer.Add(y, x) // crosses from the producer's queue
				require.NoError(t, err)
				require.NoError(t, y.Free())
				outs = append(outs, z)
			}
			wg.Wait()
			st := consumer.Stats().Sub(before)
			switch p {
			case DeviceSide, Unified, DeviceBridge:
				require.Zero(t, st.HostWaitsTotal(), "%v", st)
			case WaitAlways:
				require.EqualValues(t, rounds, st.HostWaitsFor(ReasonWaitAlways), "%v", st)
			}
			want := reference.Widen(host)
			for i := range want {
				want[i] = want[i]*want[i] + want[i]
			}
			for _, z := range outs {
				got, err := z.Float32s()
				require.NoError(t, err)
				requireClose(t, want, got, 1e-6)
			}
		})
	}
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// With waits disabled, the checker must report the race the waits prevent:
// this is what proves the ordering tests can fail.
func TestHazardCheckerFiresWithoutWaits(t *testing.T) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := openStrict(t, p, func(o *Options) { o.disableWaits = true })
			emulatorOnly(t, d, "the hazard checker")
			a, err := d.NewTask()
			require.NoError(t, err)
			b, err := d.NewTask()
			require.NoError(t, err)
			x, err := d.FromFloat32(16, 16, randMatrix(4, 16))
			require.NoError(t, err)
			y, err := a.Mul(x, x) // writes y on A's kernel timeline
			require.NoError(t, err)
			d.machine().Quiesce() // let A finish, unobserved by the host
			_, err = b.Add(y, x)  // reads y on B's, unordered
			require.NoError(t, err)
			require.NoError(t, d.Synchronize())
			hz := d.Hazards()
			require.NotEmpty(t, hz, "the checker missed an unordered read-after-write")
			var h *emu.HazardError
			require.ErrorAs(t, hz[0], &h)
			require.Equal(t, emu.HazardReadWrite, h.Kind)
			require.NotEqual(t, h.Queue, h.PriorQ, "the race is between two timelines")
			require.ErrorContains(t, hz[0], "rocsync_mul_f32")
			require.ErrorContains(t, hz[0], "rocsync_add_f32")
		})
	}
}

// DeviceBridge crosses the boundary both ways on the device: a gemm
// result read by a kernel (HIP→HSA) and a kernel result read by a gemm
// (HSA→HIP), with no host wait and no hazard.
func TestDeviceBridgeBothWays(t *testing.T) {
	d := openStrict(t, DeviceBridge)
	tk := d.DefaultTask()
	host := randMatrix(6, n128)
	x, err := d.FromFloat32(n128, n128, host)
	require.NoError(t, err)
	busy(t, d, tk)
	before := d.Stats()
	y, err := tk.MatMul(x, x, false, false) // HIP
	require.NoError(t, err)
	z, err := tk.Mul(y, x) // HSA, waits for the gemm on the device
	require.NoError(t, err)
	st := d.Stats().Sub(before)
	if !deviceBridgeOnDevice(t) {
		// HIP before 5.6: the first crossing was a boundary host wait,
		// which outlasted the hold. Hold again (outside the counted
		// stretches: busy may run ops of its own) and compute z again,
		// so that the kernel is pending when the host reaches the
		// second crossing, as on a GPU behind a fast host.
		busy(t, d, tk)
		require.NoError(t, z.Free())
		before = d.Stats()
		z, err = tk.Mul(y, x) // y's gemm is known complete: no crossing
		require.NoError(t, err)
	}
	w, err := tk.MatMul(z, x, false, false) // HIP, waits for the kernel on the device
	require.NoError(t, err)
	st2 := d.Stats().Sub(before)
	switch {
	case !deviceBridgeOnDevice(t):
		// Both crossings are boundary host waits.
		require.EqualValues(t, 2, st.HostWaitsFor(ReasonBoundary)+st2.HostWaitsFor(ReasonBoundary), "%v, then %v", st, st2)
		require.EqualValues(t, 2, st.HostWaitsTotal()+st2.HostWaitsTotal(), "%v, then %v", st, st2)
		require.Zero(t, st.DeviceWaits+st2.DeviceWaits, "%v, then %v", st, st2)
	case d.Emulated() || suiteOn() == onSimulatedDriver:
		// The producer is held: both crossings find it pending (st2 spans
		// both: before was not reset).
		require.Zero(t, st2.HostWaitsTotal(), "%v", st2)
		require.EqualValues(t, 2, st2.DeviceWaits, "%v", st2)
	default:
		require.Zero(t, st2.HostWaitsTotal(), "%v", st2)
		// A fast GPU may finish the first gemm before the kernel's
		// crossing is reached; the kernel is queued behind busy work.
		require.GreaterOrEqual(t, st2.DeviceWaits, uint64(1), "%v", st2)
	}
	got, err := w.Float32s()
	require.NoError(t, err)
	hx := reference.Widen(host)
	requireClose(t, reference.MatMul(reference.Mul(reference.MatMul(hx, hx, n128), hx), hx, n128), got, 1e-4)
}

// Free with work pending returns at once, and the memory is released only
// after the work completes.
func TestFreeWithPendingWork(t *testing.T) {
	d := openStrict(t, DeviceSide)
	instrumentedOnly(t, d, "it holds the device")
	tk := d.DefaultTask()
	x, err := d.FromFloat32(64, 64, randMatrix(5, 64))
	require.NoError(t, err)
	release := holdDevice(t, d)
	defer release()
	y, err := tk.Mul(x, x)
	require.NoError(t, err)
	require.Equal(t, 1, y.PendingFences())
	before := d.Stats()
	require.NoError(t, y.Free())
	require.NoError(t, x.Free()) // x has a pending reader
	require.Zero(t, d.Stats().Sub(before).HostWaitsTotal(), "Free must not wait")
	// The driver's allocation records are checked on the emulator only:
	// ROCr 5.2.3 carves small device allocations out of 2 MiB blocks that
	// stay allocated (seen on the simulated driver), so there one array's
	// release does not show.
	if d.Emulated() {
		require.True(t, d.machine().Live(uint64(y.ptr)), "memory released while its kernel is pending")
		require.True(t, d.machine().Live(uint64(x.ptr)), "memory released while its kernel is pending")
	}
	z, err := d.Empty(64, 64, Float32)
	require.NoError(t, err)
	require.NotEqual(t, y.ptr, z.ptr, "memory reused while its kernel is pending")
	require.NotEqual(t, x.ptr, z.ptr, "memory reused while its kernel is pending")
	release()
	require.NoError(t, d.Synchronize())
	// Done: the blocks are cached for reuse, then really freed by a trim.
	w, err := d.Empty(64, 64, Float32)
	require.NoError(t, err)
	require.Contains(t, []driver.DevicePtr{x.ptr, y.ptr}, w.ptr, "a completed block is reused")
	require.NoError(t, w.Free())
	require.NoError(t, z.Free())
	require.NoError(t, d.TrimCache())
	if d.Emulated() {
		require.False(t, d.machine().Live(uint64(y.ptr)))
		require.False(t, d.machine().Live(uint64(x.ptr)))
	}
}

// With the cache off, memory goes straight back to the driver once its
// work is done.
func TestFreeWithoutCache(t *testing.T) {
	d := openStrict(t, DeviceSide, func(o *Options) { o.MemoryCache = -1 })
	// ROCr 5.2.3 keeps small allocations' 2 MiB blocks, so only the
	// emulator's records show one array's release.
	emulatorOnly(t, d, "it inspects the emulator's allocation table")
	x, err := d.FromFloat32(8, 8, make([]float32, 64))
	require.NoError(t, err)
	require.NoError(t, x.Free())
	require.False(t, d.machine().Live(uint64(x.ptr)))
}

func TestBadInput(t *testing.T) {
	o := Options{Backend: Emulator, LogLevel: LogOff, Emulator: EmulatorOptions{Devices: 2, HazardChecker: true}}
	if gpuRun() {
		o.Backend = gpuBackend()
	}
	devs, err := OpenAll(o)
	require.NoError(t, err)
	defer func() {
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	}()
	d := devs[0]
	tk := d.DefaultTask()
	other := d // with one GPU the mixed-device case cannot be built
	if len(devs) > 1 {
		other = devs[1]
	}
	a, _ := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	b, _ := d.FromFloat32(3, 3, make([]float32, 9))
	c64, _ := d.FromFloat64(2, 2, []float64{1, 2, 3, 4})
	onOther, _ := other.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	freed, _ := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, freed.Free())
	orig, _ := a.Float32s()

	cases := []struct {
		name string
		kind error
		call func() error
	}{
		{"shape", ErrShape, func() error { _, err := tk.Mul(a, b); return err }},
		{"matmul shape", ErrShape, func() error { _, err := tk.MatMul(a, b, false, false); return err }},
		{"dtype", ErrDType, func() error { _, err := tk.Add(a, c64); return err }},
		{"use after free", ErrFreed, func() error { _, err := tk.Mul(freed, a); return err }},
		{"read after free", ErrFreed, func() error { _, err := freed.Float32s(); return err }},
		{"double free", ErrFreed, func() error { return freed.Free() }},
		{"nil array", ErrNilArray, func() error { _, err := tk.Mul(nil, a); return err }},
		{"nil free", ErrNilArray, func() error { var z *Array; return z.Free() }},
		{"mixed devices", ErrDeviceMismatch, func() error { _, err := tk.Add(a, onOther); return err }},
		{"bad slice", ErrShape, func() error { _, err := d.FromFloat32(2, 3, []float32{1}); return err }},
		{"wrong read dtype", ErrDType, func() error { return a.CopyToFloat64(make([]float64, 4)) }},
		{"gemm output aliases an input", ErrInvalid, func() error { return tk.MatMulInto(a, a, a, false, false) }},
		{"negative shape", ErrShape, func() error { _, err := d.Empty(-1, 4, Float32); return err }},
		{"overflowing shape", ErrShape, func() error { _, err := d.Empty(1<<40, 1<<40, Float32); return err }},
		{"nil second operand", ErrNilArray, func() error { return tk.AXPYInto(a, 2, a, nil) }},
		{"closed task", ErrClosed, func() error {
			t2, err := d.NewTask()
			if err != nil {
				return err
			}
			if err := t2.Close(); err != nil {
				return err
			}
			if err := t2.Close(); err != nil { // a second Close returns nil, as Device.Close does
				return fmt.Errorf("second Close: %v", err)
			}
			_, err = t2.Neg(a)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.kind == ErrDeviceMismatch && other == d {
				t.Skip("one GPU: no second device to mix")
			}
			err := c.call()
			require.Error(t, err)
			require.ErrorIs(t, err, c.kind)
			var e *Error
			require.True(t, errors.As(err, &e), "%T", err)
		})
	}
	// Nothing the user handed over was touched.
	got, err := a.Float32s()
	require.NoError(t, err)
	require.Equal(t, orig, got)
	require.Empty(t, d.Hazards())
}

// Unified runs kernels on the task's HIP stream: no boundary inside a task.
func TestUnifiedHasNoBoundary(t *testing.T) {
	for _, prog := range seedPrograms {
		t.Run(prog.name, func(t *testing.T) {
			d := openStrict(t, Unified)
			tk := d.DefaultTask()
			require.Equal(t, tk.drv.Timeline(driver.LaneKernel), tk.drv.Timeline(driver.LaneLibrary), "one stream for kernels and gemms")
			host := randMatrix(1, n128)
			x, err := d.FromFloat32(n128, n128, host)
			require.NoError(t, err)
			before := d.Stats()
			out := prog.run(t, tk, x)
			mid := d.Stats().Sub(before)
			require.Zero(t, mid.HostWaitsTotal(), "%v", mid)
			require.NoError(t, tk.Synchronize())
			got, err := out.Float32s()
			require.NoError(t, err)
			requireClose(t, prog.ref(reference.Widen(host)), got, 1e-4)
		})
	}
}

// Every elementwise op, both dtypes, through the API against the CPU
// reference: on hardware this checks the kernels themselves.
func TestEveryKernelMatchesReference(t *testing.T) {
	// DeviceSide dispatches through HSA queues; Unified launches the same
	// kernels through HIP (hipModuleLaunchKernel), from the code object the
	// HIP release loads.
	for _, p := range []Policy{DeviceSide, Unified} {
		t.Run(p.String(), func(t *testing.T) { everyKernelMatchesReference(t, p) })
	}
}

func everyKernelMatchesReference(t *testing.T, p Policy) {
	d := openStrict(t, p)
	tk := d.DefaultTask()
	if p == Unified && suiteOn() == onSimulatedDriver {
		t.Cleanup(func() {
			// HIP loads the newest version its comgr names
			// (kernels.HIPAccepts): v4 on HIP 5.2.3, whose comgr reads
			// up to v4 only; v5 from HIP 5.3 on (5.7.1, 6.4.3).
			hsaV, hipV := d.drv.(*rocmdev.Device).CodeObjectVersions()
			rt, err := hip.Open()
			require.NoError(t, err)
			hipVersion, err := rt.RuntimeVersion()
			require.NoError(t, err)
			want, err := kernels.PickCodeObjectVersion(d.Target(), func(v kernels.CodeObjectVersion) bool {
				return kernels.HIPAccepts(hipVersion, v)
			})
			require.NoError(t, err)
			if hipVersion < 50_300_000 {
				require.Equal(t, kernels.CodeObjectV4, want, "HIP %d", hipVersion)
			} else {
				require.GreaterOrEqual(t, want, kernels.CodeObjectV5, "HIP %d", hipVersion)
			}
			require.Equal(t, want, hipV, "the code object HIP %d loaded (HSA: v%d)", hipVersion, hsaV)
		})
	}
	const rows, cols = 3, 37 // a tail past any workgroup multiple
	n := rows * cols
	a64, b64 := make([]float64, n), make([]float64, n)
	r := rand.New(rand.NewPCG(9, 9))
	for i := range a64 {
		a64[i] = r.Float64()*4 - 2
		b64[i] = r.Float64()*4 + 0.5
	}
	a64[0], a64[1] = 0, math.Copysign(0, -1) // +0 and -0: relu and relu_grad treat both as not positive
	const alpha = 1.75
	for _, dt := range kernels.AllDTypes() {
		for _, op := range kernels.AllOps() {
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				in := func(v []float64) *Array {
					var x *Array
					var err error
					if dt == Float32 {
						f := make([]float32, n)
						for i := range v {
							f[i] = float32(math.Abs(v[i]))
							if op != kernels.Sqrt {
								f[i] = float32(v[i])
							}
						}
						x, err = d.FromFloat32(rows, cols, f)
					} else {
						f := make([]float64, n)
						for i := range v {
							f[i] = v[i]
							if op == kernels.Sqrt {
								f[i] = math.Abs(v[i])
							}
						}
						x, err = d.FromFloat64(rows, cols, f)
					}
					require.NoError(t, err)
					return x
				}
				a, b := in(a64), in(b64)
				out, err := d.Empty(rows, cols, dt)
				require.NoError(t, err)
				switch op {
				case kernels.Mul:
					err = tk.MulInto(out, a, b)
				case kernels.Add:
					err = tk.AddInto(out, a, b)
				case kernels.Sub:
					err = tk.SubInto(out, a, b)
				case kernels.Div:
					err = tk.DivInto(out, a, b)
				case kernels.Scale:
					err = tk.ScaleInto(out, alpha, a)
				case kernels.AXPY:
					err = tk.AXPYInto(out, alpha, a, b)
				case kernels.Fill:
					err = tk.Fill(out, alpha)
				case kernels.Copy:
					err = tk.CopyInto(out, a)
				case kernels.Neg:
					err = tk.NegInto(out, a)
				case kernels.Exp:
					err = tk.ExpInto(out, a)
				case kernels.Sqrt:
					err = tk.SqrtInto(out, a)
				case kernels.ReLU:
					err = tk.ReLUInto(out, a)
				case kernels.ReLUGrad:
					err = tk.ReLUGradInto(out, a, b)
				default:
					t.Fatalf("no API call for %v", op)
				}
				require.NoError(t, err)
				// The reference runs on what the device holds, read back.
				if dt == Float32 {
					av, _ := a.Float32s()
					bv, _ := b.Float32s()
					want := make([]float32, n)
					kernels.RefF32(op, want, av, bv, alpha)
					got, err := out.Float32s()
					require.NoError(t, err)
					for i := range want {
						requireULP(t, float64(want[i]), float64(got[i]), 0, i)
					}
				} else {
					av, _ := a.Float64s()
					bv, _ := b.Float64s()
					want := make([]float64, n)
					kernels.RefF64(op, want, av, bv, alpha)
					got, err := out.Float64s()
					require.NoError(t, err)
					ulps := 0.0
					if op == kernels.Exp {
						ulps = 2 // the kernels' own exp; math.Exp may differ by 2 ulp
					}
					for i := range want {
						requireULP(t, want[i], got[i], ulps, i)
					}
				}
			})
		}
	}
}

func requireULP(t *testing.T, want, got, ulps float64, i int) {
	t.Helper()
	if want == got || (math.IsNaN(want) && math.IsNaN(got)) {
		return
	}
	ulp := math.Abs(math.Nextafter(want, math.Inf(1)) - want)
	if math.Abs(want-got) > ulps*ulp {
		t.Fatalf("element %d: want %v, got %v", i, want, got)
	}
}

// MatMul's row-major to column-major mapping, for every transpose pair and
// non-square shapes, in both dtypes.
func TestMatMulTransposes(t *testing.T) {
	d := openStrict(t, DeviceSide)
	tk := d.DefaultTask()
	const m, k, n = 3, 5, 4
	r := rand.New(rand.NewPCG(11, 11))
	A := make([]float64, m*k) // op(A) is m×k
	B := make([]float64, k*n) // op(B) is k×n
	for i := range A {
		A[i] = float64(r.IntN(7) - 3)
	}
	for i := range B {
		B[i] = float64(r.IntN(7) - 3)
	}
	want := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			for l := 0; l < k; l++ {
				want[i*n+j] += A[i*k+l] * B[l*n+j]
			}
		}
	}
	transpose := func(x []float64, rows, cols int) []float64 {
		out := make([]float64, len(x))
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				out[j*rows+i] = x[i*cols+j]
			}
		}
		return out
	}
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			a, ar, ac := A, m, k
			if ta {
				a, ar, ac = transpose(A, m, k), k, m
			}
			b, br, bc := B, k, n
			if tb {
				b, br, bc = transpose(B, k, n), n, k
			}
			x, err := d.FromFloat64(ar, ac, a)
			require.NoError(t, err)
			y, err := d.FromFloat64(br, bc, b)
			require.NoError(t, err)
			c, err := tk.MatMul(x, y, ta, tb)
			require.NoError(t, err)
			require.Equal(t, [2]int{m, n}, [2]int{c.Rows(), c.Cols()})
			got, err := c.Float64s()
			require.NoError(t, err)
			require.Equal(t, want, got, "transA=%v transB=%v", ta, tb)
		}
	}
}

// Reading back waits for the array's writer only: a pending reader of x
// does not hold up x's read-back, while y's read-back waits for y's writer.
func TestReadBackWaitsForWriterOnly(t *testing.T) {
	d := openStrict(t, DeviceSide)
	// Not on the simulated driver: holding it stops HIP's copies too, which a
	// real GPU runs beside a busy compute queue.
	emulatorOnly(t, d, "it holds the emulated device's kernel queues only")
	tk := d.DefaultTask()
	host := []float32{1, 2, 3, 4}
	x, err := d.FromFloat32(2, 2, host)
	require.NoError(t, err)
	release := d.machine().Hold()
	y, err := tk.Mul(x, x) // a pending reader of x, the pending writer of y
	require.NoError(t, err)
	before := d.Stats()
	got, err := x.Float32s() // would block until release if it waited for the reader
	require.NoError(t, err)
	require.Equal(t, host, got)
	require.Zero(t, d.Stats().Sub(before).HostWaitsTotal())
	go func() { time.Sleep(10 * time.Millisecond); release() }()
	gy, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9, 16}, gy)
	require.EqualValues(t, 1, d.Stats().Sub(before).HostWaitsFor(ReasonReadBack))
}
