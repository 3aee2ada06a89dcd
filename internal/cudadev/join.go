package cudadev

import "github.com/rocsync/rocsync/driver"

var _ driver.StreamJoiner = (*Device)(nil)

// JoinStreams makes CUDA stream waiter wait for the work enqueued on CUDA
// stream signaler so far (an event from the device's pool, in its primary
// context).
func (d *Device) JoinStreams(waiter, signaler uintptr) error {
	return d.events.Join(waiter, signaler)
}
