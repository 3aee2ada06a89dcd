// Package kernels holds rocsync's GPU kernels: the elementwise ops and the
// sum reductions (reduce.go). It has their OpenCL C source, the code
// objects built from it for each AMD GPU target, the kernarg layouts shared
// by the real dispatchers, the emulator and the simulated driver (Layout,
// ReduceLayout), and CPU reference implementations.
//
// The sources are src/elementwise.cl and src/reduce.cl; build.sh compiles
// both into one module per target:
// co/v5/<gfx>.hsaco for every target, co/v4/<gfx>.hsaco for the targets that
// ROCm 5.0-5.2 runtimes (which cannot load v5) know, and ptx/<sm>.ptx; they
// are committed and embedded. check_fresh.sh tells whether the committed
// files still match the source. CodeObjectFor and PickCodeObjectVersion
// choose the code-object version a runtime release loads.
package kernels

import (
	"strconv"
	"strings"
)

// DType is the element type of a kernel's arrays.
type DType uint8

const (
	F32 DType = iota // float32
	F64              // float64
)

// AllDTypes returns every DType, in order.
func AllDTypes() []DType { return []DType{F32, F64} }

// String returns the Go name of the element type: "float32" or "float64".
func (d DType) String() string {
	switch d {
	case F32:
		return "float32"
	case F64:
		return "float64"
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}

// Size returns the size of one element in bytes, or 0 for an invalid DType.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F64:
		return 8
	}
	return 0
}

// Suffix returns the suffix used in kernel names: "f32" or "f64".
func (d DType) Suffix() string {
	switch d {
	case F32:
		return "f32"
	case F64:
		return "f64"
	}
	return ""
}

// Op is an elementwise operation over flat arrays of n elements.
// Every op has a kernel for each DType.
type Op uint8

const (
	Mul      Op = iota // out = a * b
	Add                // out = a + b
	Sub                // out = a - b
	Div                // out = a / b (correctly rounded)
	Scale              // out = alpha * a
	AXPY               // out = alpha*a + b, rounded after the multiply and after the add (no fma)
	Fill               // out = alpha
	Copy               // out = a
	Neg                // out = -a (flips the sign bit, NaN included)
	Exp                // out = e^a
	Sqrt               // out = sqrt(a) (correctly rounded)
	ReLU               // out = a if a > 0, else +0; so relu(NaN) = 0 and relu(-0) = +0
	ReLUGrad           // out = b if a > 0, else +0: the gradient b passed back through relu(a)

	numOps
)

var opNames = [numOps]string{
	Mul: "mul", Add: "add", Sub: "sub", Div: "div", Scale: "scale", AXPY: "axpy",
	Fill: "fill", Copy: "copy", Neg: "neg", Exp: "exp", Sqrt: "sqrt", ReLU: "relu",
	ReLUGrad: "relu_grad",
}

// NumOps is the number of ops, for tables indexed by Op.
const NumOps = int(numOps)

// AllOps returns every Op, in order.
func AllOps() []Op {
	ops := make([]Op, numOps)
	for i := range ops {
		ops[i] = Op(i)
	}
	return ops
}

// Valid reports whether o is one of the defined ops.
func (o Op) Valid() bool { return o < numOps }

// String returns the lower-case op name used in kernel names, e.g. "axpy".
func (o Op) String() string {
	if o.Valid() {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// kernelPrefix starts every kernel name, keeping rocsync's symbols apart
// from anything else loaded into the same process.
const kernelPrefix = "rocsync_"

// descriptorSuffix ends the symbol of an AMDGPU kernel descriptor, which is
// what the HSA runtime looks up (hsa_executable_get_symbol_by_name).
const descriptorSuffix = ".kd"

// KernelName returns the kernel's function name, e.g. "rocsync_mul_f32".
// It is also the PTX entry name.
func (o Op) KernelName(dt DType) string {
	return kernelPrefix + o.String() + "_" + dt.Suffix()
}

// Symbol returns the kernel descriptor symbol in the AMDGPU code objects,
// e.g. "rocsync_mul_f32.kd".
func (o Op) Symbol(dt DType) string {
	return o.KernelName(dt) + descriptorSuffix
}

// ParseSymbol is the inverse of Symbol and KernelName: it accepts a kernel
// name with or without the ".kd" suffix.
func ParseSymbol(sym string) (Op, DType, bool) {
	opName, dt, ok := splitSymbol(sym)
	if !ok {
		return 0, 0, false
	}
	for o, name := range opNames {
		if name == opName {
			return Op(o), dt, true
		}
	}
	return 0, 0, false
}

// splitSymbol splits a kernel name, with or without the ".kd" suffix, into
// the name between the prefix and the element type, and the element type.
func splitSymbol(sym string) (name string, dt DType, ok bool) {
	sym = strings.TrimSuffix(sym, descriptorSuffix)
	rest, ok := strings.CutPrefix(sym, kernelPrefix)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '_')
	if i < 0 {
		return "", 0, false
	}
	switch rest[i+1:] {
	case "f32":
		dt = F32
	case "f64":
		dt = F64
	default:
		return "", 0, false
	}
	return rest[:i], dt, true
}

// Reads reports which input arrays the op reads. Fill reads neither, the
// unary ops (scale, copy, neg, exp, sqrt, relu) read a, and the binary ops
// and axpy read a and b. A kernel never dereferences an input it does not
// read, so its pointer may be 0.
func (o Op) Reads() (a, b bool) {
	switch o {
	case Mul, Add, Sub, Div, AXPY, ReLUGrad:
		return true, true
	case Scale, Copy, Neg, Exp, Sqrt, ReLU:
		return true, false
	}
	return false, false
}

// UsesAlpha reports whether the op reads the scalar argument alpha.
func (o Op) UsesAlpha() bool {
	return o == Scale || o == AXPY || o == Fill
}
