package rocsync

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// groupProgram writes each rank's array with a kernel on its HSA queue,
// all-reduces the arrays and reads each result with a kernel on the
// queue, and returns the results read back.
func groupProgram(t *testing.T, devs []*Device, tasks []*Task, comm *Communicator) [][]float32 {
	t.Helper()
	n := len(tasks)
	xs := make([]*Array, n)
	for r, tk := range tasks {
		host := make([]float32, 256)
		for i := range host {
			host[i] = float32(r+1) + float32(i%5)
		}
		base, err := devs[r].FromFloat32(16, 16, host)
		require.NoError(t, err)
		xs[r], err = tk.Scale(2, base)
		require.NoError(t, err)
	}
	require.NoError(t, comm.AllReduce(ReduceSum, xs...))
	// The collective finishes, unobserved by the host (ordered for Go's
	// race detector): the reads below are ordered after it only through
	// the fences rocsync recorded.
	devs[0].machine().Quiesce()
	outs := make([][]float32, n)
	for r, tk := range tasks {
		y, err := tk.Scale(1, xs[r])
		require.NoError(t, err)
		outs[r], err = y.Float32s()
		require.NoError(t, err)
	}
	return outs
}

// A group's collective is launched at ncclGroupEnd, so each part's fence
// must be recorded after it: the kernel that reads the result waits for
// the collective, under either way of submitting. Recording the fences
// inside the group instead (the event a stream records for its fence,
// here the throttle's mark after every op, is then ahead of the
// collective on the stream) is a race the hazard checker reports.
func TestCollectiveGroupFenceAfterGroupEnd(t *testing.T) {
	for _, p := range []Policy{DeviceSide, WaitAlways} {
		for _, n := range []int{2, 4} {
			for _, mode := range []string{"group", "threads", "fence in group"} {
				t.Run(fmt.Sprintf("%v/%d/%s", p, n, mode), func(t *testing.T) {
					devs, tasks := openCollEmu(t, n, p, func(o *Options) { o.MaxInFlight = 4 })
					comm, err := NewCommunicator(tasks...)
					require.NoError(t, err)
					defer comm.Close()
					switch mode {
					case "group":
						require.NoError(t, comm.SetSubmit(SubmitGroup))
					case "threads":
						require.NoError(t, comm.SetSubmit(SubmitThreads))
					case "fence in group":
						require.NoError(t, comm.SetSubmit(SubmitGroup))
						comm.fenceInGroup = true
					}
					outs := groupProgram(t, devs, tasks, comm)
					if mode == "fence in group" {
						var found bool
						for _, h := range devs[0].Hazards() { // the machine's: every GPU's
							found = found || strings.Contains(h.Error(), "ncclAllReduce")
						}
						require.True(t, found, "the checker must see a fence recorded before ncclGroupEnd")
						return
					}
					for r, got := range outs {
						for i, v := range got {
							want := float32(0)
							for q := range n {
								want += 2 * (float32(q+1) + float32(i%5))
							}
							require.Equal(t, want, v, "rank %d element %d", r, i)
						}
					}
					requireNoHazards(t, devs)
				})
			}
		}
	}
}

// A part that fails after another part is on its stream (that part waits
// on the device for the failed one) aborts the communicator, and nothing
// waits for ever: the launched part fails, the tasks synchronize, what
// the collective was to write reads as failed, and the communicator
// refuses further use. Likewise when the library refuses a rank's call
// (here a communicator destroyed under it), which inside a group also
// fails ncclGroupEnd. The emulated collectives' own timeout is far off,
// so only the abort can end the launched part.
func TestCollectiveFailedPartAbortsAndNothingWaits(t *testing.T) {
	injected := errors.New("injected part failure")
	for _, mode := range []CommSubmit{SubmitGroup, SubmitThreads} {
		for _, how := range []string{"part fails", "library refuses"} {
			t.Run(mode.String()+"/"+how, func(t *testing.T) {
				devs, tasks := openCollEmu(t, 2, DeviceSide, func(o *Options) { o.WaitTimeout = 10 * time.Minute })
				comm, err := NewCommunicator(tasks...)
				require.NoError(t, err)
				require.NoError(t, comm.SetSubmit(mode))
				xs := make([]*Array, 2)
				for r, tk := range tasks {
					base, err := devs[r].FromFloat32(4, 4, make([]float32, 16))
					require.NoError(t, err)
					xs[r], err = tk.Scale(2, base)
					require.NoError(t, err)
				}
				require.NoError(t, comm.AllReduce(ReduceSum, xs...)) // a good one first
				if how == "part fails" {
					comm.failCall = func(rank int) error {
						if rank == 1 {
							return injected
						}
						return nil
					}
				} else {
					require.NoError(t, comm.lib.CommDestroy(comm.ranks[1].comm))
				}
				start := time.Now()
				err = comm.AllReduce(ReduceSum, xs...)
				require.ErrorIs(t, err, ErrFault)
				require.Contains(t, err.Error(), "rank 1")
				require.Contains(t, err.Error(), "the communicator was aborted")
				if how == "part fails" {
					require.ErrorIs(t, err, injected)
				}
				for _, tk := range tasks {
					if err := tk.Synchronize(); err != nil {
						require.ErrorIs(t, err, ErrFault)
					}
				}
				for r, x := range xs {
					_, err := x.Float32s()
					require.ErrorIs(t, err, ErrFault, "rank %d", r)
				}
				require.Less(t, time.Since(start), time.Minute, "only the abort ends the launched part")
				require.ErrorIs(t, comm.AllReduce(ReduceSum, xs...), ErrFault)
				// The abort freed the ranks' communicators: Close does
				// not abort them again (a use after free in NCCL, which
				// the fake library reports). Its error, if any, is the
				// tasks' failure as they drain.
				if err := comm.Close(); err != nil {
					require.NotContains(t, err.Error(), "destroyed communicator")
				}
				requireNoHazards(t, devs)
			})
		}
	}
}

func TestCommSubmitBadInputs(t *testing.T) {
	for _, m := range []CommSubmit{SubmitGroup, SubmitThreads} {
		got, err := ParseCommSubmit(m.String())
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := ParseCommSubmit("both")
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, "CommSubmit(9)", CommSubmit(9).String())
	var nilComm *Communicator
	require.ErrorIs(t, nilComm.SetSubmit(SubmitThreads), ErrInvalid)
	_, tasks := openCollEmu(t, 2, DeviceSide, nil)
	comm, err := NewCommunicator(tasks...)
	require.NoError(t, err)
	defer comm.Close()
	require.ErrorIs(t, comm.SetSubmit(CommSubmit(9)), ErrInvalid)
}

// A rank's task in use by another goroutine refuses the whole collective
// with ErrConcurrentUse before any part is submitted, under either
// submission: under SubmitThreads rank 0's part used to be on its stream
// already, so the communicator was aborted and rank 0's array, which
// nobody misused, was lost.
func TestCollectiveWithABusyRankTaskSubmitsNothing(t *testing.T) {
	for _, mode := range []CommSubmit{SubmitThreads, SubmitGroup} {
		t.Run(mode.String(), func(t *testing.T) {
			devs, tasks := openCollEmu(t, 2, DeviceSide, nil)
			comm, err := NewCommunicator(tasks...)
			require.NoError(t, err)
			defer func() { require.NoError(t, comm.Close()) }()
			require.NoError(t, comm.SetSubmit(mode))
			x0, err := devs[0].FromFloat32(1, 4, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			x1, err := devs[1].FromFloat32(1, 4, []float32{5, 6, 7, 8})
			require.NoError(t, err)
			// Rank 1's task is busy: another goroutine's Synchronize
			// waits there behind a host function that has not returned.
			release := make(chan struct{})
			require.NoError(t, tasks[1].HostFunc(nil, func(*HostAccess) error { <-release; return nil }))
			synced := make(chan error)
			go func() { synced <- tasks[1].Synchronize() }()
			for tasks[1].using.Load() == nil {
				runtime.Gosched()
			}
			err = comm.AllReduce(ReduceSum, x0, x1)
			close(release)
			require.NoError(t, <-synced)
			require.ErrorIs(t, err, ErrConcurrentUse)
			require.ErrorContains(t, err, "rank 1")
			require.NotContains(t, err.Error(), "rank 1: ;")
			for r, want := range map[*Array][]float32{x0: {1, 2, 3, 4}, x1: {5, 6, 7, 8}} {
				got, err := r.Float32s()
				require.NoError(t, err, "the refused collective lost an array")
				require.Equal(t, want, got)
			}
			require.NoError(t, comm.AllReduce(ReduceSum, x0, x1), "the communicator still works")
			got, err := x0.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{6, 8, 10, 12}, got)
			requireNoHazards(t, devs)
		})
	}
}
