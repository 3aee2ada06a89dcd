package rocsync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cuda"
)

// The handshake on an NVIDIA GPU (ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda): a
// CUstream of the user's own, in the primary context rocsync runs in,
// copies x into y between ExportTo and ImportFrom, over and over while
// rocsync's kernels rewrite x and read y, and every result equals the CPU
// reference. Without the handshake the copies would read x mid-rewrite.
func TestCUDAForeignStreamHandshake(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openCUDAOpPath(t, p)
			lib, err := cuda.Open()
			require.NoError(t, err)
			require.NoError(t, lib.Init())
			dev, err := lib.DeviceGet(0)
			require.NoError(t, err)
			ctx, err := lib.PrimaryCtxRetain(dev)
			require.NoError(t, err)
			defer ctx.Release()
			fs, err := ctx.StreamCreate(cuda.StreamNonBlocking)
			require.NoError(t, err)
			defer ctx.StreamDestroy(fs)

			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 1024 // 4 MiB per array: the copies take long enough to race
			x, err := tk.Full(n, n, Float32, 1)
			require.NoError(t, err)
			y, err := d.Empty(n, n, Float32)
			require.NoError(t, err)
			acc, err := tk.Full(n, n, Float32, 0)
			require.NoError(t, err)
			want := float32(0)
			for it := range 20 {
				require.NoError(t, tk.ExportTo(uintptr(fs), In(x), Out(y)))
				require.NoError(t, ctx.MemcpyDtoDAsync(cuda.DevicePtr(y.ptr), cuda.DevicePtr(x.ptr), uint64(n*n*4), fs))
				require.NoError(t, tk.ImportFrom(uintptr(fs), In(x), Out(y)))
				want += float32(it + 1)
				require.NoError(t, tk.AXPYInto(acc, 1, y, acc)) // reads y after the foreign write
				require.NoError(t, tk.Fill(x, float64(it+2)))   // rewrites x after the foreign read
			}
			got, err := acc.Float32s()
			require.NoError(t, err)
			for i, v := range got {
				require.Equal(t, want, v, "element %d", i)
			}
			require.NoError(t, tk.Close())
		})
	}
}
