package userkernel

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/rocsync/rocsync/kernels"
)

// ErrNoKernel is matched (errors.Is) when an image has no kernel of the
// name asked for.
var ErrNoKernel = errors.New("userkernel: no such kernel")

// ErrUnsupportedKernel is matched (errors.Is) when a kernel needs something
// a launch cannot provide: a parameter kind other than buffers and scalars
// (images, pipes, dynamic LDS pointers) or a hidden argument for a runtime
// service rocsync does not offer (printf, hostcall, device heap, device
// enqueue).
var ErrUnsupportedKernel = errors.New("userkernel: kernel needs what rocsync does not provide")

// Image is code built for one target: an AMD code object or a PTX module,
// with the signatures of the kernels in it. It is immutable.
type Image struct {
	Target Target
	// Code is what the runtime loads: the code object (an ELF shared
	// object) or the PTX text with a terminating NUL (cuModuleLoadData
	// takes a C string).
	Code []byte
	// Kernels lists the kernels in the image, in metadata order.
	Kernels []*Signature

	amdTarget string          // AMD: gfx and feature settings, e.g. "gfx90a:xnack+"
	features  map[string]byte // AMD: the feature settings
	sm        int             // NVIDIA: 80 for sm_80
}

// Kernel finds a kernel by name (for AMD, the descriptor symbol "name.kd"
// is accepted too). A missing kernel is an error matching ErrNoKernel; a
// kernel that needs what a launch cannot provide, ErrUnsupportedKernel.
func (img *Image) Kernel(name string) (*Signature, error) {
	for _, k := range img.Kernels {
		if k.Name == name || (k.Symbol != "" && k.Symbol == name) {
			if k.unsupported != "" {
				return nil, fmt.Errorf("%w: kernel %s: %s", ErrUnsupportedKernel, k.Name, k.unsupported)
			}
			return k, nil
		}
	}
	names := make([]string, len(img.Kernels))
	for i, k := range img.Kernels {
		names[i] = k.Name
	}
	return nil, fmt.Errorf("%w: %q in the image for %s (it has %s)", ErrNoKernel, name, img.Target, strings.Join(names, ", "))
}

// ParamKind is what a kernel parameter takes.
type ParamKind uint8

const (
	// ParamBuffer is a pointer to global (or constant) memory: a Buffer
	// argument.
	ParamBuffer ParamKind = iota + 1
	// ParamScalar is a value passed by value: a scalar argument.
	ParamScalar
	// ParamBufferOrScalar is a 64-bit PTX parameter without a pointer
	// annotation: nvcc declares pointers as plain .u64, so a Buffer or a
	// 64-bit integer scalar is accepted.
	ParamBufferOrScalar
)

func (k ParamKind) String() string {
	switch k {
	case ParamBuffer:
		return "buffer"
	case ParamScalar:
		return "scalar"
	case ParamBufferOrScalar:
		return "buffer or 64-bit integer"
	}
	return "ParamKind(" + strconv.Itoa(int(k)) + ")"
}

// ScalarClass is the class of a scalar parameter's type. Signedness is not
// checked: PTX does not record it.
type ScalarClass uint8

const (
	ClassAny     ScalarClass = iota // type not recorded: any scalar of the right size
	ClassInteger                    // char, short, int, long, size_t, .u32, .s64, ...
	ClassFloat                      // half, float, double, .f32, .f64
	ClassOther                      // vectors, structs: not passable as a scalar
)

func (c ScalarClass) String() string {
	switch c {
	case ClassAny:
		return "any"
	case ClassInteger:
		return "integer"
	case ClassFloat:
		return "floating-point"
	case ClassOther:
		return "aggregate"
	}
	return "ScalarClass(" + strconv.Itoa(int(c)) + ")"
}

// Param is one explicit kernel parameter, as the kernel's metadata
// describes it.
type Param struct {
	Index    int
	Name     string // "" when not recorded; PTX gives "<kernel>_param_<i>"
	Offset   uint32 // byte offset in the argument block
	Size     uint32
	Kind     ParamKind
	Class    ScalarClass // for scalars
	TypeName string      // e.g. "float*", "uint"; "" when not recorded
	// ReadOnly marks a buffer the kernel does not write (a pointer to
	// const, constant memory, or read_only access): declaring Write or
	// ReadWrite for it is an error.
	ReadOnly bool
	// WriteOnly marks a buffer the compiler found the kernel only writes:
	// declaring Read alone would hide the write, so it is an error.
	WriteOnly bool
}

// hiddenFill says what Pack writes into a hidden AMD argument.
type hiddenFill uint8

const (
	hiddenZero         hiddenFill = iota // hidden_none, dynamic LDS size
	hiddenGlobalOffset                   // 0: rocsync launches without a global offset
	hiddenBlockCount
	hiddenGroupSize
	hiddenRemainder
	hiddenGridDims
)

type hiddenArg struct {
	offset, size uint32
	fill         hiddenFill
	dim          int
	kind         string // the metadata's .value_kind
}

// Signature is one kernel's signature and launch limits, read from its
// image's metadata. It is immutable and safe to share.
type Signature struct {
	Name   string
	Symbol string // AMD kernel descriptor ("saxpy.kd"); "" for PTX, whose entry is Name
	Target Target
	Params []Param // explicit parameters, in order
	// ArgsSize is the size of the argument block Pack writes: the AMD
	// kernarg segment (hidden arguments included) or the PTX parameter
	// buffer. ArgsAlign is its alignment.
	ArgsSize, ArgsAlign uint32
	// ExplicitArgsSize is the part of the block the explicit parameters
	// span (the end of the last one; 0 for a kernel without parameters):
	// what hipModuleLaunchKernel takes, as HIP fills the hidden arguments
	// itself. It equals ArgsSize for PTX.
	ExplicitArgsSize uint32
	// GroupSegmentSize (static LDS / shared memory per workgroup) and
	// PrivateSegmentSize (scratch per work-item) are what an AQL dispatch
	// packet must carry; 0 for PTX.
	GroupSegmentSize, PrivateSegmentSize uint32
	// MaxWorkgroupSize bounds the work-items of one workgroup
	// (.max_flat_workgroup_size, PTX .maxntid, or the hardware's 1024).
	MaxWorkgroupSize uint32
	// ReqdWorkgroupSize is the only workgroup shape the kernel takes
	// (reqd_work_group_size, PTX .reqntid); all zero when it takes any.
	ReqdWorkgroupSize [3]uint32

	hidden      []hiddenArg
	unsupported string // why a launch cannot provide what the kernel needs
}

// maxWorkgroupItems is the most work-items of one workgroup any supported
// GPU runs (AMD and NVIDIA alike).
const maxWorkgroupItems = 1024

// amdImage reads an AMD code object into an Image. wantVersion 0 accepts
// any version.
func amdImage(code []byte, wantVersion kernels.CodeObjectVersion) (*Image, error) {
	version, err := kernels.ReadCodeObjectVersion(code)
	if err != nil {
		return nil, err
	}
	if wantVersion != 0 && version != wantVersion {
		return nil, fmt.Errorf("code object is %s, want %s", version, wantVersion)
	}
	meta, err := kernels.ReadMetadata(code)
	if err != nil {
		return nil, err
	}
	target := meta.Target
	if i := strings.LastIndex(target, "--"); i >= 0 {
		target = target[i+2:]
	}
	gfx, features, ok := amdFeatures(target)
	if !ok {
		return nil, fmt.Errorf("metadata target %q is not an AMD processor", meta.Target)
	}
	img := &Image{
		Target:    Target{Family: AMD, Arch: gfx, CodeObject: version},
		Code:      code,
		amdTarget: target,
		features:  features,
	}
	for i := range meta.Kernels {
		img.Kernels = append(img.Kernels, amdKernel(&meta.Kernels[i], img.Target))
	}
	return img, nil
}

// floatTypes and integerTypes are the OpenCL scalar type names the
// metadata's .type_name gives.
var (
	floatTypes   = map[string]bool{"half": true, "float": true, "double": true}
	integerTypes = map[string]bool{
		"char": true, "uchar": true, "short": true, "ushort": true, "int": true, "uint": true,
		"long": true, "ulong": true, "size_t": true, "ptrdiff_t": true, "intptr_t": true,
		"uintptr_t": true, "bool": true, "unsigned char": true, "unsigned short": true,
		"unsigned int": true, "unsigned long": true, "signed char": true,
	}
)

func amdKernel(m *kernels.KernelMeta, t Target) *Signature {
	k := &Signature{
		Name: m.Name, Symbol: m.Symbol, Target: t,
		ArgsSize: m.KernargSegmentSize, ArgsAlign: max(m.KernargSegmentAlign, 8),
		GroupSegmentSize: m.GroupSegmentFixedSize, PrivateSegmentSize: m.PrivateSegmentFixedSize,
		MaxWorkgroupSize:  m.MaxFlatWorkgroupSize,
		ReqdWorkgroupSize: m.ReqdWorkgroupSize,
	}
	if k.MaxWorkgroupSize == 0 || k.MaxWorkgroupSize > maxWorkgroupItems {
		k.MaxWorkgroupSize = maxWorkgroupItems
	}
	for _, a := range m.Args {
		if uint64(a.Offset)+uint64(a.Size) > uint64(m.KernargSegmentSize) {
			k.unsupported = fmt.Sprintf("argument %q at %d+%d runs past the %d-byte kernarg segment", a.Name, a.Offset, a.Size, m.KernargSegmentSize)
			continue
		}
		if strings.HasPrefix(a.ValueKind, "hidden_") {
			k.addHidden(a)
			continue
		}
		p := Param{Index: len(k.Params), Name: a.Name, Offset: a.Offset, Size: a.Size, TypeName: a.TypeName}
		k.ExplicitArgsSize = max(k.ExplicitArgsSize, a.Offset+a.Size)
		switch a.ValueKind {
		case kernels.KindGlobalBuffer:
			p.Kind = ParamBuffer
			p.ReadOnly = a.IsConst || a.AddressSpace == "constant" || a.Access == "read_only" || a.ActualAccess == "read_only"
			p.WriteOnly = a.Access == "write_only" || a.ActualAccess == "write_only"
			if a.Size != 8 {
				k.unsupported = fmt.Sprintf("buffer argument %q is %d bytes, not a 64-bit pointer", a.Name, a.Size)
			}
		case kernels.KindByValue:
			p.Kind = ParamScalar
			switch {
			case a.TypeName == "":
				p.Class = ClassAny
			case floatTypes[a.TypeName]:
				p.Class = ClassFloat
			case integerTypes[a.TypeName] || strings.HasSuffix(a.TypeName, "*"):
				p.Class = ClassInteger
			default:
				p.Class = ClassOther
			}
		default:
			k.unsupported = fmt.Sprintf("argument %q has value kind %s", a.Name, a.ValueKind)
		}
		k.Params = append(k.Params, p)
	}
	return k
}

// addHidden records a hidden argument Pack fills from the geometry, or marks
// the kernel unsupported when it asks for a runtime service.
func (k *Signature) addHidden(a kernels.ArgMeta) {
	h := hiddenArg{offset: a.Offset, size: a.Size, kind: a.ValueKind}
	kind := strings.TrimPrefix(a.ValueKind, "hidden_")
	dim := -1
	if n := len(kind); n > 2 && kind[n-2] == '_' && kind[n-1] >= 'x' && kind[n-1] <= 'z' {
		dim = int(kind[n-1] - 'x')
		kind = kind[:n-2]
	}
	switch {
	case kind == "none" || kind == "dynamic_lds_size":
		h.fill = hiddenZero
	case kind == "global_offset" && dim >= 0:
		h.fill = hiddenGlobalOffset
	case kind == "block_count" && dim >= 0:
		h.fill = hiddenBlockCount
	case kind == "group_size" && dim >= 0:
		h.fill = hiddenGroupSize
	case kind == "remainder" && dim >= 0:
		h.fill = hiddenRemainder
	case kind == "grid_dims":
		h.fill = hiddenGridDims
	default:
		k.unsupported = "hidden argument " + a.ValueKind + " (a runtime service rocsync does not provide)"
		return
	}
	h.dim = max(dim, 0)
	if h.size != 2 && h.size != 4 && h.size != 8 {
		k.unsupported = fmt.Sprintf("hidden argument %s has size %d", a.ValueKind, a.Size)
		return
	}
	k.hidden = append(k.hidden, h)
}

var (
	ptxTargetRE = regexp.MustCompile(`(?m)^\s*\.target\s+(sm_[0-9]+[af]?)`)
	ptxEntryRE  = regexp.MustCompile(`(?s)(?:^|\n)\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$%][A-Za-z0-9_$%]*)\s*\((.*?)\)([^{]*)\{`)
	ptxTuneRE   = regexp.MustCompile(`\.(maxntid|reqntid)\s+([0-9]+)(?:\s*,\s*([0-9]+))?(?:\s*,\s*([0-9]+))?`)
)

// ptxScalar gives the size and class of a PTX parameter type.
func ptxScalar(typ string) (uint32, ScalarClass, bool) {
	if len(typ) < 3 {
		return 0, 0, false
	}
	bits, err := strconv.Atoi(typ[2:])
	if err != nil || (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
		return 0, 0, false
	}
	switch typ[1] {
	case 'u', 's':
		return uint32(bits / 8), ClassInteger, true
	case 'f':
		return uint32(bits / 8), ClassFloat, true
	case 'b':
		return uint32(bits / 8), ClassAny, true
	}
	return 0, 0, false
}

// ptxImage reads a PTX module's .target and .entry declarations.
func ptxImage(text []byte) (*Image, error) {
	if n := len(text); n > 0 && text[n-1] == 0 {
		text = text[:n-1]
	}
	if len(text) == 0 {
		return nil, errors.New("empty PTX")
	}
	for _, c := range text {
		if c == 0 {
			return nil, errors.New("PTX text contains a NUL byte")
		}
	}
	m := ptxTargetRE.FindSubmatch(text)
	if m == nil {
		return nil, errors.New("PTX has no .target sm_XX line")
	}
	arch := string(m[1])
	sm, _ := smVersion(arch)
	img := &Image{
		Target: Target{Family: NVIDIA, Arch: arch},
		Code:   append(append(make([]byte, 0, len(text)+1), text...), 0),
		sm:     sm,
	}
	for _, e := range ptxEntryRE.FindAllSubmatch(text, -1) {
		k, err := ptxKernel(string(e[1]), string(e[2]), string(e[3]), img.Target)
		if err != nil {
			return nil, fmt.Errorf(".entry %s: %w", e[1], err)
		}
		img.Kernels = append(img.Kernels, k)
	}
	if len(img.Kernels) == 0 {
		return nil, errors.New("PTX has no .entry")
	}
	return img, nil
}

func ptxKernel(name, params, tuning string, t Target) (*Signature, error) {
	k := &Signature{Name: name, Target: t, MaxWorkgroupSize: maxWorkgroupItems, ArgsAlign: 8}
	off := uint32(0)
	for decl := range strings.SplitSeq(params, ",") {
		f := strings.Fields(decl)
		if len(f) == 0 {
			continue
		}
		if f[0] != ".param" || len(f) < 3 {
			return nil, fmt.Errorf("cannot read parameter %q", strings.TrimSpace(decl))
		}
		p := Param{Index: len(k.Params), Name: f[len(f)-1]}
		size, class, ok := ptxScalar(f[1])
		if !ok || strings.Contains(p.Name, "[") {
			// .align N .b8 name[M]: a struct passed by value.
			p.Kind, p.Class, p.Size = ParamScalar, ClassOther, 0
			k.unsupported = fmt.Sprintf("parameter %q (%s) is not a pointer or a scalar", p.Name, strings.TrimSpace(decl))
			k.Params = append(k.Params, p)
			continue
		}
		p.Size, p.Class, p.TypeName = size, class, f[1]
		switch {
		case len(f) > 3 && f[2] == ".ptr":
			p.Kind = ParamBuffer
			p.Class = ClassAny
			if f[3] == ".const" {
				p.ReadOnly = true
			}
		case size == 8 && class != ClassFloat:
			p.Kind = ParamBufferOrScalar
		default:
			p.Kind = ParamScalar
		}
		off = (off + size - 1) / size * size
		p.Offset = off
		off += size
		k.Params = append(k.Params, p)
	}
	k.ArgsSize = (off + 7) &^ 7
	k.ExplicitArgsSize = k.ArgsSize
	for _, m := range ptxTuneRE.FindAllStringSubmatch(tuning, -1) {
		var dims [3]uint32
		items := uint64(1) // three uint32 factors: the product can pass 2^32
		for i := range 3 {
			dims[i] = 1
			if m[2+i] != "" {
				n, err := strconv.ParseUint(m[2+i], 10, 32)
				if err != nil || n == 0 {
					return nil, fmt.Errorf("bad .%s", m[1])
				}
				dims[i] = uint32(n)
			}
			items = min(items*uint64(dims[i]), math.MaxUint32)
		}
		if m[1] == "reqntid" {
			k.ReqdWorkgroupSize = dims
		}
		k.MaxWorkgroupSize = min(k.MaxWorkgroupSize, uint32(items))
	}
	return k, nil
}
