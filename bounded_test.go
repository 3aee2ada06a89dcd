package rocsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/syncstate"
)

// Every host wait is bounded: past Options.WaitTimeout it returns an
// ErrTimeout error naming the fence, for a queue (kernel) and a stream
// (gemm) writer alike; the work itself goes on and completes.
func TestHostWaitsTimeOut(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified} {
		for _, op := range faultOps {
			t.Run(fmt.Sprintf("%v/%s", p, op.name), func(t *testing.T) {
				d := openFaulty(t, p, func(o *Options) { o.WaitTimeout = 50 * time.Millisecond })
				defer func() { require.NoError(t, d.Close()) }()
				tk := d.DefaultTask()
				x, err := d.FromFloat32(4, 4, randMatrix(6, 4))
				require.NoError(t, err)
				y, _ := d.Empty(4, 4, Float32)
				release := d.machine().Hold()
				require.NoError(t, op.run(tk, y, x))
				err = within(t, "read-back", func() error { _, e := y.Float32s(); return e })
				require.ErrorIs(t, err, ErrTimeout)
				var te *syncstate.TimeoutError
				require.True(t, errors.As(err, &te))
				require.Contains(t, err.Error(), "#", "names the fence")
				require.ErrorIs(t, within(t, "Synchronize", tk.Synchronize), ErrTimeout)
				require.ErrorIs(t, within(t, "Close", d.Close), ErrTimeout, "Close does not release what is in flight")
				release()
				_, err = y.Float32s()
				require.NoError(t, err, "the work was not cancelled")
			})
		}
	}
}

// The context forms cancel the wait, not the work.
func TestContextCancelsTheWaitNotTheWork(t *testing.T) {
	d := openFaulty(t, DeviceSide)
	defer func() { require.NoError(t, d.Close()) }()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(4, 4, randMatrix(7, 4))
	require.NoError(t, err)
	release := d.machine().Hold()
	y, err := tk.Add(x, x)
	require.NoError(t, err)
	z, err := tk.MatMul(x, x, false, false)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err = within(t, "SynchronizeContext", func() error { return tk.SynchronizeContext(ctx) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrTimeout)
	dst := make([]float32, 16)
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.ErrorIs(t, y.CopyToFloat32Context(ctx2, dst), context.Canceled)
	require.ErrorIs(t, z.CopyToFloat32Context(ctx2, dst), context.Canceled)
	require.ErrorIs(t, d.SynchronizeContext(ctx2), context.Canceled)
	require.ErrorIs(t, d.CloseContext(ctx2), context.Canceled)
	release()
	require.NoError(t, tk.SynchronizeContext(context.Background()))
	require.NoError(t, y.CopyToFloat32Context(context.Background(), dst))
	require.Equal(t, 2*float32(randMatrix(7, 4)[0]), dst[0])
}

// Under Unified, back-pressure (more than MaxInFlight ops on the stream)
// is a counted throttle wait.
func TestUnifiedBackPressureIsAThrottleWait(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, Policy: Unified, MaxInFlight: 16, LogLevel: LogOff})
	require.NoError(t, err)
	defer d.Close()
	tk := d.DefaultTask()
	x, _ := d.Empty(4, 4, Float32)
	for i := 0; i < 200; i++ {
		require.NoError(t, tk.Fill(x, float64(i)))
	}
	require.NoError(t, tk.Synchronize())
	require.NotZero(t, tk.Stats().HostWaits[ReasonThrottle])
}

// The run-ahead cap never deadlocks with cross-queue waits: two and three
// tasks ping-pong over shared arrays with the smallest ring (64, the
// emulated agent's minimum) and a cap of one op in flight, under
// every policy, with the hazard checker and random delays on.
func TestRunAheadCapPingPong(t *testing.T) {
	for _, p := range syncstate.Policies {
		for _, tasks := range []int{2, 3} {
			t.Run(fmt.Sprintf("%v/%d-tasks", p, tasks), func(t *testing.T) {
				d := openStrict(t, p, func(o *Options) { o.QueueSize = 64; o.MaxInFlight = 1; o.MaxQueues = tasks })
				tks := make([]*Task, tasks)
				arrs := make([]*Array, tasks)
				for i := range tks {
					var err error
					tks[i], err = d.NewTask()
					require.NoError(t, err)
					arrs[i], err = d.FromFloat32(4, 4, make([]float32, 16))
					require.NoError(t, err)
				}
				const rounds = 60
				err := within(t, "the ping-pong", func() error {
					var wg sync.WaitGroup
					errs := make(chan error, tasks)
					for i := range tks {
						wg.Add(1)
						go func() {
							defer wg.Done()
							me, next := arrs[i], arrs[(i+1)%tasks]
							for r := 0; r < rounds; r++ {
								// x_i += 1, then a gemm reading x_{i+1}: every
								// round crosses queues and streams.
								if err := tks[i].AXPYInto(me, 0, next, me); err != nil {
									errs <- err
									return
								}
								tmp, err := tks[i].MatMul(me, next, false, false)
								if err != nil {
									errs <- err
									return
								}
								if err := tks[i].AddInto(me, me, tmp); err != nil {
									errs <- err
									return
								}
								_ = tmp.Free()
							}
						}()
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						return err
					}
					return d.Synchronize()
				})
				require.NoError(t, err)
				// Every op ran, and the cap did stop the run-ahead (under
				// WaitAlways each op waits on the host, so none runs ahead).
				st := d.Stats()
				require.EqualValues(t, 3*rounds*tasks, st.Dispatches, "%v", st)
				if p != WaitAlways {
					require.NotZero(t, st.HostWaitsFor(ReasonThrottle), "the cap never engaged: %v", st)
				}
			})
		}
	}
}

// A million ops without a host sync, under every policy, keep memory, HSA
// signals and HIP events bounded. CI runs 20,000 ops per policy; set
// ROCSYNC_MILLION=1 for the full count.
func TestMillionOpsBoundedResources(t *testing.T) {
	n := 20_000
	if os.Getenv(testenv.Million) == "1" {
		n = 1_000_000
	}
	if v, err := strconv.Atoi(os.Getenv(testenv.Ops)); err == nil && v > 0 {
		n = v
	}
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d, err := Open(Options{Backend: Emulator, Policy: p, QueueSize: 64, MaxInFlight: 32, LogLevel: LogOff})
			require.NoError(t, err)
			defer d.Close()
			a, _ := d.NewTask()
			b, _ := d.NewTask()
			x, _ := d.FromFloat32(4, 4, make([]float32, 16))
			y, _ := d.FromFloat32(4, 4, make([]float32, 16))
			var ms runtime.MemStats
			var heapAt [2]uint64
			start := time.Now()
			for i := 0; i < n; i += 4 {
				// HSA→HSA, HSA→HIP, HIP→HSA and HIP→HIP crossings.
				require.NoError(t, a.Fill(x, 1))
				require.NoError(t, b.MatMulInto(y, x, x, false, false))
				require.NoError(t, a.AddInto(x, y, x))
				require.NoError(t, b.Gemm(false, false, 1, x, x, 0, y))
				if i == n/4/4*4 || i+4 >= n {
					runtime.GC()
					runtime.ReadMemStats(&ms)
					heapAt[min(1, i*2/n)] = ms.HeapAlloc
				}
			}
			st := d.Stats()
			t.Logf("%v: %d ops in %v; signals %d, events %d, heap %d→%d KiB, host waits %d (throttle %d)",
				p, n, time.Since(start).Round(time.Millisecond), d.SignalsCreated(), d.EventsCreated(),
				heapAt[0]>>10, heapAt[1]>>10, st.HostWaitsTotal(), st.HostWaits[ReasonThrottle])
			require.Zero(t, st.HostWaits[ReasonSync]+st.HostWaits[ReasonReadBack], "no host syncs")
			require.LessOrEqual(t, d.SignalsCreated(), uint64(4*64+64), "signals bounded")
			require.LessOrEqual(t, d.EventsCreated(), uint64(256), "events bounded")
			require.Less(t, heapAt[1], heapAt[0]+16<<20, "memory bounded")
			require.NoError(t, d.Synchronize())
		})
	}
}

// The per-device cap bounds the ops in flight over all tasks, with
// throttle waits, and completes with tasks crossing over shared arrays.
func TestPerDeviceRunAheadCap(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified, DeviceBridge} {
		t.Run(p.String(), func(t *testing.T) {
			d := openStrict(t, p, func(o *Options) { o.MaxInFlightPerDevice = 8 })
			emulatorOnly(t, d, "holds the device to keep work pending")
			a, _ := d.NewTask()
			b, _ := d.NewTask()
			x, _ := d.FromFloat32(4, 4, make([]float32, 16))
			y, _ := d.FromFloat32(4, 4, make([]float32, 16))
			release := d.machine().Hold() // keep work pending: the cap must act
			go func() { time.Sleep(30 * time.Millisecond); release() }()
			err := within(t, "the capped run", func() error {
				for i := 0; i < 100; i++ {
					if err := a.AXPYInto(x, 1, y, x); err != nil {
						return err
					}
					if err := b.AXPYInto(y, 1, x, y); err != nil {
						return err
					}
				}
				return nil
			})
			require.NoError(t, err)
			require.NotZero(t, d.Stats().HostWaits[ReasonThrottle], "%v", d.Stats())
			require.NoError(t, d.Synchronize())
		})
	}
}
