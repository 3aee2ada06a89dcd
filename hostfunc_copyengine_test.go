package rocsync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A download of a host function's output, under every policy on the
// emulator, which models ROCr's copy queues (one per direction per GPU,
// shared by every stream's copies and by synchronous hipMemcpy). The
// function is held until the download has been submitted or waits for it
// on the host. A download queued behind its stream's device-side wait for
// the function would hold the device-to-host queue, and the function's own
// read of its input (a synchronous copy) would wait behind it forever; so
// the download waits for the function on the host first, one boundary wait
// (the front's own under the host-waiting policies), and the results are
// right. Under the other policies the function runs at once.
func TestHostFuncOutputDownload(t *testing.T) {
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
			if !deviceWaitsForHost(p) {
				// HostFunc itself, or the download, waits for the
				// function under these policies: let it run.
				close(gate)
			}
			require.NoError(t, tk.HostFunc([]Arg{In(x), Out(y)}, func(h *HostAccess) error {
				<-gate
				xs, err := h.Float32s(x)
				if err != nil {
					return err
				}
				for i := range xs {
					xs[i] += float32(i)
				}
				return h.SetFloat32s(y, xs)
			}))
			before := tk.Stats()
			got := make([]float32, n*n)
			type result struct {
				pd  *Pending
				err error
			}
			submitted := make(chan result, 1)
			go func() {
				pd, err := tk.DownloadFloat32(y, got)
				submitted <- result{pd, err}
			}()
			var r result
			done := false
			require.Eventually(t, func() bool {
				select {
				case r = <-submitted:
					done = true
					return true
				default:
					return tk.Stats().HostWaitsFor(ReasonBoundary) > before.HostWaitsFor(ReasonBoundary)
				}
			}, time.Minute, time.Millisecond, "the download neither was queued nor waited for the function")
			if deviceWaitsForHost(p) {
				close(gate)
			}
			if !done {
				r = <-submitted
			}
			require.NoError(t, r.err)
			require.NoError(t, r.pd.Wait(context.Background()))
			for i, v := range got {
				require.Equal(t, float32(3+i), v, "y[%d]", i)
			}
			if deviceWaitsForHost(p) {
				require.Equal(t, uint64(1), tk.Stats().Sub(before).HostWaitsFor(ReasonBoundary),
					"the download waited for the function on the host once")
			}
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}
