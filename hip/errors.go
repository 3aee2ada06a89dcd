package hip

import (
	"errors"
	"fmt"
)

// ErrNoDevice is matched by errors.Is when HIP finds no AMD GPU
// (hipGetDeviceCount returns hipErrorNoDevice, or a count of zero).
var ErrNoDevice = errors.New("no AMD GPU found")

// noDevice wraps both ErrNoDevice and the *Error that HIP returned, so that
// errors.Is(err, ErrNoDevice) and errors.As(err, &*Error) both work. The
// message reads "no AMD GPU found (hip: hipGetDeviceCount: error 100
// hipErrorNoDevice)".
func noDevice(herr *Error) error {
	if herr == nil {
		return ErrNoDevice
	}
	return fmt.Errorf("%w (%w)", ErrNoDevice, herr)
}
