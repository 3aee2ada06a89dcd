package kernels

import (
	"encoding/binary"
	"math"
)

// Every kernel has the same OpenCL signature,
//
//	kernel void rocsync_<op>_<dt>(global T* out, global const T* a,
//	                              global const T* b, T alpha, ulong n)
//
// so one kernarg layout serves all 24 kernels. The offsets below follow the
// AMDGPU kernarg rules (each argument aligned to its size) and are checked
// against the metadata of every embedded code object by the tests.
const (
	OffsetOut   = 0  // global T*, 8 bytes
	OffsetA     = 8  // global const T*, 8 bytes
	OffsetB     = 16 // global const T*, 8 bytes
	OffsetAlpha = 24 // T: 4 bytes for f32 (bytes 28..31 are padding), 8 for f64
	OffsetN     = 32 // ulong, 8 bytes

	// KernargSize is the size of the kernarg segment of every kernel. The
	// kernels have no hidden arguments (they are built without device
	// libraries), so nothing beyond these 40 bytes needs filling.
	KernargSize = 40

	// KernargAlign is the alignment to allocate kernarg memory with. The
	// code objects ask for 8; AQL dispatch wants the kernarg address 16-byte
	// aligned, which satisfies both.
	KernargAlign = 16
)

// Argument value kinds, as spelled in the AMDGPU metadata (.value_kind).
const (
	KindGlobalBuffer = "global_buffer"
	KindByValue      = "by_value"
)

// ArgSpec describes one kernel argument of the shared layout.
type ArgSpec struct {
	Name   string // the OpenCL parameter name
	Offset uint32 // byte offset in the kernarg segment
	Kind   string // KindGlobalBuffer or KindByValue
	// DTypeSized marks alpha, whose size is that of the kernel's element
	// type; every other argument is 8 bytes.
	DTypeSized bool
}

// Size returns the argument's size in bytes in a kernel of element type dt.
func (s ArgSpec) Size(dt DType) uint32 {
	if s.DTypeSized {
		return uint32(dt.Size())
	}
	return 8
}

// Layout lists the kernel arguments in order.
var Layout = []ArgSpec{
	{Name: "out", Offset: OffsetOut, Kind: KindGlobalBuffer},
	{Name: "a", Offset: OffsetA, Kind: KindGlobalBuffer},
	{Name: "b", Offset: OffsetB, Kind: KindGlobalBuffer},
	{Name: "alpha", Offset: OffsetAlpha, Kind: KindByValue, DTypeSized: true},
	{Name: "n", Offset: OffsetN, Kind: KindByValue},
}

// Args are the arguments of one kernel launch. Out, A and B are device
// addresses; A and B may be 0 when the op does not read them (see
// Op.Reads). Alpha is converted to float32 for F32 kernels. N is the element
// count.
type Args struct {
	Out, A, B uint64
	Alpha     float64
	N         uint64
}

// Encode writes the kernarg segment for a kernel of element type dt into
// dst[:KernargSize], little-endian, including zeroed padding, so reused
// kernarg memory carries nothing stale. It panics if len(dst) < KernargSize or dt is invalid.
// It does not allocate: it runs once per dispatch.
func (a *Args) Encode(dst []byte, dt DType) {
	dst = dst[:KernargSize:KernargSize] // one bounds check, and panics early if short
	le := binary.LittleEndian
	le.PutUint64(dst[OffsetOut:], a.Out)
	le.PutUint64(dst[OffsetA:], a.A)
	le.PutUint64(dst[OffsetB:], a.B)
	switch dt {
	case F32:
		le.PutUint32(dst[OffsetAlpha:], math.Float32bits(float32(a.Alpha)))
		le.PutUint32(dst[OffsetAlpha+4:], 0)
	case F64:
		le.PutUint64(dst[OffsetAlpha:], math.Float64bits(a.Alpha))
	default:
		panic("kernels: Args.Encode: invalid DType")
	}
	le.PutUint64(dst[OffsetN:], a.N)
}

// DecodeArgs reads a kernarg segment written by Encode (or by anyone else
// following Layout). It panics if len(src) < KernargSize or dt is invalid. The emulator uses
// it to see what a dispatch asked for.
func DecodeArgs(src []byte, dt DType) Args {
	src = src[:KernargSize:KernargSize]
	le := binary.LittleEndian
	args := Args{
		Out: le.Uint64(src[OffsetOut:]),
		A:   le.Uint64(src[OffsetA:]),
		B:   le.Uint64(src[OffsetB:]),
		N:   le.Uint64(src[OffsetN:]),
	}
	switch dt {
	case F32:
		args.Alpha = float64(math.Float32frombits(le.Uint32(src[OffsetAlpha:])))
	case F64:
		args.Alpha = math.Float64frombits(le.Uint64(src[OffsetAlpha:]))
	default:
		panic("kernels: DecodeArgs: invalid DType")
	}
	return args
}
