package userkernel

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// fakeMemory maps device addresses to Go memory and records the writable
// views it hands out.
type fakeMemory struct {
	regions map[uint64][]byte
	writes  []uint64
}

func (m *fakeMemory) Bytes(ptr, size uint64, write bool) ([]byte, error) {
	for base, b := range m.regions {
		if ptr >= base && ptr+size <= base+uint64(len(b)) {
			if write {
				m.writes = append(m.writes, ptr)
			}
			return b[ptr-base : ptr-base+size], nil
		}
	}
	return nil, fmt.Errorf("address range [%#x, %#x) is not mapped", ptr, ptr+size)
}

// A reference reads its buffer arguments as slices of the element types
// the kernel declares, and its scalars as typed values; a view of another
// type, or of a scalar, is an error matching ErrKernelArgs.
func TestReferenceArgumentsAreTyped(t *testing.T) {
	src, err := OpenCL(saxpySource)
	require.NoError(t, err)
	img, err := noCompiler(t).Build(src, emulated)
	require.NoError(t, err)
	k, err := img.Kernel("saxpy")
	require.NoError(t, err)

	ys := []float32{1, 2, 3, 4}
	xs := []float32{10, 20, 30, 40}
	mem := &fakeMemory{regions: map[uint64][]byte{
		0x1000: unsafe.Slice((*byte)(unsafe.Pointer(&ys[0])), 16),
		0x2000: unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 16),
	}}
	block := make([]byte, k.ArgsSize)
	require.NoError(t, k.Pack(block, Grid1D(4, 4), []Arg{Buffer(0x1000, ReadWrite), Buffer(0x2000, Read), Float32(2), Uint32(4)}))
	args, err := k.Unpack(nil, block)
	require.NoError(t, err)

	n := int(args[3].Uint32())
	a := args[2].Float32()
	y, err := Slice[float32](mem, args[0], n)
	require.NoError(t, err)
	x, err := Slice[float32](mem, args[1], n)
	require.NoError(t, err)
	for i := range y {
		y[i] += a * x[i]
	}
	require.Equal(t, []float32{21, 42, 63, 84}, ys, "the view is the buffer itself")
	require.Equal(t, []uint64{0x1000}, mem.writes, "only the buffer the kernel writes is viewed writable")

	_, err = Slice[int32](mem, args[0], n)
	require.ErrorIs(t, err, ErrKernelArgs, "a float* buffer as int32")
	_, err = Slice[float64](mem, args[0], 2)
	require.ErrorIs(t, err, ErrKernelArgs, "a float* buffer as float64")
	_, err = Slice[float32](mem, args[2], 1)
	require.ErrorIs(t, err, ErrKernelArgs, "a scalar")
	_, err = Slice[float32](mem, args[0], -1)
	require.ErrorIs(t, err, ErrKernelArgs)
	_, err = Slice[float32](mem, args[0], 5)
	require.ErrorContains(t, err, "not mapped", "past the buffer: the memory's own error")
	empty, err := Slice[float32](mem, args[0], 0)
	require.NoError(t, err)
	require.Empty(t, empty)

	// A buffer whose element type is not recorded (PTX) takes any view.
	untyped := Buffer(0x1000, Read)
	u, err := Slice[uint32](mem, untyped, 1)
	require.NoError(t, err)
	require.Len(t, u, 1)

	require.Equal(t, int32(-3), Int32(-3).Int32())
	require.Equal(t, uint32(7), Uint64(1<<32|7).Uint32())
	require.Equal(t, float32(0.5), Float64(0.5).Float32())
}
