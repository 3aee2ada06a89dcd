package rocsync

import (
	"fmt"

	"github.com/rocsync/rocsync/kernels"
)

// Errors name the op the user called and its operands as the user wrote
// them: Add(a, b) with mismatched inputs reports a and b, not an input and
// the output that Add made for it.

// operandNames are the parameter names of an elementwise op's inputs.
func operandNames(op kernels.Op) (string, string) {
	switch op {
	case kernels.AXPY:
		return "x", "y"
	case kernels.ReLUGrad:
		return "a", "grad"
	}
	return "a", "b"
}

// operandsAgree checks that an elementwise op's inputs match each other,
// then the output: reads holds the inputs the op reads, in parameter
// order.
func operandsAgree(op string, k kernels.Op, out *Array, reads []*Array) error {
	first, second := operandNames(k)
	names := [2]string{first, second}
	if !readsFirst(k) {
		names[0] = second // only the second parameter is read
	}
	if len(reads) == 2 {
		a, b := reads[0], reads[1]
		if a.dtype != b.dtype {
			return newErr(op, ErrDType, "%s is %s, %s is %s", names[0], a.dtype, names[1], b.dtype)
		}
		if a.rows != b.rows || a.cols != b.cols {
			return newErr(op, ErrShape, "%s is %dx%d, %s is %dx%d", names[0], a.rows, a.cols, names[1], b.rows, b.cols)
		}
	}
	for i, x := range reads {
		if x.dtype != out.dtype {
			return newErr(op, ErrDType, "out is %s, %s is %s", out.dtype, names[i], x.dtype)
		}
		if x.rows != out.rows || x.cols != out.cols {
			return newErr(op, ErrShape, "out is %dx%d, %s is %dx%d", out.rows, out.cols, names[i], x.rows, x.cols)
		}
	}
	return nil
}

func readsFirst(k kernels.Op) bool {
	a, _ := k.Reads()
	return a
}

// mismatch is the error of an array used on a task of another device. Two
// Opens of one GPU are two devices, which the message tells apart by their
// open numbers.
func mismatch(op string, a *Array, dev *Device) error {
	if a.dev.index == dev.index {
		return newErr(op, ErrDeviceMismatch, "%v belongs to %v, the task to %v: each Open makes a separate device, and arrays do not move between them",
			a, a.dev, dev)
	}
	return newErr(op, ErrDeviceMismatch, "%v used on a task of %v", a, dev)
}

// String names the device: its GPU index and which Open made it, such as
// "gpu0 (open #2)".
func (d *Device) String() string {
	if d == nil {
		return "Device(nil)"
	}
	return fmt.Sprintf("gpu%d (open #%d)", d.index, d.openID)
}

// allocFor allocates the new array an op returns, in the op's name: Add
// on a closed device says Add, not Empty.
func (d *Device) allocFor(op string, rows, cols int, dt DType) (*Array, error) {
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	return d.alloc(op, rows, cols, dt)
}
