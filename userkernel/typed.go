package userkernel

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"
)

// Element is a Go type a kernel's buffer can hold, for Slice: the OpenCL C
// scalar types char to ulong, float and double (and types defined on them).
type Element interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Slice returns the first n elements of the buffer argument a as a []T
// over the device memory mem maps (a reference's view of a kernel's
// pointer argument): reads and writes go to the buffer itself, with the
// access a says (a write-only or read-write buffer is writable). Where the
// kernel declares the buffer's element type (OpenCL's float* and the like,
// from the code object's metadata or the declaration), T must have its size
// and be of its class (floating-point or integer; signedness is not
// checked; a half buffer reads as uint16 bits): a []float32 view of an int* buffer is an error matching
// ErrKernelArgs, as is a scalar argument. A range mem does not map is
// mem's error.
func Slice[T Element](mem Memory, a Arg, n int) ([]T, error) {
	var zero T
	size := unsafe.Sizeof(zero)
	if a.kind != argBuffer {
		return nil, fmt.Errorf("%w: a %T view of %s, which is not a buffer", ErrKernelArgs, []T(nil), a)
	}
	if a.elemSize != 0 {
		class := ClassInteger
		if k := reflect.TypeFor[T]().Kind(); k == reflect.Float32 || k == reflect.Float64 {
			class = ClassFloat
		}
		half := a.elemClass == ClassFloat && a.elemSize == 2 && class == ClassInteger // raw half bits
		if uintptr(a.elemSize) != size || a.elemClass != class && !half {
			return nil, fmt.Errorf("%w: a %T view of %s, whose elements the kernel declares %d-byte %s", ErrKernelArgs,
				[]T(nil), a, a.elemSize, a.elemClass)
		}
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: a view of %d elements", ErrKernelArgs, n)
	}
	if n == 0 {
		return []T{}, nil
	}
	b, err := mem.Bytes(a.bits, uint64(n)*uint64(size), a.access.Writes())
	if err != nil {
		return nil, err
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(zero) != 0 {
		return nil, fmt.Errorf("%w: %s is not aligned for %T", ErrKernelArgs, a, zero)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// pointee is the element type of a pointer's metadata type name ("float*").
func pointee(typeName string) (scalarType, bool) {
	base, ok := strings.CutSuffix(strings.TrimSpace(typeName), "*")
	if !ok {
		return scalarType{}, false
	}
	base = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(base), "const "))
	if short, ok := unsignedNames[base]; ok {
		base = short
	}
	e, ok := openCLScalars[base]
	return e, ok
}
