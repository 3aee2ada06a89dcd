// Package tls holds rocsync's task-local state: the HSA queue, HIP stream
// and rocBLAS handle one task submits to, and the per-device pool its
// queues come from.
//
// Go has no goroutine-local storage, so a task is an explicit value that a
// goroutine carries; ops submitted through one task run in order, and ops of
// different tasks are ordered only where they share arrays.
package tls

import (
	"errors"
	"sync"

	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/stream"
)

// State is one task's resources on the ROCm stack.
type State struct {
	Queue  *queue.Queue   // where the task's kernels go (nil under Unified)
	Stream *stream.Stream // where its library calls go
	BLAS   rocblas.Handle // bound to Stream; 0 when rocBLAS is missing
}

// QueuePool shares a device's HSA queues among its tasks. Queues are scarce
// (about 128 per process), so the pool creates at most Max and, past that,
// hands out the least shared one. Sharing is safe: a shared queue is still
// in order, which the sync core sees as the same timeline.
type QueuePool struct {
	Max    int
	Create func(i int) (*queue.Queue, error)

	mu     sync.Mutex
	queues []*queue.Queue
	users  []int
	// retired[i] is set for a queue given back with work still in
	// flight (Retire): it is never handed out again.
	retired []bool
}

// Acquire returns a queue for a new task.
func (p *QueuePool) Acquire() (*queue.Queue, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	healthy := 0
	for i, u := range p.users {
		if p.queues[i].Err() != nil || p.retired[i] {
			// A broken queue takes no more work, and a retired one
			// may never finish what it holds: never hand them out.
			continue
		}
		healthy++
		if best < 0 || u < p.users[best] {
			best = i
		}
	}
	if (best < 0 || p.users[best] > 0) && healthy < max(p.Max, 1) {
		q, err := p.Create(len(p.queues))
		if err != nil {
			if best < 0 {
				return nil, err
			}
			// Out of queues: share one instead of failing.
		} else {
			p.queues = append(p.queues, q)
			p.users = append(p.users, 1)
			p.retired = append(p.retired, false)
			return q, nil
		}
	}
	p.users[best]++
	return p.queues[best], nil
}

// Release gives a task's queue back.
func (p *QueuePool) Release(q *queue.Queue) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.queues {
		if x == q && p.users[i] > 0 {
			p.users[i]--
		}
	}
}

// Queues returns every queue created so far.
// Retire gives q back without returning it to use: its work has not
// completed (a drain that ran out of time), and a task given it would
// queue behind work that may never end. The device's Close still closes
// it.
func (p *QueuePool) Retire(q *queue.Queue) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.queues {
		if x == q {
			if p.users[i] > 0 {
				p.users[i]--
			}
			p.retired[i] = true
		}
	}
}

func (p *QueuePool) Queues() []*queue.Queue {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*queue.Queue(nil), p.queues...)
}

// Close drains and destroys every queue.
func (p *QueuePool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, q := range p.queues {
		errs = append(errs, q.Close())
	}
	p.queues, p.users, p.retired = nil, nil, nil
	return errors.Join(errs...)
}
