package kernels

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Metadata is the part of an AMDGPU code object's metadata note
// (NT_AMDGPU_METADATA) that a dispatcher needs.
type Metadata struct {
	Target  string // amdhsa.target, e.g. "amdgcn-amd-amdhsa--gfx90a"
	Version []int  // amdhsa.version: [1, 2] for code object v5
	Kernels []KernelMeta
}

// KernelMeta describes one kernel (an entry of amdhsa.kernels).
type KernelMeta struct {
	Name   string // .name, e.g. "rocsync_mul_f32"
	Symbol string // .symbol, the kernel descriptor, e.g. "rocsync_mul_f32.kd"
	Args   []ArgMeta

	KernargSegmentSize      uint32 // bytes of kernarg memory a dispatch must provide
	KernargSegmentAlign     uint32
	GroupSegmentFixedSize   uint32 // static LDS per workgroup
	PrivateSegmentFixedSize uint32 // scratch per work-item
	WavefrontSize           uint32
	MaxFlatWorkgroupSize    uint32 // largest workgroup the kernel accepts; 0 if not recorded
	// ReqdWorkgroupSize is .reqd_workgroup_size (OpenCL's
	// reqd_work_group_size attribute): the only workgroup shape the kernel
	// runs with; all zero if not recorded.
	ReqdWorkgroupSize [3]uint32
}

// ArgMeta describes one kernel argument (an entry of .args).
type ArgMeta struct {
	Name      string // empty unless built with -cl-kernel-arg-info
	Offset    uint32
	Size      uint32
	ValueKind string // e.g. "global_buffer", "by_value", "hidden_global_offset_x"

	// The optional descriptive fields; empty or false when not recorded.
	AddressSpace string // .address_space of a pointer: "global", "constant", ...
	TypeName     string // .type_name, e.g. "float*" (with -cl-kernel-arg-info)
	Access       string // .access: the declared read_only, write_only or read_write
	ActualAccess string // .actual_access: what the compiler found the kernel does
	IsConst      bool   // .is_const: a pointer to const
}

// Kernel finds a kernel by its descriptor symbol ("rocsync_mul_f32.kd") or
// by its name ("rocsync_mul_f32").
func (m *Metadata) Kernel(symbol string) (*KernelMeta, bool) {
	for i := range m.Kernels {
		k := &m.Kernels[i]
		if k.Symbol == symbol || k.Name == symbol {
			return k, true
		}
	}
	return nil, false
}

// ELF note identifying the metadata: owner "AMDGPU", type NT_AMDGPU_METADATA.
const (
	noteOwnerAMDGPU  = "AMDGPU"
	ntAMDGPUMetadata = 32
)

// ReadMetadata parses an AMDGPU code object: it finds the NT_AMDGPU_METADATA
// note, decodes its MessagePack, and checks that every kernel's descriptor
// symbol is in the dynamic symbol table, where the HSA loader looks it up.
// Malformed input gives an error, never a panic.
func ReadMetadata(codeObject []byte) (*Metadata, error) {
	f, err := elf.NewFile(bytes.NewReader(codeObject))
	if err != nil {
		return nil, fmt.Errorf("kernels: code object is not an ELF file: %w", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AMDGPU {
		return nil, fmt.Errorf("kernels: code object is for machine %v, not EM_AMDGPU", f.Machine)
	}

	desc, err := findMetadataNote(f)
	if err != nil {
		return nil, err
	}
	root, err := decodeMsgpack(desc)
	if err != nil {
		return nil, fmt.Errorf("kernels: metadata note: %w", err)
	}
	meta, err := metadataFrom(root)
	if err != nil {
		return nil, fmt.Errorf("kernels: metadata note: %w", err)
	}

	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("kernels: code object has no usable dynamic symbol table: %w", err)
	}
	descriptors := make(map[string]bool, len(syms))
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Section != elf.SHN_UNDEF {
			descriptors[s.Name] = true
		}
	}
	for _, k := range meta.Kernels {
		if !descriptors[k.Symbol] {
			return nil, fmt.Errorf("kernels: kernel %q: descriptor symbol %q is not defined in the dynamic symbol table", k.Name, k.Symbol)
		}
	}
	return meta, nil
}

// findMetadataNote returns the descriptor of the NT_AMDGPU_METADATA note.
func findMetadataNote(f *elf.File) ([]byte, error) {
	le := binary.LittleEndian // AMDGPU ELF files are little-endian
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_NOTE {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			return nil, fmt.Errorf("kernels: reading note section %s: %w", sec.Name, err)
		}
		// Each note: namesz, descsz, type (u32 each), then the name and
		// the descriptor, each padded to 4 bytes.
		for len(data) > 0 {
			if len(data) < 12 {
				return nil, fmt.Errorf("kernels: note section %s: truncated note header", sec.Name)
			}
			nameSize, descSize, noteType := uint64(le.Uint32(data)), uint64(le.Uint32(data[4:])), le.Uint32(data[8:])
			data = data[12:]
			nameEnd := align4(nameSize)
			descEnd := nameEnd + align4(descSize)
			if descEnd > uint64(len(data)) {
				return nil, fmt.Errorf("kernels: note section %s: note runs past the section", sec.Name)
			}
			name := strings.TrimRight(string(data[:nameSize]), "\x00")
			desc := data[nameEnd : nameEnd+descSize]
			data = data[descEnd:]
			if name == noteOwnerAMDGPU && noteType == ntAMDGPUMetadata {
				return desc, nil
			}
		}
	}
	return nil, errors.New("kernels: code object has no NT_AMDGPU_METADATA note (is it code object v3 or later?)")
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// metadataFrom converts the decoded msgpack map into Metadata.
func metadataFrom(root any) (*Metadata, error) {
	top, ok := root.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("top level is %s, not a map", describe(root))
	}
	var meta Metadata
	var err error
	if meta.Target, err = stringField(top, "amdhsa.target"); err != nil {
		return nil, err
	}
	versions, err := arrayField(top, "amdhsa.version")
	if err != nil {
		return nil, err
	}
	for i, v := range versions {
		n, err := toUint32(v)
		if err != nil {
			return nil, fmt.Errorf("amdhsa.version[%d]: %w", i, err)
		}
		meta.Version = append(meta.Version, int(n))
	}
	kernels, err := arrayField(top, "amdhsa.kernels")
	if err != nil {
		return nil, err
	}
	meta.Kernels = make([]KernelMeta, len(kernels))
	for i, kv := range kernels {
		if err := kernelFrom(kv, &meta.Kernels[i]); err != nil {
			return nil, fmt.Errorf("amdhsa.kernels[%d]: %w", i, err)
		}
	}
	return &meta, nil
}

func kernelFrom(v any, k *KernelMeta) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("is %s, not a map", describe(v))
	}
	var err error
	if k.Name, err = stringField(m, ".name"); err != nil {
		return err
	}
	if k.Symbol, err = stringField(m, ".symbol"); err != nil {
		return fmt.Errorf("%s: %w", k.Name, err)
	}
	for _, f := range []struct {
		key string
		dst *uint32
	}{
		{".kernarg_segment_size", &k.KernargSegmentSize},
		{".kernarg_segment_align", &k.KernargSegmentAlign},
		{".group_segment_fixed_size", &k.GroupSegmentFixedSize},
		{".private_segment_fixed_size", &k.PrivateSegmentFixedSize},
		{".wavefront_size", &k.WavefrontSize},
	} {
		if *f.dst, err = uint32Field(m, f.key); err != nil {
			return fmt.Errorf("%s: %w", k.Name, err)
		}
	}
	if _, present := m[".max_flat_workgroup_size"]; present {
		if k.MaxFlatWorkgroupSize, err = uint32Field(m, ".max_flat_workgroup_size"); err != nil {
			return fmt.Errorf("%s: %w", k.Name, err)
		}
	}
	if _, present := m[".reqd_workgroup_size"]; present {
		dims, err := arrayField(m, ".reqd_workgroup_size")
		if err != nil {
			return fmt.Errorf("%s: %w", k.Name, err)
		}
		if len(dims) != 3 {
			return fmt.Errorf("%s: .reqd_workgroup_size has %d entries, not 3", k.Name, len(dims))
		}
		for i, d := range dims {
			if k.ReqdWorkgroupSize[i], err = toUint32(d); err != nil {
				return fmt.Errorf("%s: .reqd_workgroup_size[%d]: %w", k.Name, i, err)
			}
		}
	}
	if _, present := m[".args"]; !present {
		return nil // a kernel without arguments has no .args
	}
	args, err := arrayField(m, ".args")
	if err != nil {
		return fmt.Errorf("%s: %w", k.Name, err)
	}
	k.Args = make([]ArgMeta, len(args))
	for i, av := range args {
		if err := argFrom(av, &k.Args[i]); err != nil {
			return fmt.Errorf("%s: .args[%d]: %w", k.Name, i, err)
		}
	}
	return nil
}

func argFrom(v any, a *ArgMeta) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("is %s, not a map", describe(v))
	}
	var err error
	if _, present := m[".name"]; present {
		if a.Name, err = stringField(m, ".name"); err != nil {
			return err
		}
	}
	if a.Offset, err = uint32Field(m, ".offset"); err != nil {
		return err
	}
	if a.Size, err = uint32Field(m, ".size"); err != nil {
		return err
	}
	if a.ValueKind, err = stringField(m, ".value_kind"); err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		dst *string
	}{
		{".address_space", &a.AddressSpace},
		{".type_name", &a.TypeName},
		{".access", &a.Access},
		{".actual_access", &a.ActualAccess},
	} {
		if _, present := m[f.key]; present {
			if *f.dst, err = stringField(m, f.key); err != nil {
				return err
			}
		}
	}
	if v, present := m[".is_const"]; present {
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf(".is_const is %s, not a bool", describe(v))
		}
		a.IsConst = b
	}
	return nil
}

func stringField(m map[string]any, key string) (string, error) {
	v, present := m[key]
	if !present {
		return "", fmt.Errorf("%s is missing", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s is %s, not a string", key, describe(v))
	}
	return s, nil
}

func arrayField(m map[string]any, key string) ([]any, error) {
	v, present := m[key]
	if !present {
		return nil, fmt.Errorf("%s is missing", key)
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is %s, not an array", key, describe(v))
	}
	return a, nil
}

func uint32Field(m map[string]any, key string) (uint32, error) {
	v, present := m[key]
	if !present {
		return 0, fmt.Errorf("%s is missing", key)
	}
	n, err := toUint32(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return n, nil
}

// toUint32 accepts any msgpack integer encoding whose value fits in a
// uint32: encoders pick the smallest encoding, signed or not.
func toUint32(v any) (uint32, error) {
	switch n := v.(type) {
	case uint64:
		if n <= math.MaxUint32 {
			return uint32(n), nil
		}
	case int64:
		if n >= 0 && n <= math.MaxUint32 {
			return uint32(n), nil
		}
	default:
		return 0, fmt.Errorf("is %s, not an integer", describe(v))
	}
	return 0, fmt.Errorf("%v does not fit in 32 bits", v)
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case bool:
		return "a bool"
	case int64, uint64:
		return "an integer"
	case float64:
		return "a float"
	case string:
		return "a string"
	case []byte:
		return "binary data"
	case []any:
		return "an array"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}
