package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// The CPU references compute what the kernels compute, over len(out)
// elements. For every op except exp they agree with the GPU bit for bit
// (NaN payloads aside): both sides round each multiply and add separately
// (the kernel source turns FP contraction off; here the explicit conversions
// forbid fusing, as the Go spec says), division and sqrt are correctly
// rounded on both, and relu is the same comparison. For exp the references
// use math.Exp, and the kernels a polynomial of their own (see
// src/elementwise.cl), so compare exp with a tolerance: for float64 about
// 15% of results differ, by 1 ulp and rarely 2 (math.Exp is not correctly
// rounded either); for float32 no difference showed up in 200,000 samples,
// but one remains possible where the two float64 values straddle a float32
// rounding boundary.
//
// An input that the op does not read (see Op.Reads) may be nil; one that it
// reads must have at least len(out) elements. out may be the same slice as
// a or b. The functions do not allocate.

// RefF32 computes op over float32 slices.
func RefF32(op Op, out, a, b []float32, alpha float32) {
	refFloat(op, out, a, b, alpha, expF32)
}

// RefF64 computes op over float64 slices.
func RefF64(op Op, out, a, b []float64, alpha float64) {
	refFloat(op, out, a, b, alpha, math.Exp)
}

func expF32(x float32) float32 { return float32(math.Exp(float64(x))) }

func refFloat[T float32 | float64](op Op, out, a, b []T, alpha T, exp func(T) T) {
	n := len(out)
	readsA, readsB := op.Reads()
	if readsA {
		a = a[:n] // panics here, not mid-way, if a is short
	}
	if readsB {
		b = b[:n]
	}
	switch op {
	case Mul:
		for i := range out {
			out[i] = a[i] * b[i]
		}
	case Add:
		for i := range out {
			out[i] = a[i] + b[i]
		}
	case Sub:
		for i := range out {
			out[i] = a[i] - b[i]
		}
	case Div:
		for i := range out {
			out[i] = a[i] / b[i]
		}
	case Scale:
		for i := range out {
			out[i] = alpha * a[i]
		}
	case AXPY:
		for i := range out {
			out[i] = T(alpha*a[i]) + b[i] // T(...) rounds the product: no fma
		}
	case Fill:
		for i := range out {
			out[i] = alpha
		}
	case Copy:
		copy(out, a)
	case Neg:
		for i := range out {
			out[i] = -a[i]
		}
	case Exp:
		for i := range out {
			out[i] = exp(a[i])
		}
	case Sqrt:
		for i := range out {
			// Rounding the float64 square root to float32 is correctly
			// rounded: 53 >= 2*24+2 bits rule out double-rounding errors.
			out[i] = T(math.Sqrt(float64(a[i])))
		}
	case ReLU:
		for i := range out {
			if x := a[i]; x > 0 {
				out[i] = x
			} else {
				out[i] = 0
			}
		}
	case ReLUGrad:
		for i := range out {
			if a[i] > 0 {
				out[i] = b[i]
			} else {
				out[i] = 0
			}
		}
	default:
		panic("kernels: invalid Op " + op.String())
	}
}

// RefBytes computes op over little-endian arrays of dt held in byte slices,
// as the emulator's device memory holds them. It processes
// len(out)/dt.Size() elements; trailing bytes of out are left alone. An input
// that op reads must be at least as long as out.
//
// Aligned slices on a little-endian host are reinterpreted in place with
// unsafe.Slice; otherwise (unaligned memory would trip checkptr, and a
// big-endian host would see swapped bytes) the elements are converted
// through a small stack buffer, chunk by chunk. Either way nothing is
// allocated.
func RefBytes(op Op, dt DType, out, a, b []byte, alpha float64) {
	size := dt.Size()
	if size == 0 {
		panic("kernels: RefBytes: invalid DType")
	}
	n := len(out) / size
	readsA, readsB := op.Reads()
	if !readsA {
		a = nil
	} else {
		a = a[:n*size]
	}
	if !readsB {
		b = nil
	} else {
		b = b[:n*size]
	}
	out = out[:n*size]
	switch dt {
	case F32:
		if hostLittleEndian && aligned(out, 4) && aligned(a, 4) && aligned(b, 4) {
			RefF32(op, asF32(out), asF32(a), asF32(b), float32(alpha))
			return
		}
		refBytesChunkedF32(op, out, a, b, float32(alpha))
	case F64:
		if hostLittleEndian && aligned(out, 8) && aligned(a, 8) && aligned(b, 8) {
			RefF64(op, asF64(out), asF64(a), asF64(b), alpha)
			return
		}
		refBytesChunkedF64(op, out, a, b, alpha)
	}
}

// hostLittleEndian reports whether this machine stores numbers the way the
// GPU does, which is what lets RefBytes reinterpret device bytes in place.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

func aligned(p []byte, align uintptr) bool {
	return len(p) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(p)))%align == 0
}

func asF32(p []byte) []float32 {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(p))), len(p)/4)
}

func asF64(p []byte) []float64 {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(p))), len(p)/8)
}

// refChunk is the number of elements the byte-wise fallback converts at a
// time; three buffers of it stay comfortably on the stack.
const refChunk = 256

func refBytesChunkedF32(op Op, out, a, b []byte, alpha float32) {
	le := binary.LittleEndian
	var bufOut, bufA, bufB [refChunk]float32
	for len(out) > 0 {
		m := min(len(out)/4, refChunk)
		var ca, cb []float32
		if a != nil {
			ca = bufA[:m]
			for i := range ca {
				ca[i] = math.Float32frombits(le.Uint32(a[4*i:]))
			}
			a = a[4*m:]
		}
		if b != nil {
			cb = bufB[:m]
			for i := range cb {
				cb[i] = math.Float32frombits(le.Uint32(b[4*i:]))
			}
			b = b[4*m:]
		}
		co := bufOut[:m]
		RefF32(op, co, ca, cb, alpha)
		for i, v := range co {
			le.PutUint32(out[4*i:], math.Float32bits(v))
		}
		out = out[4*m:]
	}
}

func refBytesChunkedF64(op Op, out, a, b []byte, alpha float64) {
	le := binary.LittleEndian
	var bufOut, bufA, bufB [refChunk]float64
	for len(out) > 0 {
		m := min(len(out)/8, refChunk)
		var ca, cb []float64
		if a != nil {
			ca = bufA[:m]
			for i := range ca {
				ca[i] = math.Float64frombits(le.Uint64(a[8*i:]))
			}
			a = a[8*m:]
		}
		if b != nil {
			cb = bufB[:m]
			for i := range cb {
				cb[i] = math.Float64frombits(le.Uint64(b[8*i:]))
			}
			b = b[8*m:]
		}
		co := bufOut[:m]
		RefF64(op, co, ca, cb, alpha)
		for i, v := range co {
			le.PutUint64(out[8*i:], math.Float64bits(v))
		}
		out = out[8*m:]
	}
}
