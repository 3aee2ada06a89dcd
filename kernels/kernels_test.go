package kernels

import (
	"strings"
	"testing"
)

func TestDType(t *testing.T) {
	for _, tc := range []struct {
		dt     DType
		name   string
		size   int
		suffix string
	}{
		{F32, "float32", 4, "f32"},
		{F64, "float64", 8, "f64"},
		{DType(7), "DType(7)", 0, ""},
	} {
		if got := tc.dt.String(); got != tc.name {
			t.Errorf("DType(%d).String() = %q, want %q", tc.dt, got, tc.name)
		}
		if got := tc.dt.Size(); got != tc.size {
			t.Errorf("%v.Size() = %d, want %d", tc.dt, got, tc.size)
		}
		if got := tc.dt.Suffix(); got != tc.suffix {
			t.Errorf("%v.Suffix() = %q, want %q", tc.dt, got, tc.suffix)
		}
	}
}

func TestOpNames(t *testing.T) {
	want := []string{"mul", "add", "sub", "div", "scale", "axpy", "fill", "copy", "neg", "exp", "sqrt", "relu", "relu_grad"}
	ops := AllOps()
	if len(ops) != len(want) {
		t.Fatalf("AllOps() has %d ops, want %d", len(ops), len(want))
	}
	for i, op := range ops {
		if op != Op(i) || op.String() != want[i] {
			t.Errorf("AllOps()[%d] = %v (%d), want %s", i, op, op, want[i])
		}
	}
	if got := Op(200).String(); got != "Op(200)" {
		t.Errorf("Op(200).String() = %q", got)
	}
	if got := AXPY.Symbol(F64); got != "rocsync_axpy_f64.kd" {
		t.Errorf("AXPY.Symbol(F64) = %q", got)
	}
	if got := Mul.KernelName(F32); got != "rocsync_mul_f32" {
		t.Errorf("Mul.KernelName(F32) = %q", got)
	}
}

func TestParseSymbol(t *testing.T) {
	for _, op := range AllOps() {
		for _, dt := range AllDTypes() {
			for _, sym := range []string{op.Symbol(dt), op.KernelName(dt)} {
				gotOp, gotDT, ok := ParseSymbol(sym)
				if !ok || gotOp != op || gotDT != dt {
					t.Errorf("ParseSymbol(%q) = %v, %v, %v; want %v, %v, true", sym, gotOp, gotDT, ok, op, dt)
				}
			}
		}
	}
	for _, bad := range []string{
		"", "rocsync_", "rocsync_mul", "rocsync_mul_f16", "rocsync_mull_f32", "mul_f32",
		"rocsync_mul_f32.kd.kd", "__clang_ocl_kern_imp_rocsync_mul_f32", "rocsync__f32",
	} {
		if op, dt, ok := ParseSymbol(bad); ok {
			t.Errorf("ParseSymbol(%q) = %v, %v, true; want false", bad, op, dt)
		}
	}
}

func TestReads(t *testing.T) {
	for _, op := range AllOps() {
		a, b := op.Reads()
		var want string
		switch op {
		case Fill:
			want = "none"
		case Mul, Add, Sub, Div, AXPY, ReLUGrad:
			want = "a,b"
		default:
			want = "a"
		}
		got := "none"
		switch {
		case a && b:
			got = "a,b"
		case a:
			got = "a"
		case b:
			got = "b"
		}
		if got != want {
			t.Errorf("%v.Reads() reads %s, want %s", op, got, want)
		}
	}
}

// The kernel source must define exactly the kernels the Go side names, and
// read exactly the inputs Op.Reads declares; the emulator trusts Reads to
// model memory traffic.
func TestSourceMatchesOps(t *testing.T) {
	src := readSource(t)
	for _, op := range AllOps() {
		a, b := op.Reads()
		want := "RS_KERNEL(" + op.String() + ", SUFFIX, T, " + bit(a) + ", " + bit(b) + ","
		if !strings.Contains(src, want) {
			t.Errorf("src/elementwise.cl has no line starting %q", want)
		}
	}
	if n := strings.Count(src, "\n    RS_KERNEL("); n != int(numOps) {
		t.Errorf("src/elementwise.cl defines %d kernels per dtype, want %d", n, numOps)
	}
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
