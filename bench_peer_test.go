package rocsync

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/testenv"
)

// peerBenchBackend is the CUDA driver with ROCSYNC_GPU=1
// ROCSYNC_BACKEND=cuda, the emulator (two GPUs) otherwise.
func peerBenchBackend() (Backend, string) {
	if testenv.OnCUDA() {
		return CUDA, "cuda"
	}
	return Emulator, "emulator"
}

// BenchmarkCopyPeer measures copies from GPU 0 to GPU 1 of 1, 16 and 256
// MiB: rocsync's Task.CopyPeer (direct, and forced through pinned host
// memory) against the raw driver on a stream of its own (cuMemcpyPeerAsync
// after cuCtxEnablePeerAccess; for the staged path cuMemcpyDtoHAsync on
// GPU 0 then cuMemcpyHtoDAsync on GPU 1, ordered by an event). Each copy
// is taken to completion before the next (Task.Synchronize,
// cuStreamSynchronize), so MB/s is one copy at a time, latency included.
//
// With ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda it needs two NVIDIA GPUs (it
// skips otherwise); without it the emulator's numbers are CPU memcpy, not
// GPU numbers (the sub-benchmark names say which).
func BenchmarkCopyPeer(b *testing.B) {
	backend, name := peerBenchBackend()
	o := Options{Backend: backend, LogLevel: LogOff, Emulator: EmulatorOptions{Devices: 2}}
	devs, err := OpenAll(o)
	must(b, err)
	defer closeDevices(devs)
	if len(devs) < 2 {
		b.Skipf("BenchmarkCopyPeer needs two GPUs, %d present", len(devs))
	}
	o.test.StagePeerCopies = true
	staged, err := OpenAll(o)
	must(b, err)
	defer closeDevices(staged)
	const maxSize = 256 << 20
	raw, err := newRawPeerCopier(devs[0], maxSize)
	must(b, err)
	defer raw.close()
	for _, size := range []int{1 << 20, 16 << 20, maxSize} {
		label := fmt.Sprintf("%dMiB", size>>20)
		for _, path := range []struct {
			name string
			devs []*Device
			raw  func(uint64) error
		}{{"direct", devs, raw.direct}, {"staged", staged, raw.staged}} {
			src, err := path.devs[0].NewBuffer(size)
			must(b, err)
			dst, err := path.devs[1].NewBuffer(size)
			must(b, err)
			tk, err := path.devs[1].NewTask()
			must(b, err)
			rocsync := func() error {
				if err := tk.CopyPeer(dst, src); err != nil {
					return err
				}
				return tk.Synchronize()
			}
			for _, impl := range []struct {
				name string
				copy func() error
			}{{"raw", func() error { return path.raw(uint64(size)) }}, {"rocsync", rocsync}} {
				b.Run(name+"/"+path.name+"/"+label+"/"+impl.name, func(b *testing.B) {
					must(b, impl.copy()) // peer access, staging and streams exist before timing
					b.SetBytes(int64(size))
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						must(b, impl.copy())
					}
				})
			}
			must(b, tk.Close())
			must(b, src.Free())
			must(b, dst.Free())
		}
	}
}

func closeDevices(devs []*Device) {
	for _, d := range devs {
		_ = d.Close()
	}
}

// rawPeerCopier copies from GPU 0 to GPU 1 with the driver's own calls.
type rawPeerCopier struct {
	direct, staged func(size uint64) error
	close          func()
}

func newRawPeerCopier(d *Device, size uint64) (*rawPeerCopier, error) {
	if h, _, ok := rocmLibraries(d); ok {
		return newRawHIPPeerCopier(h, size)
	}
	return newRawCUDAPeerCopier(size)
}

func newRawHIPPeerCopier(h hip.Runtime, size uint64) (*rawPeerCopier, error) {
	pr, ok := h.(hip.PeerRuntime)
	if !ok {
		return nil, errors.New("the HIP runtime has no peer copies")
	}
	var he *hip.Error
	if err := pr.DeviceEnablePeerAccess(1, 0); err != nil && !(errors.As(err, &he) && he.Code == hip.ErrorPeerAccessAlreadyEnabled) {
		return nil, err
	}
	s0, err := h.StreamCreate(0, 0)
	if err != nil {
		return nil, err
	}
	s1, err := h.StreamCreate(1, 0)
	if err != nil {
		return nil, err
	}
	src, err := h.Malloc(0, size)
	if err != nil {
		return nil, err
	}
	dst, err := h.Malloc(1, size)
	if err != nil {
		return nil, err
	}
	host, err := h.HostMalloc(size)
	if err != nil {
		return nil, err
	}
	return &rawPeerCopier{
		direct: func(n uint64) error {
			if err := pr.MemcpyPeerAsync(dst, 1, src, 0, n, s1); err != nil {
				return err
			}
			return h.StreamSynchronize(s1)
		},
		staged: func(n uint64) error {
			if err := h.MemcpyDtoHAsync(host, src, n, s0); err != nil {
				return err
			}
			if err := h.StreamSynchronize(s0); err != nil {
				return err
			}
			if err := h.MemcpyHtoDAsync(dst, host, n, s1); err != nil {
				return err
			}
			return h.StreamSynchronize(s1)
		},
		close: func() {
			_ = h.HostFree(host)
			_ = h.Free(0, src)
			_ = h.Free(1, dst)
			_ = h.StreamDestroy(s0)
			_ = h.StreamDestroy(s1)
		},
	}, nil
}

// newRawCUDAPeerCopier uses the two GPUs' primary contexts, the ones
// rocsync's CUDA backend runs in.
func newRawCUDAPeerCopier(size uint64) (*rawPeerCopier, error) {
	lib, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	if err := lib.Init(); err != nil {
		return nil, err
	}
	var ctx [2]*cuda.Ctx
	var strm [2]cuda.Stream
	for i := range ctx {
		dev, err := lib.DeviceGet(i)
		if err != nil {
			return nil, err
		}
		if ctx[i], err = lib.PrimaryCtxRetain(dev); err != nil {
			return nil, err
		}
		if strm[i], err = ctx[i].StreamCreate(cuda.StreamNonBlocking); err != nil {
			return nil, err
		}
	}
	var ce *cuda.Error
	if err := ctx[1].EnablePeerAccess(ctx[0]); err != nil && !(errors.As(err, &ce) && ce.Code == cuda.ErrorPeerAccessAlreadyEnabled) {
		return nil, err
	}
	src, err := ctx[0].MemAlloc(size)
	if err != nil {
		return nil, err
	}
	dst, err := ctx[1].MemAlloc(size)
	if err != nil {
		return nil, err
	}
	var host unsafe.Pointer
	if host, err = ctx[0].MemHostAlloc(size); err != nil {
		return nil, err
	}
	ev, err := ctx[0].EventCreate(cuda.EventDisableTiming)
	if err != nil {
		return nil, err
	}
	return &rawPeerCopier{
		direct: func(n uint64) error {
			if err := ctx[1].MemcpyPeerAsync(dst, ctx[1], src, ctx[0], n, strm[1]); err != nil {
				return err
			}
			return ctx[1].StreamSynchronize(strm[1])
		},
		staged: func(n uint64) error {
			if err := ctx[0].MemcpyDtoHAsync(host, src, n, strm[0]); err != nil {
				return err
			}
			if err := ctx[0].EventRecord(ev, strm[0]); err != nil {
				return err
			}
			if err := ctx[1].StreamWaitEvent(strm[1], ev); err != nil {
				return err
			}
			if err := ctx[1].MemcpyHtoDAsync(dst, host, n, strm[1]); err != nil {
				return err
			}
			return ctx[1].StreamSynchronize(strm[1])
		},
		close: func() {
			_ = ctx[0].EventDestroy(ev)
			_ = ctx[0].MemFreeHost(host)
			_ = ctx[0].MemFree(src)
			_ = ctx[1].MemFree(dst)
			for i := range ctx {
				_ = ctx[i].StreamDestroy(strm[i])
				_ = ctx[i].Release()
			}
		},
	}, nil
}

// Large copies between GPUs arrive whole, direct and staged, both ways:
// a pattern written on one device is read back from the other.
func TestCopyPeerLarge(t *testing.T) {
	size := 1 << 20
	if gpuRun() {
		size = 64 << 20
	}
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			devs := openPeers(t, DeviceSide, 2, func(o *Options) { o.test.StagePeerCopies = staged })
			want := make([]byte, size)
			for i := range want {
				want[i] = byte(i*7 + i>>16)
			}
			a, err := devs[0].NewBuffer(size)
			require.NoError(t, err)
			b, err := devs[1].NewBuffer(size)
			require.NoError(t, err)
			back, err := devs[0].NewBuffer(size)
			require.NoError(t, err)
			t0, t1 := devs[0].DefaultTask(), devs[1].DefaultTask()
			require.NoError(t, t0.Upload(a, want))
			require.NoError(t, t1.CopyPeer(b, a))
			require.NoError(t, t0.CopyPeer(back, b))
			for _, x := range []*Buffer{b, back} {
				got, err := x.Bytes()
				require.NoError(t, err)
				require.True(t, string(got) == string(want), "%v differs", x)
			}
			for _, d := range devs {
				require.Empty(t, d.Hazards())
			}
		})
	}
}
