package rocsync

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/syncstate"
)

// BenchmarkCopyBandwidth measures host→device and device→host copies of
// 1, 16 and 256 MiB through rocsync against the raw driver, in one
// process, the paths run alternately at each size. Each copy is taken to
// completion before the next, so MB/s is what one copy at a time
// achieves, latency included:
//
//   - rocsync: Task.Upload from a Go slice, then a blocking wait for the
//     upload's last copy op (what Pending.Wait does for a download);
//     Task.Download into a Go slice, then Pending.Wait. Both go through
//     pooled pinned staging, chunked and overlapped, and the op path;
//   - rocsync+sync: Task.Upload, then Task.Synchronize (which, under a
//     bounded WaitTimeout, polls the stream);
//   - raw-pinned: the driver's asynchronous copy from pinned memory on a
//     stream of its own, then a stream synchronize (cuMemcpyHtoDAsync,
//     cuStreamSynchronize; hipMemcpyAsync on the emulator): the DMA alone;
//   - raw-pageable: the driver's synchronous copy from the same Go slice
//     rocsync copies from (cuMemcpyHtoD/DtoH_v2; hipMemcpy on the
//     emulator), which stages through the driver's own pinned buffers: what
//     a program without rocsync gets from Go memory;
//   - bounce/memcpy: one goroutine's CPU copy between the slice and pinned
//     memory, the cost rocsync's staging splits over goroutines and
//     overlaps with the DMA.
//
// With ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda it runs on the NVIDIA GPU;
// otherwise on the emulator, whose numbers are CPU memcpy, not GPU numbers
// (the sub-benchmark names say which).
func BenchmarkCopyBandwidth(b *testing.B) {
	backend, name := Emulator, "emulator"
	if testenv.OnCUDA() {
		backend, name = CUDA, "cuda"
	}
	d, err := Open(Options{Backend: backend, LogLevel: LogOff})
	must(b, err)
	defer d.Close()
	raw, err := newRawCopier(d, 256<<20)
	must(b, err)
	defer raw.close()
	tk, err := d.NewTask()
	must(b, err)
	defer tk.Close()
	for _, size := range []int{1 << 20, 16 << 20, 256 << 20} {
		buf, err := d.NewBuffer(size)
		must(b, err)
		host := make([]byte, size)
		for i := range host {
			host[i] = byte(i)
		}
		label := fmt.Sprintf("%dMiB", size>>20)
		hostPtr := unsafe.Pointer(unsafe.SliceData(host))
		lib := tk.drv.Timeline(driver.LaneLibrary)
		upload := func() error {
			if err := tk.Upload(buf, host); err != nil {
				return err
			}
			return waitCopy(context.Background(), syncstate.Fence{TL: lib, Ticket: lib.LastTicket()})
		}
		uploadSync := func() error {
			if err := tk.Upload(buf, host); err != nil {
				return err
			}
			return tk.Synchronize()
		}
		download := func() error {
			p, err := tk.Download(buf, host)
			if err != nil {
				return err
			}
			return p.Wait(context.Background())
		}
		type path struct {
			name string
			copy func() error
		}
		for _, dir := range []struct {
			name  string
			paths []path
		}{
			{"HtoD", []path{
				{"raw-pinned", func() error { return raw.htod(uint64(size)) }},
				{"raw-pageable", func() error { return raw.htodPageable(hostPtr, uint64(size)) }},
				{"rocsync", upload},
				{"rocsync+sync", uploadSync},
			}},
			{"DtoH", []path{
				{"raw-pinned", func() error { return raw.dtoh(uint64(size)) }},
				{"raw-pageable", func() error { return raw.dtohPageable(hostPtr, uint64(size)) }},
				{"rocsync", download},
			}},
			// The bounce alone: one goroutine's CPU copy between a Go slice
			// and pinned memory.
			{"bounce", []path{{"memcpy", func() error { copy(unsafe.Slice((*byte)(raw.host), size), host); return nil }}}},
		} {
			for _, p := range dir.paths {
				b.Run(name+"/"+dir.name+"/"+label+"/"+p.name, func(b *testing.B) {
					must(b, p.copy()) // the staging slot and the pinned pages exist before timing
					b.SetBytes(int64(size))
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						must(b, p.copy())
					}
				})
			}
		}
		must(b, buf.Free())
	}
}

// rawCopier copies between pinned host memory and device memory with the
// driver's own asynchronous copies on a stream of its own, synchronizing
// that stream after each.
type rawCopier struct {
	htod, dtoh   func(size uint64) error
	htodPageable func(src unsafe.Pointer, size uint64) error
	dtohPageable func(dst unsafe.Pointer, size uint64) error
	close        func()
	host         unsafe.Pointer // the pinned buffer

}

func newRawCopier(d *Device, size uint64) (*rawCopier, error) {
	if h, _, ok := rocmLibraries(d); ok {
		return newRawHIPCopier(h, size)
	}
	return newRawCUDACopier(size)
}

func newRawHIPCopier(h hip.Runtime, size uint64) (*rawCopier, error) {
	const dev = 0
	s, err := h.StreamCreate(dev, 0)
	if err != nil {
		return nil, err
	}
	dptr, err := h.Malloc(dev, size)
	if err != nil {
		return nil, err
	}
	host, err := h.HostMalloc(size)
	if err != nil {
		return nil, err
	}
	return &rawCopier{
		host:         host,
		htodPageable: func(src unsafe.Pointer, n uint64) error { return h.MemcpyHtoD(dev, dptr, src, n) },
		dtohPageable: func(dst unsafe.Pointer, n uint64) error { return h.MemcpyDtoH(dev, dst, dptr, n) },
		htod: func(n uint64) error {
			if err := h.MemcpyHtoDAsync(dptr, host, n, s); err != nil {
				return err
			}
			return h.StreamSynchronize(s)
		},
		dtoh: func(n uint64) error {
			if err := h.MemcpyDtoHAsync(host, dptr, n, s); err != nil {
				return err
			}
			return h.StreamSynchronize(s)
		},
		close: func() {
			_ = h.HostFree(host)
			_ = h.Free(dev, dptr)
			_ = h.StreamDestroy(s)
		},
	}, nil
}

// newRawCUDACopier uses device 0's primary context, the one rocsync's CUDA
// backend runs in.
func newRawCUDACopier(size uint64) (*rawCopier, error) {
	lib, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	if err := lib.Init(); err != nil {
		return nil, err
	}
	dev, err := lib.DeviceGet(0)
	if err != nil {
		return nil, err
	}
	c, err := lib.PrimaryCtxRetain(dev)
	if err != nil {
		return nil, err
	}
	s, err := c.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	dptr, err := c.MemAlloc(size)
	if err != nil {
		return nil, err
	}
	var host unsafe.Pointer
	if host, err = c.MemHostAlloc(size); err != nil {
		return nil, err
	}
	return &rawCopier{
		host:         host,
		htodPageable: func(src unsafe.Pointer, n uint64) error { return c.MemcpyHtoD(dptr, src, n) },
		dtohPageable: func(dst unsafe.Pointer, n uint64) error { return c.MemcpyDtoH(dst, dptr, n) },
		htod: func(n uint64) error {
			if err := c.MemcpyHtoDAsync(dptr, host, n, s); err != nil {
				return err
			}
			return c.StreamSynchronize(s)
		},
		dtoh: func(n uint64) error {
			if err := c.MemcpyDtoHAsync(host, dptr, n, s); err != nil {
				return err
			}
			return c.StreamSynchronize(s)
		},
		close: func() {
			_ = c.MemFreeHost(host)
			_ = c.MemFree(dptr)
			_ = c.StreamDestroy(s)
			_ = c.Release()
		},
	}, nil
}
