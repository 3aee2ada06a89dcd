package userkernel

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// An emulated device (Device.Emulated) runs kernels as Go references and
// needs only their signatures. Where no compiler is found (and the kernel
// cache holds no build), an OpenCL source builds for it into a declared
// image: the kernels' signatures read from their OpenCL C declarations
// (kernel void name(params)), or from declarations the user gives
// (WithDeclarations) where the source's own cannot be read, for instance
// when a macro writes them. Its code is not GPU code: the text of the
// declarations behind a marker, which the emulator loads and a GPU's
// runtime would refuse (it is no ELF object); a GPU never gets one.
//
// The layout is the one clang gives the explicit arguments on amdgcn (each
// at the next multiple of its alignment: pointers, long, double and size_t
// 8 bytes, int, uint and float 4, vectors their size with three elements
// counted as four), with no hidden arguments: an emulator's reference gets
// the dispatch's geometry as it is.

// declaredMagic starts a declared image's code.
const declaredMagic = "rocsync userkernel declared image 1\n"

// ErrDeclaration is matched (errors.Is) when an OpenCL kernel declaration
// cannot be read into a signature (a type the parser does not know, such
// as a typedef or struct, a pointer to private memory, a syntax error):
// declare the signature with WithDeclarations, in the basic types.
var ErrDeclaration = errors.New("userkernel: cannot read the kernel's declaration")

// WithDeclarations returns a copy of the OpenCL source src whose kernels'
// signatures, on an emulated device without a compiler, come from decls
// instead of src's own declarations: OpenCL C kernel declarations such as
// "kernel void saxpy(global float* y, global const float* x, float a, uint n);".
// Where a compiler is found, src is compiled as before and decls are not
// used. decls must parse (else an error matching ErrDeclaration).
func WithDeclarations(src *Source, decls string) (*Source, error) {
	if src == nil || src.kind != sourceOpenCL {
		return nil, fmt.Errorf("%w: declarations go with an OpenCL source", ErrSource)
	}
	if _, err := parseDeclarations(decls, Target{Family: AMD}); err != nil {
		return nil, err
	}
	out := *src
	out.declared = decls
	h := sha256.New()
	h.Write([]byte("rocsync userkernel declared\x00"))
	h.Write(src.id[:])
	writeField(h, []byte(decls))
	h.Sum(out.id[:0])
	return &out, nil
}

// declaredImage builds src's declared image for t.
func declaredImage(src *Source, t Target) (*Image, error) {
	text := src.declared
	if text == "" {
		text = src.openCL
	}
	ks, err := parseDeclarations(text, t)
	if err != nil {
		return nil, err
	}
	var code bytes.Buffer
	kernels := make([]*Signature, len(ks))
	code.WriteString(declaredMagic)
	code.WriteString(t.Arch)
	code.WriteByte(' ')
	code.WriteString(t.CodeObject.String())
	code.WriteByte('\n')
	for i, k := range ks {
		code.WriteString(k.decl)
		code.WriteString(";\n")
		kernels[i] = k.Signature
	}
	return &Image{Target: t, Code: code.Bytes(), Kernels: kernels}, nil
}

// IsDeclaredImage reports whether code is a declared image's (see
// WithDeclarations): kernel signatures for an emulator, not GPU code.
func IsDeclaredImage(code []byte) bool { return bytes.HasPrefix(code, []byte(declaredMagic)) }

// ReadDeclaredImage reads a declared image's code back into its kernels'
// signatures, as the emulator loads it.
func ReadDeclaredImage(code []byte) ([]*Signature, error) {
	rest, ok := bytes.CutPrefix(code, []byte(declaredMagic))
	if !ok {
		return nil, fmt.Errorf("%w: not a declared image", ErrDeclaration)
	}
	head, body, _ := bytes.Cut(rest, []byte("\n"))
	arch, _, _ := strings.Cut(string(head), " ")
	ks, err := parseDeclarations(string(body), Target{Family: AMD, Arch: arch})
	if err != nil {
		return nil, err
	}
	out := make([]*Signature, len(ks))
	for i, k := range ks {
		out[i] = k.Signature
	}
	return out, nil
}

// parseDeclarations reads every kernel declaration (or definition) in an
// OpenCL C text into a signature for t.
func parseDeclarations(text string, t Target) ([]*declaredSig, error) {
	s := stripComments(text)
	var out []*declaredSig
	for i := 0; i < len(s); {
		j := nextKernelKeyword(s, i)
		if j < 0 {
			break
		}
		k, end, err := parseOneDeclaration(s, j, t, leadingAttributes(s, j))
		if err != nil {
			return nil, err
		}
		out = append(out, k)
		i = end
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no kernel declaration (kernel void name(...)) found", ErrDeclaration)
	}
	return out, nil
}

// declaredSig is a signature with its declaration, normalised.
type declaredSig struct {
	*Signature
	decl string
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// leadingAttributes returns the __attribute__((...)) groups written just
// before the kernel keyword that ends at end ("__attribute__((x)) kernel
// void k(...)").
func leadingAttributes(s string, end int) []string {
	start := end - len("kernel")
	if start >= 2 && s[start-2:start] == "__" {
		start -= 2
	}
	var out []string
	for {
		head := strings.TrimRight(s[:start], " \t\r\n\f\v")
		if !strings.HasSuffix(head, ")") {
			return out
		}
		depth, i := 0, len(head)-1
		for ; i >= 0; i-- {
			if head[i] == ')' {
				depth++
			} else if head[i] == '(' {
				if depth--; depth == 0 {
					break
				}
			}
		}
		name := strings.TrimRight(head[:max(i, 0)], " \t\r\n\f\v")
		if i < 0 || !strings.HasSuffix(name, "__attribute__") {
			return out
		}
		start = len(name) - len("__attribute__")
		out = append(out, s[start:len(head)])
	}
}

// nextKernelKeyword finds the next "kernel" or "__kernel" token at or
// after i, or -1.
func nextKernelKeyword(s string, i int) int {
	for i < len(s) {
		j := strings.Index(s[i:], "kernel")
		if j < 0 {
			return -1
		}
		start := i + j
		if start >= 2 && s[start-2:start] == "__" {
			start -= 2
		}
		end := i + j + len("kernel")
		if (start == 0 || !isIdentByte(s[start-1])) && (end == len(s) || !isIdentByte(s[end])) {
			return end
		}
		i = end
	}
	return -1
}

// stripComments removes // and /* */ comments (and preprocessor lines,
// which a declaration the parser can read does not need).
func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return b.String()
			}
			i += end + 4
			b.WriteByte(' ')
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	var out strings.Builder
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			line = ""
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.String()
}

// parseOneDeclaration reads "[attributes] void name(params)" after the
// kernel keyword at i; it returns the signature and where it ended.
func parseOneDeclaration(s string, i int, t Target, before []string) (*declaredSig, int, error) {
	open := strings.IndexByte(s[i:], '(')
	if open < 0 {
		return nil, 0, fmt.Errorf("%w: a kernel declaration without a parameter list", ErrDeclaration)
	}
	// Attributes (__attribute__((...))) come before the return type and
	// have parentheses of their own: read the workgroup ones, skip the
	// rest.
	attrs := before
	for {
		head := strings.TrimSpace(s[i : i+open])
		if !strings.HasPrefix(head, "__attribute__") {
			break
		}
		at := i + strings.Index(s[i:], "__attribute__")
		end, err := closeParen(s, at+len("__attribute__"))
		if err != nil {
			return nil, 0, err
		}
		attrs = append(attrs, s[at:end])
		i = end
		open = strings.IndexByte(s[i:], '(')
		if open < 0 {
			return nil, 0, fmt.Errorf("%w: a kernel declaration without a parameter list", ErrDeclaration)
		}
	}
	head := strings.Fields(s[i : i+open])
	if len(head) != 2 || head[0] != "void" || !isIdent(head[1]) {
		return nil, 0, fmt.Errorf("%w: %q: want kernel void name(...)", ErrDeclaration, strings.Join(head, " "))
	}
	name := head[1]
	end, err := closeParen(s, i+open)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: kernel %s: %w", ErrDeclaration, name, err)
	}
	params := strings.TrimSpace(s[i+open+1 : end-1])
	k := &Signature{Name: name, Symbol: name + ".kd", Target: t, ArgsAlign: 16, MaxWorkgroupSize: maxWorkgroupItems}
	if err := workgroupAttributes(k, attrs); err != nil {
		return nil, 0, fmt.Errorf("%w: kernel %s: %w", ErrDeclaration, name, err)
	}
	var decls []string
	if params != "" && params != "void" {
		for _, p := range splitTopLevel(params) {
			param, decl, err := parseParam(p)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: kernel %s, parameter %d (%s): %w", ErrDeclaration, name, len(k.Params), strings.TrimSpace(p), err)
			}
			if param.unsupported != "" && k.unsupported == "" {
				k.unsupported = param.unsupported
			}
			param.Index = len(k.Params)
			param.Offset = alignUp(k.ExplicitArgsSize, param.align)
			k.ExplicitArgsSize = param.Offset + param.Size
			k.Params = append(k.Params, param.Param)
			decls = append(decls, decl)
		}
	}
	k.ArgsSize = alignUp(k.ExplicitArgsSize, 8)
	return &declaredSig{Signature: k, decl: "kernel void " + name + "(" + strings.Join(decls, ", ") + ")"}, end, nil
}

func alignUp(n, a uint32) uint32 { return (n + a - 1) / a * a }

func isIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isIdentByte(s[i]) {
			return false
		}
	}
	return true
}

// openCLDefaultFlatWorkgroup is the largest workgroup clang lets an
// OpenCL kernel for AMDGPU take when nothing says otherwise (clang
// AMDGPUTargetCodeGenInfo::setTargetAttributes: "amdgpu-flat-work-group-size"
// "1,256" on OpenCL kernels; the code object's .max_flat_workgroup_size).
const openCLDefaultFlatWorkgroup = 256

// workgroupAttributes sets k's workgroup limits as clang would compile
// them: reqd_work_group_size(x, y, z) is the only shape the kernel takes
// and its size the maximum; amdgpu_flat_work_group_size(lo, hi) sets the
// maximum; an AMD kernel with neither takes at most 256 work-items, so
// that a declared signature (no compiler) refuses the launches the
// compiled kernel would.
func workgroupAttributes(k *Signature, attrs []string) error {
	if k.Target.Family == AMD {
		k.MaxWorkgroupSize = openCLDefaultFlatWorkgroup
	}
	for _, a := range attrs {
		if v, ok, err := attributeArgs(a, "reqd_work_group_size", 3); err != nil {
			return err
		} else if ok {
			if v[0]*v[1]*v[2] == 0 || v[0]*v[1]*v[2] > maxWorkgroupItems {
				return fmt.Errorf("reqd_work_group_size%v is not a workgroup of 1 to %d work-items", v, maxWorkgroupItems)
			}
			k.ReqdWorkgroupSize = [3]uint32{v[0], v[1], v[2]}
			k.MaxWorkgroupSize = v[0] * v[1] * v[2]
		}
		if v, ok, err := attributeArgs(a, "amdgpu_flat_work_group_size", 2); err != nil {
			return err
		} else if ok && k.ReqdWorkgroupSize == [3]uint32{} {
			if v[1] == 0 || v[0] > v[1] || v[1] > maxWorkgroupItems {
				return fmt.Errorf("amdgpu_flat_work_group_size(%d, %d) is not a range within 1 to %d", v[0], v[1], maxWorkgroupItems)
			}
			k.MaxWorkgroupSize = v[1]
		}
	}
	return nil
}

// attributeArgs finds name(...) in an attribute's text and returns its n
// integer arguments.
func attributeArgs(attr, name string, n int) ([]uint32, bool, error) {
	i := strings.Index(attr, name)
	if i < 0 {
		return nil, false, nil
	}
	rest := strings.TrimSpace(attr[i+len(name):])
	if !strings.HasPrefix(rest, "(") {
		return nil, false, fmt.Errorf("%s without arguments", name)
	}
	end, err := closeParen(rest, 0)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	fields := strings.Split(rest[1:end-1], ",")
	if len(fields) != n {
		return nil, false, fmt.Errorf("%s takes %d arguments, not %d", name, n, len(fields))
	}
	v := make([]uint32, n)
	for j, f := range fields {
		x, err := strconv.ParseUint(strings.TrimSpace(strings.TrimRight(strings.TrimSpace(f), "uU")), 0, 32)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %q is not an integer the parser can read (declare the signature with WithDeclarations)", name, strings.TrimSpace(f))
		}
		v[j] = uint32(x)
	}
	return v, true, nil
}

// closeParen returns the index just past the parenthesis that closes the
// one at or after i.
func closeParen(s string, i int) (int, error) {
	depth := 0
	for ; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, errors.New("unbalanced parentheses")
}

// splitTopLevel splits a parameter list at the commas outside parentheses.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// declaredParam is a parameter with its alignment in the kernarg block.
type declaredParam struct {
	Param
	align       uint32
	unsupported string
}

// scalarType is an OpenCL C scalar type: its size and class.
type scalarType struct {
	size  uint32
	class ScalarClass
}

// openCLScalars are the OpenCL C scalar types a kernel argument may have,
// by the name clang's metadata gives them (.type_name); sizes on amdgcn.
var openCLScalars = map[string]scalarType{
	"char": {1, ClassInteger}, "uchar": {1, ClassInteger},
	"short": {2, ClassInteger}, "ushort": {2, ClassInteger},
	"int": {4, ClassInteger}, "uint": {4, ClassInteger},
	"long": {8, ClassInteger}, "ulong": {8, ClassInteger},
	"size_t": {8, ClassInteger}, "ptrdiff_t": {8, ClassInteger},
	"intptr_t": {8, ClassInteger}, "uintptr_t": {8, ClassInteger},
	"half": {2, ClassFloat}, "float": {4, ClassFloat}, "double": {8, ClassFloat},
}

// unsignedNames are the spellings clang's metadata shortens.
var unsignedNames = map[string]string{
	"unsigned char": "uchar", "unsigned short": "ushort", "unsigned int": "uint", "unsigned long": "ulong",
	"unsigned": "uint", "signed char": "char", "signed short": "short", "signed int": "int", "signed long": "long",
	"signed": "int", "long int": "long", "short int": "short", "unsigned long int": "ulong", "unsigned short int": "ushort",
}

// parseParam reads one parameter declaration, e.g. "global const float*
// restrict x" or "uint n", and returns it with its normalised text.
func parseParam(p string) (declaredParam, string, error) {
	p = strings.ReplaceAll(p, "*", " * ")
	fields := strings.Fields(p)
	if len(fields) < 2 {
		return declaredParam{}, "", errors.New("want a type and a name")
	}
	name := fields[len(fields)-1]
	if !isIdent(name) {
		return declaredParam{}, "", fmt.Errorf("%q is not a parameter name", name)
	}
	space, isConst, pointers := "", false, 0
	access := ""
	var typ []string
	for _, f := range fields[:len(fields)-1] {
		switch f {
		case "global", "__global", "constant", "__constant", "local", "__local", "private", "__private":
			space = strings.TrimPrefix(f, "__")
		case "const":
			// const before the '*' makes the data read-only; after it
			// ("float* const p") only the pointer itself.
			if pointers == 0 {
				isConst = true
			}
		case "volatile", "restrict", "__restrict", "__restrict__":
		case "read_only", "__read_only", "write_only", "__write_only", "read_write", "__read_write":
			access = strings.TrimPrefix(f, "__")
		case "*":
			pointers++
		default:
			if pointers > 0 {
				return declaredParam{}, "", fmt.Errorf("%q after the pointer", f)
			}
			typ = append(typ, f)
		}
	}
	base := strings.Join(typ, " ")
	if short, ok := unsignedNames[base]; ok {
		base = short
	}
	switch base {
	case "size_t", "ptrdiff_t", "intptr_t", "uintptr_t":
		if pointers == 0 {
			// OpenCL C forbids them as kernel parameters (their size is
			// the device's); clang refuses the kernel.
			return declaredParam{}, "", fmt.Errorf("%s cannot be the type of a kernel parameter (OpenCL C: use uint or ulong)", base)
		}
	}
	elem, ok := openCLScalars[base]
	vec := uint32(0)
	if !ok {
		elem, vec, ok = openCLVector(base)
	}
	if !ok {
		return declaredParam{}, "", fmt.Errorf("type %q is not an OpenCL scalar or vector type the parser knows (declare the signature in those with WithDeclarations)", base)
	}
	if access != "" {
		return declaredParam{}, "", fmt.Errorf("%s: images and pipes cannot be passed", access)
	}
	dp := declaredParam{Param: Param{Name: name}}
	switch {
	case pointers > 1:
		return declaredParam{}, "", errors.New("a pointer to a pointer cannot be passed")
	case pointers == 1:
		dp.Size, dp.align, dp.Kind, dp.TypeName = 8, 8, ParamBuffer, base+"*"
		switch space {
		case "global":
			dp.ReadOnly = isConst
		case "constant":
			dp.ReadOnly = true
		case "local":
			// A dynamic LDS pointer: its size is a launch parameter
			// rocsync does not take.
			dp.Kind = ParamScalar
			dp.Class = ClassOther
			dp.unsupported = fmt.Sprintf("argument %q is a pointer to local memory", name)
		default:
			return declaredParam{}, "", errors.New("a kernel's pointer parameters point to global or constant memory")
		}
	default:
		if space != "" && space != "private" {
			return declaredParam{}, "", fmt.Errorf("a %s value parameter", space)
		}
		dp.Kind, dp.Class, dp.TypeName = ParamScalar, elem.class, base
		dp.Size, dp.align = elem.size, elem.size
		if vec != 0 {
			n := vec
			if n == 3 {
				n = 4
			}
			dp.Size, dp.align, dp.Class = elem.size*n, elem.size*n, ClassOther
		}
	}
	var decl strings.Builder
	if space != "" && pointers == 1 {
		decl.WriteString(space + " ")
	}
	if isConst {
		decl.WriteString("const ")
	}
	decl.WriteString(base)
	if pointers == 1 {
		decl.WriteString("*")
	}
	decl.WriteString(" " + name)
	return dp, decl.String(), nil
}

// openCLVector reads a vector type name such as float4 into its element
// type and width.
func openCLVector(name string) (scalarType, uint32, bool) {
	for _, w := range []uint32{16, 8, 4, 3, 2} {
		if base, ok := strings.CutSuffix(name, strconv.Itoa(int(w))); ok {
			if elem, ok := openCLScalars[base]; ok {
				return elem, w, true
			}
		}
	}
	return scalarType{}, 0, false
}
