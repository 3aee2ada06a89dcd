package rocsync

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/rocmdev"
)

// signalPolicies are the policies whose tasks have an HSA queue.
var signalPolicies = []Policy{DeviceSide, SkipSameQueue, WaitAlways, DeviceBridge}

// foreignHSA is a producer or consumer outside rocsync that speaks HSA: a
// goroutine of its own that waits for and completes signals and touches
// device memory with synchronous copies (which the emulator's checker
// records as the host's accesses).
type foreignHSA struct {
	t   *testing.T
	rt  hsa.Runtime
	hip hip.Runtime
}

func newForeignHSA(t *testing.T, d *Device) *foreignHSA {
	rt := d.drv.(*rocmdev.Device).Runtimes() // the emulator's, or the real ROCr and HIP
	return &foreignHSA{t: t, rt: rt.HSA, hip: rt.HIP}
}

func (f *foreignHSA) read(x *Array) []float32 {
	v := make([]float32, x.Len())
	require.NoError(f.t, f.hip.MemcpyDtoH(0, unsafe.Pointer(&v[0]), hip.DevicePtr(x.ptr), uint64(4*len(v))))
	return v
}

func (f *foreignHSA) write(x *Array, v []float32) {
	require.NoError(f.t, f.hip.MemcpyHtoD(0, hip.DevicePtr(x.ptr), unsafe.Pointer(&v[0]), uint64(4*len(v))))
}

func (f *foreignHSA) waitZero(sig uint64) {
	v := f.rt.SignalWaitScacquire(hsa.Signal(sig), hsa.ConditionEq, 0, hsa.TimeoutInfinite, hsa.WaitStateBlocked)
	require.Zero(f.t, v)
}

// The HSA form of the handshake, bracketing foreign work with both
// halves, under every policy with an HSA queue, with the hazard checker
// and random delays on: rocsync writes x and reads y; the foreign
// consumer waits for the exported signal, reads x, writes y = x + 1 and
// completes its own signal; rocsync imports it, reads y and then
// overwrites x (after the foreign read). Every result equals the
// reference and the checker finds no race.
func TestSignalHandshake(t *testing.T) {
	for _, p := range signalPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			signalBracket(t, d)
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// signalBracket is the bracketed handshake of TestSignalHandshake on d.
func signalBracket(t *testing.T, d *Device) {
	f := newForeignHSA(t, d)
	tk, err := d.NewTask()
	require.NoError(t, err)
	defer func() { require.NoError(t, tk.Close()) }()
	const n = 32
	x, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	y, err := tk.Full(n, n, Float32, 0)
	require.NoError(t, err)
	z, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	for it := range 4 {
		require.NoError(t, tk.Fill(x, float64(it))) // rocsync writes x
		require.NoError(t, tk.ScaleInto(z, 1, y))   // and reads y: the foreign write must wait
		sig, err := tk.ExportSignal(In(x), Out(y))
		require.NoError(t, err)
		done, err := f.rt.SignalCreate(1, nil)
		require.NoError(t, err)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			time.Sleep(time.Millisecond) // rocsync's ops below are queued first
			f.waitZero(sig)
			v := f.read(x)
			for i := range v {
				v[i]++
			}
			f.write(y, v)
			f.rt.SignalStoreScrelease(done, 0)
		}()
		require.NoError(t, tk.ImportSignal(uint64(done), In(x), Out(y)))
		require.NoError(t, tk.ScaleInto(z, 2, y)) // reads the foreign y
		require.NoError(t, tk.Fill(x, -1))        // overwrites what the foreign work read
		got, err := z.Float32s()
		require.NoError(t, err)
		for i, v := range got {
			require.Equal(t, 2*float32(it+1), v, "iteration %d element %d", it, i)
		}
		<-finished
		require.NoError(t, tk.ReleaseSignal(sig))
		require.NoError(t, tk.Synchronize())
		require.NoError(t, f.rt.SignalDestroy(done))
	}
}

// Leaving out either half is a race the checker reports: a foreign
// consumer that reads x without waiting for the exported signal, and
// rocsync reading what a foreign producer wrote without importing its
// signal.
func TestSignalHandshakeMissingIsARace(t *testing.T) {
	t.Run("no export", func(t *testing.T) {
		d := openOpPath(t, DeviceSide)
		f := newForeignHSA(t, d)
		tk := d.DefaultTask()
		x, err := tk.Full(16, 16, Float32, 3)
		require.NoError(t, err)
		d.machine().Quiesce() // the kernel has run, unobserved by the host
		f.read(x)
		require.NoError(t, d.Synchronize())
		require.NotEmpty(t, d.Hazards(), "the foreign read is not ordered after rocsync's write")
	})
	t.Run("no import", func(t *testing.T) {
		d := openOpPath(t, DeviceSide)
		f := newForeignHSA(t, d)
		tk := d.DefaultTask()
		x, err := d.Empty(16, 16, Float32)
		require.NoError(t, err)
		y, err := d.Empty(16, 16, Float32)
		require.NoError(t, err)
		release := d.machine().Hold()
		require.NoError(t, tk.ScaleInto(y, 2, x)) // queued before the foreign write, not ordered after it
		f.write(x, make([]float32, 256))
		release()
		require.NoError(t, d.Synchronize())
		require.NotEmpty(t, d.Hazards(), "rocsync's read is not ordered after the foreign write")
	})
	t.Run("with import", func(t *testing.T) {
		d := openOpPath(t, DeviceSide)
		f := newForeignHSA(t, d)
		tk := d.DefaultTask()
		x, err := d.Empty(16, 16, Float32)
		require.NoError(t, err)
		y, err := d.Empty(16, 16, Float32)
		require.NoError(t, err)
		done, err := f.rt.SignalCreate(1, nil)
		require.NoError(t, err)
		defer f.rt.SignalDestroy(done)
		release := d.machine().Hold()
		require.NoError(t, tk.ImportSignal(uint64(done), Out(x)))
		require.NoError(t, tk.ScaleInto(y, 2, x))
		f.write(x, seq(256, func(i int) float32 { return float32(i) }))
		f.rt.SignalStoreScrelease(done, 0)
		release()
		got, err := y.Float32s()
		require.NoError(t, err)
		require.Equal(t, seq(256, func(i int) float32 { return 2 * float32(i) }), got)
		require.Empty(t, d.Hazards())
	})
}

// Misuse is a typed error and changes nothing: no operands, a scalar, the
// null signal, a task without an HSA queue (Unified), releasing a signal
// twice or one never exported.
func TestSignalHandshakeErrors(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := tk.Full(4, 4, Float32, 1)
	require.NoError(t, err)
	_, err = tk.ExportSignal()
	require.ErrorIs(t, err, ErrInvalid)
	_, err = tk.ExportSignal(F32(1))
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, tk.ImportSignal(0, In(x)), ErrInvalid)
	sig, err := tk.ExportSignal(In(x))
	require.NoError(t, err)
	require.NoError(t, tk.ReleaseSignal(sig))
	require.ErrorIs(t, tk.ReleaseSignal(sig), ErrInvalid)
	require.ErrorIs(t, tk.ReleaseSignal(12345), ErrInvalid)
	require.NoError(t, x.Err())

	u := openOpPath(t, Unified)
	ut := u.DefaultTask()
	y, err := ut.Full(4, 4, Float32, 1)
	require.NoError(t, err)
	_, err = ut.ExportSignal(In(y))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, ut.ImportSignal(1, Out(y)), ErrUnavailable)
	require.NoError(t, y.Err(), "nothing was poisoned")
	vals, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, vals)
}

// What a foreign producer wrote, imported on one task's queue, read by a
// kernel on another task's queue of the same GPU: the reader acquires at
// system scope (the import marks its operands as written outside every
// timeline), so the checker finds no stale read, though the writer fence
// the reader follows is a barrier on a queue of its own GPU.
func TestSignalImportReadOnAnotherQueueAcquires(t *testing.T) {
	for _, p := range signalPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			f := newForeignHSA(t, d)
			importer, err := d.NewTask()
			require.NoError(t, err)
			defer func() { require.NoError(t, importer.Close()) }()
			reader, err := d.NewTask()
			require.NoError(t, err)
			defer func() { require.NoError(t, reader.Close()) }()
			y, err := d.Empty(4, 4, Float32)
			require.NoError(t, err)
			done, err := f.rt.SignalCreate(1, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, f.rt.SignalDestroy(done)) }()
			want := make([]float32, 16)
			for i := range want {
				want[i] = float32(i)
			}
			go func() {
				time.Sleep(time.Millisecond) // the import is queued first
				f.write(y, want)
				f.rt.SignalStoreScrelease(done, 0)
			}()
			require.NoError(t, importer.ImportSignal(uint64(done), Out(y)))
			z, err := reader.Add(y, y)
			require.NoError(t, err)
			got, err := z.Float32s()
			require.NoError(t, err)
			for i := range want {
				require.Equal(t, 2*want[i], got[i])
			}
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}
