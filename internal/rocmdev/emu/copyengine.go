package emu

import (
	"fmt"
	"sync"
	"time"
)

// copyEngine is ROCr's copy queue of one direction on one GPU, which every
// HIP stream's copies between host and device memory and every synchronous
// hipMemcpy of that direction go through, in the order they were made.
//
// HIP hands such a copy to ROCr when the stream's command is submitted,
// with the stream's pending work as its dependency (clr rocblit.cpp,
// KernelBlitManager::copyBuffer and DmaBlitManager::hsaCopy), and ROCr
// queues it on the direction's queue behind a barrier-AND packet for that
// dependency, or poll packets on an SDMA ring (amd_gpu_agent.cpp,
// GpuAgent::InitDma: one blit per direction per GPU;
// amd_blit_kernel.cpp, BlitKernel::SubmitLinearCopyCommand). So a copy
// whose stream waits for something blocks every later copy of its
// direction, a synchronous one included, until that has happened: a
// synchronous copy made by what the stream waits for (a host function the
// stream waits for on the device) never ends.
//
// The model: an asynchronous copy takes a place when it is enqueued and
// gives it back when its stream has run it (or dropped it); a synchronous
// copy waits until every place taken before it has been given back, and
// past Options.CopyEngineWait fails as the deadlock it is.
type copyEngine struct {
	mu      sync.Mutex
	cond    *sync.Cond
	issued  uint64
	pending []uint64 // places taken and not given back
}

// Copy directions, the index of device.copies.
const (
	copyHtoD = 0
	copyDtoH = 1
)

func (e *copyEngine) lockedInit() {
	if e.cond == nil {
		e.cond = sync.NewCond(&e.mu)
	}
}

// take returns the place of an asynchronous copy being enqueued.
func (e *copyEngine) take() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lockedInit()
	e.issued++
	e.pending = append(e.pending, e.issued)
	return e.issued
}

// give gives a place back: the copy has run, or never will.
func (e *copyEngine) give(place uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, p := range e.pending {
		if p == place {
			last := len(e.pending) - 1
			e.pending[i] = e.pending[last]
			e.pending = e.pending[:last]
			break
		}
	}
	e.cond.Broadcast()
}

// waitBehind waits until every asynchronous copy enqueued so far has run,
// for at most limit.
func (e *copyEngine) waitBehind(what string, limit time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lockedInit()
	target := e.issued
	ahead := func() bool {
		for _, p := range e.pending {
			if p <= target {
				return true
			}
		}
		return false
	}
	if !ahead() {
		return nil
	}
	expired := false
	t := time.AfterFunc(limit, func() {
		e.mu.Lock()
		expired = true
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	defer t.Stop()
	for ahead() {
		if expired {
			return fmt.Errorf("%s waited %v behind an asynchronous copy of its direction that has not run: ROCr queues every copy of a direction on one queue per GPU, and that copy's stream waits for something that has not happened (a host function the stream waits for, when the caller is that function, never returns: a deadlock)", what, limit)
		}
		e.cond.Wait()
	}
	return nil
}

// copyEngineWait is Options.CopyEngineWait or its default.
func (m *Machine) copyEngineWait() time.Duration {
	if m.opts.CopyEngineWait > 0 {
		return m.opts.CopyEngineWait
	}
	return 20 * time.Second
}
