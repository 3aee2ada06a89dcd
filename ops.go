package rocsync

import "github.com/rocsync/rocsync/kernels"

// The elementwise ops run as rocsync's own kernels on the task's HSA queue.
// Each comes in two forms: one that returns a new array, and an Into form
// that writes an existing one (which may alias an input: x = x*x is fine).

// MulInto sets out = a*b elementwise.
func (t *Task) MulInto(out, a, b *Array) error {
	return t.elementwise("Mul", kernels.Mul, out, a, b, 0)
}

// AddInto sets out = a+b.
func (t *Task) AddInto(out, a, b *Array) error {
	return t.elementwise("Add", kernels.Add, out, a, b, 0)
}

// SubInto sets out = a-b.
func (t *Task) SubInto(out, a, b *Array) error {
	return t.elementwise("Sub", kernels.Sub, out, a, b, 0)
}

// DivInto sets out = a/b.
func (t *Task) DivInto(out, a, b *Array) error {
	return t.elementwise("Div", kernels.Div, out, a, b, 0)
}

// ScaleInto sets out = alpha*a.
func (t *Task) ScaleInto(out *Array, alpha float64, a *Array) error {
	return t.elementwise("Scale", kernels.Scale, out, a, nil, alpha)
}

// AXPYInto sets out = alpha*x + y.
func (t *Task) AXPYInto(out *Array, alpha float64, x, y *Array) error {
	return t.elementwise("AXPY", kernels.AXPY, out, x, y, alpha)
}

// Fill sets every element of out to v.
func (t *Task) Fill(out *Array, v float64) error {
	return t.elementwise("Fill", kernels.Fill, out, nil, nil, v)
}

// CopyInto sets out = a.
func (t *Task) CopyInto(out, a *Array) error {
	return t.elementwise("Copy", kernels.Copy, out, a, nil, 0)
}

// NegInto sets out = -a.
func (t *Task) NegInto(out, a *Array) error { return t.elementwise("Neg", kernels.Neg, out, a, nil, 0) }

// ExpInto sets out = exp(a).
func (t *Task) ExpInto(out, a *Array) error { return t.elementwise("Exp", kernels.Exp, out, a, nil, 0) }

// SqrtInto sets out = sqrt(a).
func (t *Task) SqrtInto(out, a *Array) error {
	return t.elementwise("Sqrt", kernels.Sqrt, out, a, nil, 0)
}

// ReLUInto sets out = max(a, 0).
func (t *Task) ReLUInto(out, a *Array) error {
	return t.elementwise("ReLU", kernels.ReLU, out, a, nil, 0)
}

// ReLUGradInto sets out = grad where a > 0, else 0: grad passed back
// through relu(a).
func (t *Task) ReLUGradInto(out, a, grad *Array) error {
	return t.elementwise("ReLUGrad", kernels.ReLUGrad, out, a, grad, 0)
}

// fresh allocates an array shaped like a and runs into on it; the array is
// freed again if the op fails.
func (t *Task) fresh(op string, a *Array, into func(out *Array) error) (*Array, error) {
	if err := t.check(op, a); err != nil {
		return nil, err
	}
	out, err := t.dev.allocFor(op, a.rows, a.cols, a.dtype)
	if err != nil {
		return nil, err
	}
	if err := into(out); err != nil {
		_ = out.Free()
		return nil, err
	}
	return out, nil
}

// Mul returns a*b.
func (t *Task) Mul(a, b *Array) (*Array, error) {
	return t.fresh("Mul", a, func(o *Array) error { return t.MulInto(o, a, b) })
}

// Add returns a+b.
func (t *Task) Add(a, b *Array) (*Array, error) {
	return t.fresh("Add", a, func(o *Array) error { return t.AddInto(o, a, b) })
}

// Sub returns a-b.
func (t *Task) Sub(a, b *Array) (*Array, error) {
	return t.fresh("Sub", a, func(o *Array) error { return t.SubInto(o, a, b) })
}

// Div returns a/b.
func (t *Task) Div(a, b *Array) (*Array, error) {
	return t.fresh("Div", a, func(o *Array) error { return t.DivInto(o, a, b) })
}

// Scale returns alpha*a.
func (t *Task) Scale(alpha float64, a *Array) (*Array, error) {
	return t.fresh("Scale", a, func(o *Array) error { return t.ScaleInto(o, alpha, a) })
}

// AXPY returns alpha*x + y.
func (t *Task) AXPY(alpha float64, x, y *Array) (*Array, error) {
	return t.fresh("AXPY", x, func(o *Array) error { return t.AXPYInto(o, alpha, x, y) })
}

// Copy returns a copy of a.
func (t *Task) Copy(a *Array) (*Array, error) {
	return t.fresh("Copy", a, func(o *Array) error { return t.CopyInto(o, a) })
}

// Neg returns -a.
func (t *Task) Neg(a *Array) (*Array, error) {
	return t.fresh("Neg", a, func(o *Array) error { return t.NegInto(o, a) })
}

// Exp returns exp(a).
func (t *Task) Exp(a *Array) (*Array, error) {
	return t.fresh("Exp", a, func(o *Array) error { return t.ExpInto(o, a) })
}

// Sqrt returns sqrt(a).
func (t *Task) Sqrt(a *Array) (*Array, error) {
	return t.fresh("Sqrt", a, func(o *Array) error { return t.SqrtInto(o, a) })
}

// ReLU returns max(a, 0).
func (t *Task) ReLU(a *Array) (*Array, error) {
	return t.fresh("ReLU", a, func(o *Array) error { return t.ReLUInto(o, a) })
}

// ReLUGrad returns grad where a > 0, else 0.
func (t *Task) ReLUGrad(a, grad *Array) (*Array, error) {
	return t.fresh("ReLUGrad", a, func(o *Array) error { return t.ReLUGradInto(o, a, grad) })
}

// Full returns a new rows×cols array with every element v.
func (t *Task) Full(rows, cols int, dt DType, v float64) (*Array, error) {
	if err := t.check("Full"); err != nil {
		return nil, err
	}
	out, err := t.dev.allocFor("Full", rows, cols, dt)
	if err != nil {
		return nil, err
	}
	if err := t.elementwise("Full", kernels.Fill, out, nil, nil, v); err != nil {
		_ = out.Free()
		return nil, err
	}
	return out, nil
}
