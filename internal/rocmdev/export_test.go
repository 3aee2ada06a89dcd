package rocmdev

import (
	"time"

	"github.com/rocsync/rocsync/queue"
)

// SetMemoryViolationGrace shortens memoryViolationGrace for a test.
func SetMemoryViolationGrace(d time.Duration) (restore func()) {
	old := memoryViolationGrace
	memoryViolationGrace = d
	return func() { memoryViolationGrace = old }
}

// Queues returns the device's HSA queues.
func (d *Device) Queues() []*queue.Queue { return d.queues.Queues() }

// HSAQueue returns the task's HSA queue, nil under Unified.
func (t *Task) HSAQueue() *queue.Queue { return t.st.Queue }
