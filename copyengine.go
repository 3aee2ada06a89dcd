package rocsync

import (
	"context"
	"runtime"
	"sync"
	"unsafe"

	"github.com/rocsync/rocsync/syncstate"
)

// The two host-side costs of a staged copy, kept off the critical path:
//
//   - the CPU copy between the caller's memory and pinned staging memory,
//     which one goroutine does at a fraction of the machine's memory
//     bandwidth (5.7 GB/s on the H100 host against the DMA's 52 GB/s), is
//     split over a few long-lived worker goroutines;
//   - the host wait for a copy is the stream's own bounded wait
//     (waitCopy), a blocking runtime call on a helper goroutine.
//
// The copy allocates nothing once its goroutines exist.

const (
	// parallelCopyMin is the smallest copy split over several goroutines:
	// below it, handing out the shares costs more than it saves.
	parallelCopyMin = 1 << 20
	// parallelCopyShare is the smallest share of one goroutine.
	parallelCopyShare = 256 << 10
	// maxCopyWorkers bounds the goroutines of one copy: a few saturate a
	// socket's memory bandwidth.
	maxCopyWorkers = 8
)

type copyJob struct {
	dst, src unsafe.Pointer
	n        uint64
	wg       *sync.WaitGroup
}

var copyWorkers struct {
	once sync.Once
	n    int
	jobs chan copyJob
}

func startCopyWorkers() {
	copyWorkers.n = min(runtime.GOMAXPROCS(0), maxCopyWorkers)
	copyWorkers.jobs = make(chan copyJob, 4*maxCopyWorkers)
	for range copyWorkers.n - 1 {
		go func() {
			for j := range copyWorkers.jobs {
				copyBytes(j.dst, j.src, j.n)
				j.wg.Done()
			}
		}()
	}
}

func copyBytes(dst, src unsafe.Pointer, n uint64) {
	if n != 0 {
		copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
	}
}

// hostCopy copies n bytes from src to dst, with up to maxCopyWorkers
// goroutines (the caller's included) for large copies. wg belongs to the
// caller (a staging slot's): passing it costs no allocation.
func hostCopy(dst, src unsafe.Pointer, n uint64, wg *sync.WaitGroup) {
	parts := 1
	if n >= parallelCopyMin {
		copyWorkers.once.Do(startCopyWorkers)
		parts = int(min(uint64(copyWorkers.n), n/parallelCopyShare))
	}
	if parts <= 1 {
		copyBytes(dst, src, n)
		return
	}
	// Share i is [bound(i), bound(i+1)), cache-line aligned.
	bound := func(i int) uint64 {
		if i == parts {
			return n
		}
		return (n * uint64(i) / uint64(parts)) &^ 63
	}
	wg.Add(parts - 1)
	for i := 1; i < parts; i++ {
		lo, hi := bound(i), bound(i+1)
		copyWorkers.jobs <- copyJob{unsafe.Add(dst, lo), unsafe.Add(src, lo), hi - lo, wg}
	}
	copyBytes(dst, src, bound(1))
	wg.Wait()
}

// ticketPinner fixes the event a later wait for a ticket waits on, without
// a closure (stream.Stream).
type ticketPinner interface {
	PinTicket(t uint64) (uintptr, error)
	UnpinTicket(ev uintptr)
}

// waitCopy waits on the host for a copy's fence, bounded by ctx (nil for
// none) and by the timeline's own timeout. A stream's bounded wait is
// already a blocking runtime call on a helper goroutine after a short
// spin (stream/blockwait.go), so a copy's completion is seen at once and
// the wait allocates nothing; past the bound it returns a
// *syncstate.TimeoutError (or ctx's error, wrapped), the GPU work going on.
func waitCopy(ctx context.Context, f syncstate.Fence) error {
	if f.Done() {
		return f.Err()
	}
	return syncstate.WaitHostContext(ctx, f)
}
