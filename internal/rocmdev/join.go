package rocmdev

import "github.com/rocsync/rocsync/driver"

var _ driver.StreamJoiner = (*Device)(nil)

// JoinStreams makes HIP stream waiter wait for the work enqueued on HIP
// stream signaler so far (an event from the device's pool).
func (d *Device) JoinStreams(waiter, signaler uintptr) error {
	return d.events.Join(waiter, signaler)
}
