package userkernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/rocsync/rocsync/syncstate"
)

// Access is how a kernel uses a buffer argument: the op path declares it
// to the sync core, which defines it (syncstate.Access).
type Access = syncstate.Access

const (
	Read      = syncstate.Read
	Write     = syncstate.Write
	ReadWrite = syncstate.ReadWrite
)

type argKind uint8

const (
	argInvalid argKind = iota // the zero Arg: never valid
	argBuffer
	argInt32
	argUint32
	argInt64
	argUint64
	argFloat32
	argFloat64
	argInt8
	argUint8
	argInt16
	argUint16
)

var argKindNames = [...]string{
	argInvalid: "no argument (zero Arg)", argBuffer: "buffer", argInt32: "int32", argUint32: "uint32",
	argInt64: "int64", argUint64: "uint64", argFloat32: "float32", argFloat64: "float64",
	argInt8: "int8", argUint8: "uint8", argInt16: "int16", argUint16: "uint16",
}

func (k argKind) size() uint32 {
	switch k {
	case argInt8, argUint8:
		return 1
	case argInt16, argUint16:
		return 2
	case argInt32, argUint32, argFloat32:
		return 4
	case argBuffer, argInt64, argUint64, argFloat64:
		return 8
	}
	return 0
}

func (k argKind) class() ScalarClass {
	switch k {
	case argFloat32, argFloat64:
		return ClassFloat
	case argInt32, argUint32, argInt64, argUint64, argInt8, argUint8, argInt16, argUint16:
		return ClassInteger
	}
	return ClassOther
}

// Arg is one launch argument: a buffer (a device address and how the
// kernel uses it) or a typed scalar. It is a small value; building one
// allocates nothing.
type Arg struct {
	bits   uint64 // the device address or the scalar's bits
	kind   argKind
	access Access
	// elemSize and elemClass are a buffer's element type as the kernel
	// declares it (Unpack sets them where the metadata names the type;
	// 0 and ClassAny otherwise).
	elemSize  uint8
	elemClass ScalarClass
}

// Buffer is a device buffer argument: its device address and the access
// the kernel makes to it.
func Buffer(ptr uint64, access Access) Arg { return Arg{bits: ptr, kind: argBuffer, access: access} }

// Int32 and the functions below make scalar arguments.
func Int32(v int32) Arg     { return Arg{bits: uint64(uint32(v)), kind: argInt32} }
func Uint32(v uint32) Arg   { return Arg{bits: uint64(v), kind: argUint32} }
func Int64(v int64) Arg     { return Arg{bits: uint64(v), kind: argInt64} }
func Uint64(v uint64) Arg   { return Arg{bits: v, kind: argUint64} }
func Float32(v float32) Arg { return Arg{bits: uint64(math.Float32bits(v)), kind: argFloat32} }
func Float64(v float64) Arg { return Arg{bits: math.Float64bits(v), kind: argFloat64} }
func Int8(v int8) Arg       { return Arg{bits: uint64(uint8(v)), kind: argInt8} }
func Uint8(v uint8) Arg     { return Arg{bits: uint64(v), kind: argUint8} }
func Int16(v int16) Arg     { return Arg{bits: uint64(uint16(v)), kind: argInt16} }
func Uint16(v uint16) Arg   { return Arg{bits: uint64(v), kind: argUint16} }

// IsBuffer reports whether a is a buffer argument.
func (a Arg) IsBuffer() bool { return a.kind == argBuffer }

// Ptr returns a buffer's device address (0 for a scalar).
func (a Arg) Ptr() uint64 {
	if a.kind == argBuffer {
		return a.bits
	}
	return 0
}

// Access returns a buffer's access (0 for a scalar).
func (a Arg) Access() Access { return a.access }

// Int64 returns an integer scalar's value, sign-extended from its width
// (also for the unsigned kinds Unpack reads back, whose signedness the
// metadata does not say; use Uint64 for unsigned values).
func (a Arg) Int64() int64 {
	switch a.kind.size() {
	case 1:
		return int64(int8(uint8(a.bits)))
	case 2:
		return int64(int16(uint16(a.bits)))
	case 4:
		return int64(int32(uint32(a.bits)))
	}
	return int64(a.bits)
}

// Uint64 returns an integer scalar's value, zero-extended.
func (a Arg) Uint64() uint64 { return a.bits }

// Int32 returns a 32-bit integer scalar's value (the low 32 bits of a
// wider one; a narrower one sign-extended, as Int64).
func (a Arg) Int32() int32 {
	if a.kind.size() < 4 {
		return int32(a.Int64())
	}
	return int32(uint32(a.bits))
}

// Uint32 returns a 32-bit integer scalar's value (the low 32 bits of a
// wider one).
func (a Arg) Uint32() uint32 { return uint32(a.bits) }

// Float32 returns a floating-point scalar's value (a float64 narrowed).
func (a Arg) Float32() float32 {
	if a.kind == argFloat32 {
		return math.Float32frombits(uint32(a.bits))
	}
	return float32(math.Float64frombits(a.bits))
}

// Float64 returns a floating-point scalar's value (a float32 widened).
func (a Arg) Float64() float64 {
	if a.kind == argFloat32 {
		return float64(math.Float32frombits(uint32(a.bits)))
	}
	return math.Float64frombits(a.bits)
}

// String describes the argument, e.g. "buffer 0x1000 (read)" or "float32 2".
func (a Arg) String() string {
	switch a.kind {
	case argBuffer:
		return fmt.Sprintf("buffer %#x (%s)", a.bits, a.access)
	case argFloat32, argFloat64:
		return argKindNames[a.kind] + " " + strconv.FormatFloat(a.Float64(), 'g', -1, 64)
	case argInt8, argInt16, argInt32, argInt64:
		return argKindNames[a.kind] + " " + strconv.FormatInt(a.Int64(), 10)
	case argUint8, argUint16, argUint32, argUint64:
		return argKindNames[a.kind] + " " + strconv.FormatUint(a.bits, 10)
	}
	return argKindNames[argInvalid]
}

// ErrKernelArgs is matched (errors.Is) by every *ArgError.
var ErrKernelArgs = errors.New("userkernel: kernel arguments do not match the kernel")

// ArgProblem says what is wrong with a launch's arguments.
type ArgProblem uint8

const (
	ArgCount       ArgProblem = iota + 1 // the number of arguments
	ArgKind                              // a buffer for a scalar, a float for an integer, ...
	ArgSize                              // a scalar of the wrong width
	ArgAccess                            // an access the kernel contradicts, or none
	ArgNullBuffer                        // a buffer at device address 0
	ArgBlock                             // the argument block given to Pack is too small
	ArgUnsupported                       // the parameter cannot be passed as a buffer or scalar
)

var argProblemNames = [...]string{
	ArgCount: "count", ArgKind: "kind", ArgSize: "size", ArgAccess: "access",
	ArgNullBuffer: "null buffer", ArgBlock: "argument block", ArgUnsupported: "unsupported parameter",
}

func (p ArgProblem) String() string {
	if int(p) < len(argProblemNames) && argProblemNames[p] != "" {
		return argProblemNames[p]
	}
	return "ArgProblem(" + strconv.Itoa(int(p)) + ")"
}

// ArgError is a launch argument that does not match the kernel's metadata.
type ArgError struct {
	Kernel  string
	Problem ArgProblem
	Index   int    // the argument's index; -1 for ArgCount and ArgBlock
	Name    string // the parameter's name, when the metadata records it
	Want    string // what the kernel takes
	Got     string // what the launch gave
}

func (e *ArgError) Error() string {
	where := ""
	if e.Index >= 0 {
		where = " argument " + strconv.Itoa(e.Index)
		if e.Name != "" {
			where += " (" + e.Name + ")"
		}
	}
	return fmt.Sprintf("userkernel: kernel %s%s: %s mismatch: want %s, got %s", e.Kernel, where, e.Problem, e.Want, e.Got)
}

// Is makes errors.Is(err, ErrKernelArgs) true.
func (e *ArgError) Is(target error) bool { return target == ErrKernelArgs }

func (k *Signature) argError(p *Param, problem ArgProblem, want, got string) error {
	e := &ArgError{Kernel: k.Name, Problem: problem, Index: -1, Want: want, Got: got}
	if p != nil {
		e.Index, e.Name = p.Index, p.Name
	}
	return e
}

// check validates one argument against its parameter.
func (k *Signature) check(p *Param, a Arg) error {
	if a.kind == argInvalid {
		return k.argError(p, ArgKind, p.Kind.String(), a.String())
	}
	if p.Class == ClassOther {
		return k.argError(p, ArgUnsupported, "a "+p.TypeName+" value (not passable as a buffer or scalar)", a.String())
	}
	switch p.Kind {
	case ParamBuffer:
		if a.kind != argBuffer {
			return k.argError(p, ArgKind, "buffer", a.String())
		}
	case ParamScalar:
		if a.kind == argBuffer {
			return k.argError(p, ArgKind, k.wantScalar(p), a.String())
		}
	case ParamBufferOrScalar:
		if a.kind != argBuffer && (a.kind.class() != ClassInteger || a.kind.size() != 8) {
			return k.argError(p, ArgKind, "buffer or 64-bit integer", a.String())
		}
	}
	if a.kind == argBuffer {
		if a.access != Read && a.access != Write && a.access != ReadWrite {
			return k.argError(p, ArgAccess, "read, write or read-write", a.access.String())
		}
		if p.ReadOnly && a.access.Writes() {
			return k.argError(p, ArgAccess, "read (the kernel declares the buffer read-only)", a.access.String())
		}
		if p.WriteOnly && !a.access.Writes() {
			return k.argError(p, ArgAccess, "write or read-write (the kernel writes the buffer)", a.access.String())
		}
		if a.bits == 0 {
			return k.argError(p, ArgNullBuffer, "a device address", "0")
		}
		return nil
	}
	if p.Class != ClassAny && a.kind.class() != p.Class {
		return k.argError(p, ArgKind, k.wantScalar(p), a.String())
	}
	if a.kind.size() != p.Size {
		return k.argError(p, ArgSize, k.wantScalar(p), a.String())
	}
	return nil
}

func (k *Signature) wantScalar(p *Param) string {
	s := strconv.Itoa(int(p.Size)) + "-byte " + p.Class.String() + " scalar"
	if p.Class == ClassAny {
		s = strconv.Itoa(int(p.Size)) + "-byte scalar"
	}
	if p.TypeName != "" {
		s += " (" + p.TypeName + ")"
	}
	return s
}

// Check validates a launch without packing it: the same errors as Pack.
func (k *Signature) Check(g Geometry, args []Arg) error {
	if err := k.checkGeometry(&g); err != nil {
		return err
	}
	return k.checkArgs(args)
}

func (k *Signature) checkArgs(args []Arg) error {
	if k.unsupported != "" {
		return k.argError(nil, ArgUnsupported, "a kernel rocsync can launch", k.unsupported)
	}
	if len(args) != len(k.Params) {
		return k.argError(nil, ArgCount, strconv.Itoa(len(k.Params))+" arguments", strconv.Itoa(len(args)))
	}
	for i := range k.Params {
		if err := k.check(&k.Params[i], args[i]); err != nil {
			return err
		}
	}
	return nil
}

// Pack checks a launch against the kernel's metadata and writes its
// argument block into block[:k.ArgsSize]: each argument little-endian at
// the offset the metadata gives, the hidden AMD arguments the metadata
// lists, in the layout of the code object's version (v4: global offsets 0
// and hidden_none; v5 and later: per dimension the whole workgroups, the
// workgroup size and the remainder, the grid dimensions, global offsets 0,
// as clr fills them in VirtualGPU::submitKernelInternal; LLVM AMDGPUUsage
// "Code Object V5 Metadata"), and zeros in every gap and in what the
// metadata does not list, so reused memory carries nothing stale.
//
// A HIP kernel computes blockDim as ockl does: in the last workgroup of a
// grid that is not a whole number of workgroups it is the remainder, so
// blockIdx.x*blockDim.x+threadIdx.x is not the global index there. HIP's
// hipModuleLaunchKernel (rocsync's Unified policy) only launches whole
// workgroups; launch HIP kernels with whole workgroups and a bounds check
// under every policy.
// Nothing is written when the launch is refused. Errors are *ArgError or
// *GeometryError values. Pack allocates nothing on success.
//
// On AMD the block is the kernarg segment of the dispatch (allocate it
// with ArgsAlign, at least 16 for AQL); on CUDA it is the parameter buffer
// of cuLaunchKernel's CU_LAUNCH_PARAM_BUFFER_POINTER.
func (k *Signature) Pack(block []byte, g Geometry, args []Arg) error {
	if uint64(len(block)) < uint64(k.ArgsSize) {
		return k.argError(nil, ArgBlock, strconv.Itoa(int(k.ArgsSize))+" bytes", strconv.Itoa(len(block))+" bytes")
	}
	if err := k.checkGeometry(&g); err != nil {
		return err
	}
	if err := k.checkArgs(args); err != nil {
		return err
	}
	block = block[:k.ArgsSize]
	clear(block)
	le := binary.LittleEndian
	for i := range k.Params {
		p := &k.Params[i]
		switch p.Size {
		case 1:
			block[p.Offset] = uint8(args[i].bits)
		case 2:
			le.PutUint16(block[p.Offset:], uint16(args[i].bits))
		case 4:
			le.PutUint32(block[p.Offset:], uint32(args[i].bits))
		default:
			le.PutUint64(block[p.Offset:], args[i].bits)
		}
	}
	for _, h := range k.hidden {
		var v uint64
		switch h.fill {
		case hiddenBlockCount:
			v = uint64(g.Grid[h.dim] / g.Workgroup[h.dim])
		case hiddenGroupSize:
			v = uint64(g.Workgroup[h.dim])
		case hiddenRemainder:
			v = uint64(g.Grid[h.dim] % g.Workgroup[h.dim])
		case hiddenGridDims:
			v = uint64(g.Dims)
		}
		switch h.size {
		case 2:
			le.PutUint16(block[h.offset:], uint16(v))
		case 4:
			le.PutUint32(block[h.offset:], uint32(v))
		default:
			le.PutUint64(block[h.offset:], v)
		}
	}
	return nil
}

// BufferAccess is one buffer a launch uses: what the op path declares.
type BufferAccess struct {
	Index  int // the argument's index
	Ptr    uint64
	Access Access
}

// Accesses appends the launch's buffer arguments to dst and returns it;
// with room in dst it allocates nothing. Call it after Pack has accepted
// the arguments.
func (k *Signature) Accesses(dst []BufferAccess, args []Arg) []BufferAccess {
	for i, a := range args {
		if a.kind == argBuffer {
			dst = append(dst, BufferAccess{Index: i, Ptr: a.bits, Access: a.access})
		}
	}
	return dst
}

// Unpack reads an argument block (as Pack writes it) back into arguments,
// appended to dst: buffers with the access the metadata implies (read for
// read-only, write for write-only, else read-write), scalars as float32 or
// float64 when the parameter is floating-point and as the unsigned integer
// of its width otherwise (Int64 and Int32 sign-extend it). A Go reference implementation of a kernel (References) reads
// its arguments this way. A block shorter than ArgsSize is an *ArgError.
func (k *Signature) Unpack(dst []Arg, block []byte) ([]Arg, error) {
	if uint64(len(block)) < uint64(k.ArgsSize) {
		return dst, k.argError(nil, ArgBlock, strconv.Itoa(int(k.ArgsSize))+" bytes", strconv.Itoa(len(block))+" bytes")
	}
	le := binary.LittleEndian
	for i := range k.Params {
		p := &k.Params[i]
		var bits uint64
		switch {
		case p.Size == 1 && p.Class != ClassFloat:
			bits = uint64(block[p.Offset])
		case p.Size == 2 && p.Class != ClassFloat:
			bits = uint64(le.Uint16(block[p.Offset:]))
		case p.Size == 4:
			bits = uint64(le.Uint32(block[p.Offset:]))
		case p.Size == 8:
			bits = le.Uint64(block[p.Offset:])
		default:
			return dst, k.argError(p, ArgUnsupported, "an integer of 1, 2, 4 or 8 bytes, or a 4- or 8-byte float", strconv.Itoa(int(p.Size))+" bytes")
		}
		a := Arg{bits: bits}
		switch {
		case p.Kind == ParamBuffer || p.Kind == ParamBufferOrScalar:
			a.kind, a.access = argBuffer, ReadWrite
			if e, ok := pointee(p.TypeName); ok {
				a.elemSize, a.elemClass = uint8(e.size), e.class
			}
			if p.ReadOnly {
				a.access = Read
			} else if p.WriteOnly {
				a.access = Write
			}
		case p.Class == ClassFloat && p.Size == 4:
			a.kind = argFloat32
		case p.Class == ClassFloat:
			a.kind = argFloat64
		case p.Size == 1:
			a.kind = argUint8
		case p.Size == 2:
			a.kind = argUint16
		case p.Size == 4:
			a.kind = argUint32
		default:
			a.kind = argUint64
		}
		dst = append(dst, a)
	}
	return dst, nil
}
