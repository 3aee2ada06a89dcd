package rocsync

import (
	"errors"
	"sync"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/userkernel"
)

// Access is how an op uses a buffer: it reads it, writes it, or both. A
// read waits for the buffer's last writer; a write also for its readers.
type Access = syncstate.Access

// The accesses.
const (
	Read      = syncstate.Read
	Write     = syncstate.Write
	ReadWrite = syncstate.ReadWrite
)

// Geometry is a kernel launch's shape in work-items (userkernel.Grid1D,
// Grid2D, Grid3D make one).
type Geometry = userkernel.Geometry

// maxKernelArgs bounds a user kernel's explicit arguments.
const maxKernelArgs = 32

// Arg is one argument of a user kernel launch or one Operand of a library
// call: a Buffer or Array with its access (In, Out, InOut), or a typed
// scalar (I32, U32, I64, U64, F32, F64).
type Arg struct {
	buf    *buffer
	who    Operand
	access Access
	scalar userkernel.Arg
}

func bufferArg(x Operand, a Access) Arg {
	arg := Arg{who: x, access: a}
	if x != nil {
		arg.buf = x.trackedBuffer()
	}
	return arg
}

// In passes a Buffer or an Array that the op reads.
func In(x Operand) Arg { return bufferArg(x, Read) }

// Out passes a Buffer or an Array that the op writes (without reading).
func Out(x Operand) Arg { return bufferArg(x, Write) }

// InOut passes a Buffer or an Array that the op reads and writes.
func InOut(x Operand) Arg { return bufferArg(x, ReadWrite) }

// Scalar arguments of user kernels are checked against the parameter's
// type (an int for an int, 4 bytes for 4).

// I32 is an int32 scalar argument of a user kernel.
func I32(v int32) Arg { return Arg{scalar: userkernel.Int32(v)} }

// U32 is a uint32 scalar argument of a user kernel.
func U32(v uint32) Arg { return Arg{scalar: userkernel.Uint32(v)} }

// I64 is an int64 scalar argument of a user kernel.
func I64(v int64) Arg { return Arg{scalar: userkernel.Int64(v)} }

// U64 is a uint64 scalar argument of a user kernel.
func U64(v uint64) Arg { return Arg{scalar: userkernel.Uint64(v)} }

// F32 is a float32 scalar argument of a user kernel.
func F32(v float32) Arg { return Arg{scalar: userkernel.Float32(v)} }

// F64 is a float64 scalar argument of a user kernel.
func F64(v float64) Arg { return Arg{scalar: userkernel.Float64(v)} }

// I8 is an int8 scalar argument of a user kernel (OpenCL char).
func I8(v int8) Arg { return Arg{scalar: userkernel.Int8(v)} }

// U8 is a uint8 scalar argument of a user kernel (OpenCL uchar).
func U8(v uint8) Arg { return Arg{scalar: userkernel.Uint8(v)} }

// I16 is an int16 scalar argument of a user kernel (OpenCL short).
func I16(v int16) Arg { return Arg{scalar: userkernel.Int16(v)} }

// U16 is a uint16 scalar argument of a user kernel (OpenCL ushort).
func U16(v uint16) Arg { return Arg{scalar: userkernel.Uint16(v)} }

// Kernel is a user kernel loaded on one device (Device.LoadKernel).
type Kernel struct {
	dev *Device
	lk  *userkernel.LoadedKernel
	drv *driver.LoadedKernel
}

// Name is the kernel's name.
func (k *Kernel) Name() string {
	if k == nil {
		return ""
	}
	return k.lk.Name
}

// Signature is the kernel's parameters and limits, as its own metadata
// gives them.
func (k *Kernel) Signature() *userkernel.Signature {
	if k == nil {
		return nil
	}
	return k.lk.Signature
}

// defaultBuilder serves devices opened without Options.KernelBuilder.
var defaultBuilder = sync.OnceValue(func() *userkernel.Builder { return userkernel.NewBuilder(userkernel.Options{}) })

// kernelLoader is a device's userkernel.Loader: it loads images through the
// driver's KernelLoader and remembers the driver's kernel for each handle
// it hands the registry.
type kernelLoader struct {
	d  *Device
	kl driver.KernelLoader

	mu      sync.Mutex
	kernels []*driver.LoadedKernel // by handle-1
}

var _ userkernel.Loader = (*kernelLoader)(nil)

func (l *kernelLoader) Device() userkernel.Device {
	return userkernel.Device{ISA: l.d.drv.Target(), Accepts: l.kl.AcceptsCodeObject, Emulated: l.d.Emulated()}
}

func (l *kernelLoader) LoadImage(img *userkernel.Image) (uint64, error) {
	return l.kl.LoadModule(img.Code)
}

func (l *kernelLoader) Function(module uint64, k *userkernel.Signature) (uint64, error) {
	offsets := make([]int, len(k.Params))
	for i, p := range k.Params {
		offsets[i] = int(p.Offset)
	}
	dk, err := l.kl.Kernel(module, k.Name, k.ArgsSize, offsets)
	if err != nil {
		return 0, err
	}
	dk.ExplicitArgsSize = k.ExplicitArgsSize
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kernels = append(l.kernels, dk)
	return uint64(len(l.kernels)), nil
}

func (l *kernelLoader) kernel(handle uint64) *driver.LoadedKernel {
	l.mu.Lock()
	defer l.mu.Unlock()
	if handle == 0 || handle > uint64(len(l.kernels)) {
		return nil
	}
	return l.kernels[handle-1]
}

// registry returns the device's kernel registry, made on first use.
func (d *Device) registry() (*userkernel.Registry, *kernelLoader, error) {
	d.kernelsOnce.Do(func() {
		kl, ok := d.drv.(driver.KernelLoader)
		if !ok {
			return
		}
		if d.kernelBuilder == nil {
			d.kernelBuilder = defaultBuilder()
		}
		b := d.kernelBuilder
		d.kernelLoader = &kernelLoader{d: d, kl: kl}
		d.kernels = userkernel.NewRegistry(b, d.kernelLoader)
	})
	if d.kernels == nil {
		return nil, nil, newErr("LoadKernel", ErrUnavailable, "the %s backend cannot load user kernels", d.backend)
	}
	return d.kernels, d.kernelLoader, nil
}

// LoadKernel loads the kernel called name from src on the device: AMD code
// objects pick the one for the device's ISA, PTX the newest not newer than
// the device, and OpenCL C is compiled for the device's target (through
// the Builder's on-disk cache, so a second run loads it from disk). Each
// source is built and loaded once per device; later calls cost a few map
// lookups. Errors match userkernel's (ErrNoKernel, ErrTarget, ...).
//
// On the emulator, the kernel runs as the Go function registered for its
// name in EmulatorOptions.KernelReferences, which reads its arguments with
// userkernel.Slice and Arg's typed getters. The emulator needs no
// compiler: without one (and without a cached build) an OpenCL kernel's
// signature comes from its declaration in the source, or from
// userkernel.WithDeclarations.
func (d *Device) LoadKernel(src *userkernel.Source, name string) (*Kernel, error) {
	if err := d.enter("LoadKernel"); err != nil {
		return nil, err
	}
	defer d.leave()
	reg, loader, err := d.registry()
	if err != nil {
		return nil, err
	}
	lk, err := reg.Kernel(src, name)
	d.warnCacheErrors()
	if err != nil {
		kind := ErrInvalid // the source, the kernel's name or its target
		if errors.Is(err, userkernel.ErrNoCompiler) || errors.Is(err, userkernel.ErrCache) {
			kind = ErrUnavailable
		}
		return nil, &Error{Op: "LoadKernel", Kind: kind, Detail: name, Err: err}
	}
	dk := loader.kernel(lk.Handle)
	if dk == nil {
		return nil, newErr("LoadKernel", ErrInvalid, "kernel %s has no driver handle", name)
	}
	return &Kernel{dev: d, lk: lk, drv: dk}, nil
}

// warnCacheErrors logs, once per device, that the kernel builder's disk
// cache failed: the build goes on without it, so nothing else would tell
// a user of the default builder (whose Stats they cannot reach) that
// every process compiles its kernels again.
func (d *Device) warnCacheErrors() {
	if d.cacheWarned.Load() {
		return
	}
	s := d.kernelBuilder.Stats()
	if s.CacheErrors == 0 || !d.cacheWarned.CompareAndSwap(false, true) {
		return
	}
	d.log.Warn().Str("cache", d.kernelBuilder.CacheDir()).Str("error", s.LastCacheErr).
		Msg("rocsync: the kernel cache cannot be used; kernels are compiled again in every process")
}

// checkOperands validates args' buffers: non-nil, on the task's device.
func (t *Task) checkOperands(op string, args []Arg) error {
	for i, a := range args {
		if a.who == nil {
			continue
		}
		if a.buf == nil {
			return newErr(op, ErrNilArray, "argument %d", i)
		}
		if a.buf.dev != t.dev {
			return newErr(op, ErrDeviceMismatch, "argument %d, %v, used on a task of gpu%d", i, a.who, t.dev.index)
		}
	}
	return nil
}

// Launch runs the user kernel k over g on the task's kernel queue. args
// are the kernel's arguments in order: buffers and arrays with the access
// the kernel makes (In, Out, InOut), and typed scalars. They are checked
// against the kernel's own metadata before anything is submitted: a wrong
// count, kind, size or access is an ErrInvalid error wrapping a
// *userkernel.ArgError (errors.Is userkernel.ErrKernelArgs), a geometry the
// kernel cannot take a *userkernel.GeometryError. The accesses are what
// the launch is ordered by: a buffer passed In that the kernel writes is a
// race the ordering cannot see (the hazard checker reports it).
func (t *Task) Launch(k *Kernel, g Geometry, args ...Arg) error {
	const name = "Launch"
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if k == nil {
		return newErr(name, ErrInvalid, "nil kernel")
	}
	if k.dev != t.dev {
		return newErr(name, ErrDeviceMismatch, "kernel %s loaded on gpu%d, task on gpu%d", k.Name(), k.dev.index, t.dev.index)
	}
	if len(args) > maxKernelArgs {
		return newErr(name, ErrInvalid, "%d arguments, at most %d", len(args), maxKernelArgs)
	}
	if err := t.checkOperands(name, args); err != nil {
		return err
	}
	kargs := t.kargs[:len(args)]
	operands := t.operands[:0]
	for i, a := range args {
		if a.who == nil {
			kargs[i] = a.scalar
			continue
		}
		kargs[i] = userkernel.Buffer(uint64(a.buf.ptr), a.access)
		if len(operands) == cap(operands) {
			return newErr(name, ErrInvalid, "more than %d buffer arguments", cap(operands))
		}
		operands = append(operands, access{a.buf, a.who, a.access})
	}
	if k.drv.ArgsSize > driver.MaxArgs {
		return newErr(name, ErrInvalid, "kernel %s takes a %d-byte argument block, at most %d", k.Name(), k.drv.ArgsSize, driver.MaxArgs)
	}
	op := &t.ops.dispatch
	if err := k.lk.Pack(op.Args[:], g, kargs); err != nil {
		clear(kargs)
		return &Error{Op: name, Kind: ErrInvalid, Detail: k.Name(), Err: err}
	}
	clear(kargs)
	op.Kernel = k.drv
	op.Geometry = Geometry{Dims: max(g.Dims, 1), Grid: g.Grid, Workgroup: g.Workgroup}
	for i := range op.Geometry.Grid {
		op.Geometry.Grid[i] = max(op.Geometry.Grid[i], 1)
		op.Geometry.Workgroup[i] = max(op.Geometry.Workgroup[i], 1)
	}
	_, err := t.submit(name, op, operands)
	return err
}

// LibraryCall runs fn on the task's library stream, ordered like any op:
// after the work that wrote what operands read (and, for what they write,
// after its readers), and recorded as their writer or reader once fn
// returns. fn gets the raw stream handle (hipStream_t on ROCm, CUstream on
// CUDA) and must enqueue its work on that stream only, without waiting for
// it; any library works (rocBLAS, rocFFT, MIOpen, cuDNN, ...). Operands
// are buffers or arrays passed In, Out or InOut; scalars are refused. An
// error from fn is an ErrFault error, and what the call writes is poisoned
// (its contents are unknown: fn may have enqueued part of its work).
func (t *Task) LibraryCall(operands []Arg, fn func(stream uintptr) error) error {
	const name = "LibraryCall"
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if fn == nil {
		return newErr(name, ErrInvalid, "nil function")
	}
	if err := t.checkOperands(name, operands); err != nil {
		return err
	}
	accs := t.operands[:0]
	for i, a := range operands {
		if a.who == nil {
			return newErr(name, ErrInvalid, "Operand %d is a scalar: a library call takes buffers and arrays", i)
		}
		if len(accs) == cap(accs) {
			return newErr(name, ErrInvalid, "more than %d operands", cap(accs))
		}
		accs = append(accs, access{a.buf, a.who, a.access})
	}
	op := &t.ops.call
	op.Call = fn
	_, err := t.submit(name, op, accs)
	return err
}

// BLASHandle returns the task's BLAS handle, bound to its library stream
// (a rocblas_handle on ROCm and the emulator, a cublasHandle_t on CUDA),
// for BLAS calls of the user's own inside LibraryCall. It is an
// ErrUnavailable error when the BLAS library is not loaded.
func (t *Task) BLASHandle() (uintptr, error) {
	if err := t.check("BLASHandle"); err != nil {
		return 0, err
	}
	if h, ok := t.drv.(driver.BLASHandler); ok && h.BLASHandle() != 0 {
		return h.BLASHandle(), nil
	}
	return 0, newErr("BLASHandle", ErrUnavailable, "no BLAS library on the %s backend", t.dev.backend)
}
