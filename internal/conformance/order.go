package conformance

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/reference"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/syncstate"
)

const n128 = 128

// seedProgram runs one of the seed programs and returns the result array
// and the device stats between the start and the final Synchronize.
type seedProgram struct {
	name  string
	run   func(t *testing.T, tk *rocsync.Task, x *rocsync.Array) *rocsync.Array
	ref   func(x []float64) []float64
	waits map[rocsync.Policy]uint64 // host waits before the final Synchronize
	// boundary is the number of boundary host waits under SkipSameQueue
	// and DeviceSide (the other policies have none).
	boundary int
}

var seedPrograms = []seedProgram{
	{
		name: "matmul",
		run: func(t *testing.T, tk *rocsync.Task, x *rocsync.Array) *rocsync.Array {
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
		waits:    map[rocsync.Policy]uint64{rocsync.WaitAlways: 3, rocsync.SkipSameQueue: 0, rocsync.DeviceSide: 0, rocsync.Unified: 0, rocsync.DeviceBridge: 0},
		boundary: 0,
	},
	{
		name: "elementwise",
		run: func(t *testing.T, tk *rocsync.Task, x *rocsync.Array) *rocsync.Array {
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
		waits:    map[rocsync.Policy]uint64{rocsync.WaitAlways: 3, rocsync.SkipSameQueue: 0, rocsync.DeviceSide: 0, rocsync.Unified: 0, rocsync.DeviceBridge: 0},
		boundary: 0,
	},
	{
		name: "mixed",
		run: func(t *testing.T, tk *rocsync.Task, x *rocsync.Array) *rocsync.Array {
			t1, err := tk.Mul(x, x)
			require.NoError(t, err)
			t2, err := tk.MatMul(t1, x, false, false)
			require.NoError(t, err)
			require.NoError(t, t1.Free())
			return t2
		},
		ref:      func(x []float64) []float64 { return reference.MatMul(reference.Mul(x, x), x, n128) },
		waits:    map[rocsync.Policy]uint64{rocsync.WaitAlways: 2, rocsync.SkipSameQueue: 1, rocsync.DeviceSide: 1, rocsync.Unified: 0, rocsync.DeviceBridge: 0},
		boundary: 1,
	},
}

func SeedPrograms(t *testing.T, be *Backend) {
	for _, prog := range seedPrograms {
		for _, p := range syncstate.Policies {
			t.Run(prog.name+"/"+p.String(), func(t *testing.T) {
				d := open(t, be, p)
				tk := d.DefaultTask()
				host := testcheck.RandMatrix(1, n128)
				x, err := d.FromFloat32(n128, n128, host)
				require.NoError(t, err)
				// Keep the device busy while the host submits: then a
				// crossing always finds its producer pending, and the
				// counts are exact.
				busy(t, be, d, tk)
				before := d.Stats()
				out := prog.run(t, tk, x)
				mid := d.Stats().Sub(before)
				want := be.expectedPolicy(t, p)
				require.Equal(t, prog.waits[want], mid.HostWaitsTotal(), "host waits before Synchronize: %v", mid)
				switch want {
				case rocsync.WaitAlways:
					require.Equal(t, prog.waits[p], mid.HostWaitsFor(rocsync.ReasonWaitAlways), "%v", mid)
				case rocsync.SkipSameQueue, rocsync.DeviceSide:
					require.EqualValues(t, prog.boundary, mid.HostWaitsFor(rocsync.ReasonBoundary), "%v", mid)
				}
				require.NoError(t, tk.Synchronize())
				got, err := out.Float32s()
				require.NoError(t, err)
				testcheck.RequireClose(t, prog.ref(reference.Widen(host)), got, 1e-4)
				require.NoError(t, out.Free())
				require.NoError(t, x.Free())
			})
		}
	}
}

// An op on queue B that overwrites an array still being read on queue A
// must wait for that read.
func WriteAfterRead(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := open(t, be, p)
			a, err := d.NewTask()
			require.NoError(t, err)
			b, err := d.NewTask()
			require.NoError(t, err)
			host := testcheck.RandMatrix(2, 64)
			x, err := d.FromFloat32(64, 64, host)
			require.NoError(t, err)
			busy(t, be, d, a)     // keep A's read pending
			y, err := a.Mul(x, x) // reads x on A's kernel queue
			require.NoError(t, err)
			before := b.Stats()
			require.NoError(t, b.Fill(x, 5)) // overwrites x on B's
			st := b.Stats().Sub(before)
			switch p {
			case rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge:
				require.EqualValues(t, 1, st.DeviceWaits, "%v", st)
				require.Zero(t, st.HostWaitsTotal(), "%v", st)
			case rocsync.SkipSameQueue:
				require.EqualValues(t, 1, st.HostWaitsFor(rocsync.ReasonCrossQueue), "%v", st)
			}
			got, err := y.Float32s()
			require.NoError(t, err)
			testcheck.RequireClose(t, reference.Mul(reference.Widen(host), reference.Widen(host)), got, 1e-6)
			xs, err := x.Float32s()
			require.NoError(t, err)
			for _, v := range xs {
				require.Equal(t, float32(5), v)
			}
		})
	}
}

// x = x*x records one fence, and three in a row leave one pending fence.
func AliasingRecordsOneFence(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := open(t, be, p)
			tk := d.DefaultTask()
			host := []float32{1.5, -2, 0.5, 3}
			x, err := d.FromFloat32(2, 2, host)
			require.NoError(t, err)
			busy(t, be, d, tk)
			for i := 0; i < 3; i++ {
				require.NoError(t, tk.MulInto(x, x, x))
				readers, writerZero := be.Internals.Fences(x)
				require.Zero(t, readers, "an aliased read must not leave a reader fence")
				require.False(t, writerZero)
			}
			if p != rocsync.WaitAlways {
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
func TwoTasksSharingArrays(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := open(t, be, p)
			producer, err := d.NewTask()
			require.NoError(t, err)
			consumer, err := d.NewTask()
			require.NoError(t, err)
			host := testcheck.RandMatrix(3, 32)
			x, err := d.FromFloat32(32, 32, host)
			require.NoError(t, err)
			const rounds = 20
			ch := make(chan *rocsync.Array)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(ch)
				for i := 0; i < rounds; i++ {
					y, err := producer.Mul(x, x)
					if !testcheck.NoErr(t, err) {
						return
					}
					ch <- y
				}
			}()
			before := consumer.Stats()
			var outs []*rocsync.Array
			for y := range ch {
				z, err := consumer.Add(y, x) // crosses from the producer's queue
				require.NoError(t, err)
				require.NoError(t, y.Free())
				outs = append(outs, z)
			}
			wg.Wait()
			st := consumer.Stats().Sub(before)
			switch p {
			case rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge:
				require.Zero(t, st.HostWaitsTotal(), "%v", st)
			case rocsync.WaitAlways:
				require.EqualValues(t, rounds, st.HostWaitsFor(rocsync.ReasonWaitAlways), "%v", st)
			}
			want := reference.Widen(host)
			for i := range want {
				want[i] = want[i]*want[i] + want[i]
			}
			for _, z := range outs {
				got, err := z.Float32s()
				require.NoError(t, err)
				testcheck.RequireClose(t, want, got, 1e-6)
			}
		})
	}
}

// Unified runs kernels on the task's HIP stream: no boundary inside a task.
func UnifiedHasNoBoundary(t *testing.T, be *Backend) {
	for _, prog := range seedPrograms {
		t.Run(prog.name, func(t *testing.T) {
			d := open(t, be, rocsync.Unified)
			tk := d.DefaultTask()
			kernel, library := be.Internals.Timelines(tk)
			require.Equal(t, kernel, library, "one stream for kernels and gemms")
			host := testcheck.RandMatrix(1, n128)
			x, err := d.FromFloat32(n128, n128, host)
			require.NoError(t, err)
			before := d.Stats()
			out := prog.run(t, tk, x)
			mid := d.Stats().Sub(before)
			require.Zero(t, mid.HostWaitsTotal(), "%v", mid)
			require.NoError(t, tk.Synchronize())
			got, err := out.Float32s()
			require.NoError(t, err)
			testcheck.RequireClose(t, prog.ref(reference.Widen(host)), got, 1e-4)
		})
	}
}

// DeviceBridge crosses the boundary both ways on the device: a gemm
// result read by a kernel (HIP→HSA) and a kernel result read by a gemm
// (HSA→HIP), with no host wait and no hazard.
func DeviceBridgeBothWays(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceBridge)
	tk := d.DefaultTask()
	host := testcheck.RandMatrix(6, n128)
	x, err := d.FromFloat32(n128, n128, host)
	require.NoError(t, err)
	busy(t, be, d, tk)
	before := d.Stats()
	y, err := tk.MatMul(x, x, false, false) // HIP
	require.NoError(t, err)
	z, err := tk.Mul(y, x) // HSA, waits for the gemm on the device
	require.NoError(t, err)
	st := d.Stats().Sub(before)
	if !be.deviceBridgeOnDevice(t) {
		// HIP before 5.6: the first crossing was a boundary host wait,
		// which outlasted the hold. Hold again (outside the counted
		// stretches: busy may run ops of its own) and compute z again,
		// so that the kernel is pending when the host reaches the
		// second crossing, as on a GPU behind a fast host.
		busy(t, be, d, tk)
		require.NoError(t, z.Free())
		before = d.Stats()
		z, err = tk.Mul(y, x) // y's gemm is known complete: no crossing
		require.NoError(t, err)
	}
	w, err := tk.MatMul(z, x, false, false) // HIP, waits for the kernel on the device
	require.NoError(t, err)
	st2 := d.Stats().Sub(before)
	switch {
	case !be.deviceBridgeOnDevice(t):
		// Both crossings are boundary host waits.
		require.EqualValues(t, 2, st.HostWaitsFor(rocsync.ReasonBoundary)+st2.HostWaitsFor(rocsync.ReasonBoundary), "%v, then %v", st, st2)
		require.EqualValues(t, 2, st.HostWaitsTotal()+st2.HostWaitsTotal(), "%v, then %v", st, st2)
		require.Zero(t, st.DeviceWaits+st2.DeviceWaits, "%v, then %v", st, st2)
	case be.held():
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
	testcheck.RequireClose(t, reference.MatMul(reference.Mul(reference.MatMul(hx, hx, n128), hx), hx, n128), got, 1e-4)
}

// Reading back waits for the array's writer only: a pending reader of x
// does not hold up x's read-back, while y's read-back waits for y's writer.
func ReadBackWaitsForWriterOnly(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide)
	// Not on the simulated driver: holding it stops HIP's copies too, which a
	// real GPU runs beside a busy compute queue.
	need(t, be, be.held(), "way to hold the device")
	tk := d.DefaultTask()
	host := []float32{1, 2, 3, 4}
	x, err := d.FromFloat32(2, 2, host)
	require.NoError(t, err)
	release := be.Hold(t, d)
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
	require.EqualValues(t, 1, d.Stats().Sub(before).HostWaitsFor(rocsync.ReasonReadBack))
}

// With waits disabled, the checker must report the race the waits prevent:
// this is what proves the ordering tests can fail.
func HazardCheckerFiresWithoutWaits(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			need(t, be, be.Internals.WithoutWaits != nil && be.Quiesce != nil, "hazard checker")
			d := openChecked(t, be, p, false, be.Internals.WithoutWaits)
			a, err := d.NewTask()
			require.NoError(t, err)
			b, err := d.NewTask()
			require.NoError(t, err)
			x, err := d.FromFloat32(16, 16, testcheck.RandMatrix(4, 16))
			require.NoError(t, err)
			y, err := a.Mul(x, x) // writes y on A's kernel timeline
			require.NoError(t, err)
			be.Quiesce(d)        // let A finish, unobserved by the host
			_, err = b.Add(y, x) // reads y on B's, unordered
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
