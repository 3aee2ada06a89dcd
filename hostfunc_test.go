package rocsync

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// deviceWaitsForHost says whether GPU ops wait for the host lane on the
// device under p (else the submitter host-waits for it).
func deviceWaitsForHost(p Policy) bool { return p == DeviceSide || p == Unified || p == DeviceBridge }

// A host function in the middle of a chain, under every policy: a kernel
// writes x, the host function reads x and writes y, and a kernel and a
// gemm read y. The function is held back until everything after it has
// been submitted, so under the device-waiting policies the submitter
// provably never waits for it (a host wait would time out), and the GPU
// ops wait for it on the device.
func TestHostFuncInTheChain(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 8
			x, err := tk.Full(n, n, Float32, 3)
			require.NoError(t, err)
			y, err := d.Empty(n, n, Float32)
			require.NoError(t, err)
			gate := make(chan struct{})
			var ran atomic.Bool
			if !deviceWaitsForHost(p) {
				// The submitter waits for the function under these
				// policies: let it run.
				close(gate)
			}
			err = tk.HostFunc([]Arg{In(x), Out(y)}, func(h *HostAccess) error {
				<-gate
				xs, err := h.Float32s(x)
				if err != nil {
					return err
				}
				for i := range xs {
					xs[i] = xs[i]*xs[i] + float32(i)
				}
				ran.Store(true)
				return h.SetFloat32s(y, xs)
			})
			require.NoError(t, err)
			before := tk.Stats()
			z, err := d.Empty(n, n, Float32)
			require.NoError(t, err)
			require.NoError(t, tk.ScaleInto(z, 2, y)) // kernel queue (the stream under Unified)
			id, err := d.FromFloat32(n, n, seq(n*n, func(i int) float32 { return b2f(i/n == i%n) }))
			require.NoError(t, err)
			w, err := tk.MatMul(y, id, false, false) // library stream
			require.NoError(t, err)
			if deviceWaitsForHost(p) {
				require.False(t, ran.Load(), "the function ran before it was released")
				after := tk.Stats()
				require.Equal(t, before.HostWaits, after.HostWaits, "the submitter waited for the host function")
				close(gate)
			}
			gotZ, err := z.Float32s()
			require.NoError(t, err)
			gotW, err := w.Float32s()
			require.NoError(t, err)
			for i := range gotZ {
				want := float32(9 + i)
				require.Equal(t, 2*want, gotZ[i], "z[%d]", i)
				require.Equal(t, want, gotW[i], "w[%d]", i)
			}
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// undeclaredCopy touches x's memory from a host function the way a
// function that forgot to declare x would.
func undeclaredCopy(d *Device, x *Array, write bool) error {
	buf := make([]byte, x.buffer.size)
	if write {
		return d.drv.CopyHtoD(x.ptr, unsafe.Pointer(&buf[0]), x.buffer.size)
	}
	return d.drv.CopyDtoH(unsafe.Pointer(&buf[0]), x.ptr, x.buffer.size)
}

// openHostFuncRace opens a DeviceSide emulated device and makes, on its
// default task, x (filled, and complete) and y, both 4×4 float32: the
// setup of the host-function race tests.
func openHostFuncRace(t *testing.T) (*Device, *Task, *Array, *Array) {
	t.Helper()
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := tk.Full(4, 4, Float32, 1)
	require.NoError(t, err)
	y, err := d.Empty(4, 4, Float32)
	require.NoError(t, err)
	require.NoError(t, d.Synchronize())
	return d, tk, x, y
}

// conflictAfterHostFunc submits the GPU op that conflicts with a host
// function's access of x: a write after its read, a read after its write.
func conflictAfterHostFunc(t *testing.T, tk *Task, x, y *Array, hostAccess string) {
	t.Helper()
	if hostAccess == "read" {
		require.NoError(t, tk.Fill(x, 5)) // write after the host function's read
	} else {
		require.NoError(t, tk.ScaleInto(y, 2, x)) // read after the host function's write
	}
}

// Leaving out a host function's declared read, or its declared write,
// makes the hazard checker report a race with the GPU op after it. The
// GPU op is submitted before the function runs (so its clock cannot have
// seen it) and runs only after the function returned (the emulator is
// held): the test does not depend on timing, and the memory accesses
// themselves are ordered, so it holds under -race too.
func TestHostFuncMissingAccessIsARace(t *testing.T) {
	for _, drop := range []string{"read", "write"} {
		t.Run(drop, func(t *testing.T) {
			d, tk, x, y := openHostFuncRace(t)
			gate, ran := make(chan struct{}), make(chan error, 1)
			release := d.machine().Hold()
			defer release()
			// Declared: nothing about x. The function reads (or writes) it.
			require.NoError(t, tk.HostFunc(nil, func(*HostAccess) error {
				<-gate
				err := undeclaredCopy(d, x, drop == "write")
				ran <- err
				return err
			}))
			conflictAfterHostFunc(t, tk, x, y, drop)
			close(gate)
			require.NoError(t, <-ran)
			release()
			require.NoError(t, d.Synchronize())
			require.NotEmpty(t, d.Hazards(), "the checker must see the undeclared %s", drop)
		})
	}
}

// The same program with the accesses declared is clean: the control for
// TestHostFuncMissingAccessIsARace.
func TestHostFuncDeclaredAccessIsNoRace(t *testing.T) {
	for _, kind := range []string{"read", "write"} {
		t.Run(kind, func(t *testing.T) {
			d, tk, x, y := openHostFuncRace(t)
			gate := make(chan struct{})
			release := d.machine().Hold()
			defer release()
			arg := In(x)
			if kind == "write" {
				arg = Out(x)
			}
			require.NoError(t, tk.HostFunc([]Arg{arg}, func(*HostAccess) error {
				<-gate
				return undeclaredCopy(d, x, kind == "write")
			}))
			conflictAfterHostFunc(t, tk, x, y, kind)
			close(gate)
			release()
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// A host function's error poisons what it writes and not what it reads:
// an op reading the output submitted after the failure is known fails at
// once; one already waiting for the function on the device fails with it
// too (its queue learns of the failure from its upstream record); every
// error wraps the cause.
func TestHostFuncErrorPoisons(t *testing.T) {
	for _, p := range []Policy{DeviceSide, SkipSameQueue, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			tk, err := d.NewTask()
			require.NoError(t, err)
			a, err := tk.Full(4, 4, Float32, 1)
			require.NoError(t, err)
			y, err := d.Empty(4, 4, Float32)
			require.NoError(t, err)
			cause := errors.New("host step failed")
			gate := make(chan struct{})
			if !deviceWaitsForHost(p) {
				close(gate)
			}
			require.NoError(t, tk.HostFunc([]Arg{In(a), Out(y)}, func(*HostAccess) error { <-gate; return cause }))
			z, err := d.Empty(4, 4, Float32)
			require.NoError(t, err)
			err = tk.ScaleInto(z, 2, y) // waits for the function, on the device where it can
			if deviceWaitsForHost(p) {
				require.NoError(t, err)
				close(gate)
			} else {
				require.ErrorIs(t, err, ErrFault)
				require.ErrorIs(t, err, cause)
			}
			_, err = y.Float32s()
			require.ErrorIs(t, err, ErrFault)
			require.ErrorIs(t, err, cause)
			_, err = z.Float32s()
			require.ErrorIs(t, err, ErrFault)
			require.ErrorIs(t, err, cause)
			require.NoError(t, a.Err())
			got, err := a.Float32s()
			require.NoError(t, err)
			require.Equal(t, float32(1), got[0])
			// Submitted now, a reader of y fails at once.
			err = tk.HostFunc([]Arg{In(y)}, func(*HostAccess) error { return nil })
			require.ErrorIs(t, err, ErrFault)
			require.ErrorIs(t, err, cause)
			err = tk.Synchronize()
			require.ErrorIs(t, err, cause)
			_ = tk.Close()
		})
	}
}

// A host function reaches only what it declared, as declared; bad
// arguments are typed errors.
func TestHostFuncAccessChecks(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	other, err := d.Empty(2, 2, Float64)
	require.NoError(t, err)
	errs := make(chan []error, 1)
	var kept *HostAccess
	require.NoError(t, tk.HostFunc([]Arg{In(x), Out(y)}, func(h *HostAccess) error {
		kept = h
		_, e1 := h.Float32s(y)                        // declared Out: not readable
		e2 := h.SetFloat32s(x, []float32{0, 0, 0, 0}) // declared In: not writable
		_, e3 := h.Float64s(other)                    // not declared
		e4 := h.Read(x, make([]byte, 3))              // wrong size
		_, e5 := h.Float64s(x)                        // wrong dtype
		errs <- []error{e1, e2, e3, e4, e5}
		return nil
	}))
	require.NoError(t, tk.Synchronize())
	got := <-errs
	require.ErrorIs(t, got[0], ErrInvalid)
	require.ErrorIs(t, got[1], ErrInvalid)
	require.ErrorIs(t, got[2], ErrInvalid)
	require.ErrorIs(t, got[3], ErrShape)
	require.ErrorIs(t, got[4], ErrDType)
	_, err = kept.Float32s(x)
	require.ErrorIs(t, err, ErrInvalid, "a HostAccess kept past its function")
	require.ErrorIs(t, tk.HostFunc(nil, nil), ErrInvalid)
	require.ErrorIs(t, tk.HostFunc([]Arg{F32(1)}, func(*HostAccess) error { return nil }), ErrInvalid)
	require.ErrorIs(t, tk.HostFunc([]Arg{In((*Array)(nil))}, func(*HostAccess) error { return nil }), ErrNilArray)
	vals, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2, 3, 4}, vals)
	require.Empty(t, d.Hazards())
}

// The host lane's pending functions are capped by MaxInFlight: past it the
// submitter waits for the older half, counted as a throttle wait.
func TestHostFuncBounded(t *testing.T) {
	const limit = 4
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, MaxInFlight: limit,
		Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 5}})
	require.NoError(t, err)
	defer d.Close()
	tk := d.DefaultTask()
	x, err := tk.Full(1, 4, Float32, 0)
	require.NoError(t, err)
	var submitted, ran atomic.Int64
	worst := int64(0)
	for i := range 40 {
		require.NoError(t, tk.HostFunc([]Arg{InOut(x)}, func(h *HostAccess) error {
			time.Sleep(50 * time.Microsecond)
			v, err := h.Float32s(x)
			if err != nil {
				return err
			}
			v[0]++
			ran.Add(1)
			return h.SetFloat32s(x, v)
		}))
		submitted.Store(int64(i + 1))
		worst = max(worst, submitted.Load()-ran.Load())
	}
	require.LessOrEqual(t, worst, int64(limit), "functions in flight past the cap")
	require.Positive(t, tk.Stats().HostWaitsFor(ReasonThrottle))
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, float32(40), got[0])
	require.Empty(t, d.Hazards())
}
