package rocsync

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/syncstate"
)

// The two host-side costs of a staged copy, kept off the critical path:
//
//   - the CPU copy between the caller's memory and pinned staging memory,
//     which one goroutine does at a fraction of the machine's memory
//     bandwidth (5.7 GB/s on an H100 host against the DMA's 52 GB/s), is
//     split over a few long-lived worker goroutines;
//   - the host wait for a copy, which a bounded stream wait would do by
//     polling (pauses up to 200 µs per look), is one blocking runtime call
//     on a long-lived helper goroutine, the caller giving up on a timer.
//
// Neither allocates once its goroutines exist.

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

// blockingTimeline is a timeline that can wait for a ticket in one
// blocking runtime call (stream.Stream).
type blockingTimeline interface {
	WaitHostBlocking(t uint64) error
	WaitTimeout() time.Duration
}

// ticketPinner fixes the event a later wait for a ticket waits on, without
// a closure (stream.Stream).
type ticketPinner interface {
	PinTicket(t uint64) (uintptr, error)
	UnpinTicket(ev uintptr)
}

// hostWaiter is a helper goroutine that makes blocking waits for copies.
// It is the same idea as stream/blockwait.go's bounded waits, kept apart on
// purpose: the stream's bounded wait first spins on queries for 100 µs,
// and the chunks' waits would spin while the copies of the next chunks
// are submitted; at 256 MiB on an H100 that makes device-to-host copies
// slower (11.4–14.5 against 17.0 GB/s).
type hostWaiter struct {
	req   chan hostWaitReq
	done  chan error
	timer *time.Timer
}

type hostWaitReq struct {
	tl     blockingTimeline
	ticket uint64
}

var hostWaiters struct {
	mu   sync.Mutex
	free []*hostWaiter
}

func getHostWaiter() *hostWaiter {
	hostWaiters.mu.Lock()
	if n := len(hostWaiters.free); n > 0 {
		w := hostWaiters.free[n-1]
		hostWaiters.free = hostWaiters.free[:n-1]
		hostWaiters.mu.Unlock()
		return w
	}
	hostWaiters.mu.Unlock()
	w := &hostWaiter{req: make(chan hostWaitReq), done: make(chan error, 1), timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	go func() {
		for r := range w.req {
			w.done <- r.tl.WaitHostBlocking(r.ticket)
		}
	}()
	return w
}

func putHostWaiter(w *hostWaiter) {
	hostWaiters.mu.Lock()
	hostWaiters.free = append(hostWaiters.free, w)
	hostWaiters.mu.Unlock()
}

// waitCopy waits on the host for a copy's fence: one blocking runtime call
// (on a helper goroutine when the wait is bounded by the timeline's
// timeout or by ctx, nil for none). Past the bound it returns a
// *syncstate.TimeoutError (or ctx's error, wrapped) and the helper is
// handed back once its call returns. Timelines that cannot block wait as
// any host wait does.
func waitCopy(ctx context.Context, f syncstate.Fence) error {
	if f.Done() {
		return f.Err()
	}
	bt, ok := f.TL.(blockingTimeline)
	if !ok {
		return syncstate.WaitHostContext(ctx, f)
	}
	timeout := bt.WaitTimeout()
	cancellable := syncstate.Cancellable(ctx)
	if timeout <= 0 && !cancellable {
		return bt.WaitHostBlocking(f.Ticket)
	}
	if cancellable && ctx.Err() != nil {
		return fmt.Errorf("waiting for %v: %w", f, ctx.Err())
	}
	w := getHostWaiter()
	w.req <- hostWaitReq{bt, f.Ticket}
	var expired <-chan time.Time
	if timeout > 0 {
		w.timer.Reset(timeout)
		expired = w.timer.C
	}
	var cancelled <-chan struct{}
	if cancellable {
		cancelled = ctx.Done()
	}
	select {
	case err := <-w.done:
		w.timer.Stop()
		putHostWaiter(w)
		return err
	case <-expired:
		go reclaimHostWaiter(w)
		return &syncstate.TimeoutError{Fence: f, After: timeout}
	case <-cancelled:
		w.timer.Stop()
		go reclaimHostWaiter(w)
		return fmt.Errorf("waiting for %v: %w", f, ctx.Err())
	}
}

// reclaimHostWaiter hands a waiter whose caller gave up back once its
// blocking call has returned (the GPU work goes on; it ends some time).
func reclaimHostWaiter(w *hostWaiter) {
	<-w.done
	putHostWaiter(w)
}
