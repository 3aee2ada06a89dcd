package simblas

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/rocsync/rocsync/kernels"
)

// The gemm kernels in gemm.cl, by name. The simulated GPU's executor
// (hsa/kfdsim) runs them by name with GemmBytes.
const (
	SgemmKernel = "simblas_sgemm"
	DgemmKernel = "simblas_dgemm"
)

// GemmKernelDType tells whether name is one of the gemm kernels, and its
// element type.
func GemmKernelDType(name string) (kernels.DType, bool) {
	switch name {
	case SgemmKernel:
		return kernels.F32, true
	case DgemmKernel:
		return kernels.F64, true
	}
	return 0, false
}

// GemmArg is one explicit argument of a gemm kernel.
type GemmArg struct {
	Name   string
	Offset uint32
	Size   uint32
	Kind   string // kernels.KindGlobalBuffer or kernels.KindByValue
}

// GemmLayout returns the kernarg layout of the gemm kernel of element type dt:
//
//	(global const T* a, global const T* b, global T* c,
//	 ulong m, ulong n, ulong k, ulong lda, ulong ldb, ulong ldc,
//	 T alpha, T beta, uint trans_a, uint trans_b)
//
// Tests check it against the metadata of the built code objects, and the
// executor against the metadata of the loaded one.
func GemmLayout(dt kernels.DType) []GemmArg {
	es := uint32(dt.Size())
	l := []GemmArg{
		{"a", 0, 8, kernels.KindGlobalBuffer},
		{"b", 8, 8, kernels.KindGlobalBuffer},
		{"c", 16, 8, kernels.KindGlobalBuffer},
		{"m", 24, 8, kernels.KindByValue},
		{"n", 32, 8, kernels.KindByValue},
		{"k", 40, 8, kernels.KindByValue},
		{"lda", 48, 8, kernels.KindByValue},
		{"ldb", 56, 8, kernels.KindByValue},
		{"ldc", 64, 8, kernels.KindByValue},
		{"alpha", 72, es, kernels.KindByValue},
		{"beta", 72 + es, es, kernels.KindByValue},
		{"trans_a", 72 + 2*es, 4, kernels.KindByValue},
		{"trans_b", 76 + 2*es, 4, kernels.KindByValue},
	}
	return l
}

// GemmArgs are the decoded arguments of one gemm dispatch.
type GemmArgs struct {
	A, B, C        uint64
	M, N, K        uint64
	LDA, LDB, LDC  uint64
	Alpha, Beta    float64 // float32 values widened for sgemm
	TransA, TransB bool
}

// DecodeGemmArgs reads a gemm kernarg segment of element type dt (at least
// as long as GemmLayout's last argument).
func DecodeGemmArgs(k []byte, dt kernels.DType) GemmArgs {
	le := binary.LittleEndian
	g := GemmArgs{
		A: le.Uint64(k[0:]), B: le.Uint64(k[8:]), C: le.Uint64(k[16:]),
		M: le.Uint64(k[24:]), N: le.Uint64(k[32:]), K: le.Uint64(k[40:]),
		LDA: le.Uint64(k[48:]), LDB: le.Uint64(k[56:]), LDC: le.Uint64(k[64:]),
	}
	if dt == kernels.F32 {
		g.Alpha = float64(math.Float32frombits(le.Uint32(k[72:])))
		g.Beta = float64(math.Float32frombits(le.Uint32(k[76:])))
		g.TransA, g.TransB = le.Uint32(k[80:]) != 0, le.Uint32(k[84:]) != 0
	} else {
		g.Alpha = math.Float64frombits(le.Uint64(k[72:]))
		g.Beta = math.Float64frombits(le.Uint64(k[80:]))
		g.TransA, g.TransB = le.Uint32(k[88:]) != 0, le.Uint32(k[92:]) != 0
	}
	return g
}

// GemmBytes computes what the gemm kernel computes for rows i < m and
// columns j < n of C (m and n are g.M and g.N, or fewer when the grid covers
// fewer work-items), over little-endian matrices held in byte slices that
// start at g.A, g.B and g.C: a and b may be empty when g.Alpha == 0 or g.K
// == 0, as the kernel then does not read them. Each multiply and add is
// rounded on its own, in the kernel's order, so the result is the kernel's
// bit for bit. The caller has checked that the slices cover every element
// the kernel touches.
func GemmBytes(dt kernels.DType, g *GemmArgs, m, n uint64, a, b, c []byte) {
	if dt == kernels.F32 {
		gemm(g, m, n, view[float32](a), view[float32](b), view[float32](c), float32(g.Alpha), float32(g.Beta))
		return
	}
	gemm(g, m, n, view[float64](a), view[float64](b), view[float64](c), g.Alpha, g.Beta)
}

// matrix is a column-major operand, aligned in place or copied.
type matrix[T float32 | float64] struct {
	v    []T
	back []byte // the bytes to write back to, when v is a copy
}

// view reinterprets b as []T when it is aligned (and the host is
// little-endian, as every GPU host is); otherwise it copies.
func view[T float32 | float64](b []byte) matrix[T] {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(b) == 0 {
		return matrix[T]{}
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) == 0 {
		return matrix[T]{v: unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/size)}
	}
	v := make([]T, len(b)/size)
	for i := range v {
		if size == 4 {
			v[i] = T(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		} else {
			v[i] = T(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	}
	return matrix[T]{v: v, back: b}
}

func (x matrix[T]) writeBack() {
	if x.back == nil {
		return
	}
	for i, f := range x.v {
		switch p := any(f).(type) {
		case float32:
			binary.LittleEndian.PutUint32(x.back[4*i:], math.Float32bits(p))
		case float64:
			binary.LittleEndian.PutUint64(x.back[8*i:], math.Float64bits(p))
		}
	}
}

func gemm[T float32 | float64](g *GemmArgs, m, n uint64, a, b, c matrix[T], alpha, beta T) {
	readAB := alpha != 0 && g.K != 0
	for j := uint64(0); j < n; j++ {
		for i := uint64(0); i < m; i++ {
			var r T
			if readAB {
				var sum T
				for l := uint64(0); l < g.K; l++ {
					var x, y T
					if g.TransA {
						x = a.v[l+i*g.LDA]
					} else {
						x = a.v[i+l*g.LDA]
					}
					if g.TransB {
						y = b.v[j+l*g.LDB]
					} else {
						y = b.v[l+j*g.LDB]
					}
					sum = T(sum + T(x*y)) // T(...) rounds: no fused multiply-add
				}
				r = T(alpha * sum)
			}
			if beta != 0 {
				r = T(r + T(beta*c.v[i+j*g.LDC]))
			}
			c.v[i+j*g.LDC] = r
		}
	}
	c.writeBack()
}
