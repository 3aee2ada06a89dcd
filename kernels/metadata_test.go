package kernels

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestEmbeddedKernelMetadata checks, for every embedded code object (every
// target, every code-object version) and every kernel, that the compiler
// laid out the arguments exactly as Layout (and so Args.Encode) assumes,
// and that a dispatcher needs nothing beyond the 40 kernarg bytes: no
// hidden arguments (v4 would put hidden_global_offset_x... after them, v5
// hidden_block_count_x...), no LDS, no scratch.
func TestEmbeddedKernelMetadata(t *testing.T) {
	// amdhsa.version per code-object version (AMDGPUUsage, "Code Object
	// Metadata"): v4 is 1.1, v5 is 1.2.
	// v6 keeps v5's 1.2 (its changes are in the ELF header: the generic
	// version in e_flags).
	metaVersion := map[CodeObjectVersion][]int{CodeObjectV4: {1, 1}, CodeObjectV5: {1, 2}, CodeObjectV6: {1, 2}}
	seen := 0
	for _, gfx := range append(Targets(), GenericTargets()...) {
		for _, v := range mustVersions(t, gfx) {
			seen++
			t.Run(gfx+"/"+v.String(), func(t *testing.T) {
				co, err := CodeObjectFor(gfx, v)
				if err != nil {
					t.Fatal(err)
				}
				meta, err := ReadMetadata(co)
				if err != nil {
					t.Fatal(err)
				}
				if want := "amdgcn-amd-amdhsa--" + gfx; meta.Target != want {
					t.Errorf("amdhsa.target = %q, want %q (no feature settings)", meta.Target, want)
				}
				if !slices.Equal(meta.Version, metaVersion[v]) {
					t.Errorf("amdhsa.version = %v, want %v (code object %s)", meta.Version, metaVersion[v], v)
				}
				if want := (len(AllOps()) + len(AllReductions())) * len(AllDTypes()); len(meta.Kernels) != want {
					t.Errorf("%d kernels, want %d", len(meta.Kernels), want)
				}
				for _, k := range meta.Kernels {
					_, _, elementwise := ParseSymbol(k.Symbol)
					_, _, reduction := ParseReductionSymbol(k.Symbol)
					if !elementwise && !reduction {
						t.Errorf("unexpected kernel %q", k.Symbol)
					}
				}
				for _, r := range AllReductions() {
					for _, dt := range AllDTypes() {
						k, ok := meta.Kernel(r.Symbol(dt))
						if !ok {
							t.Errorf("no kernel %s", r.Symbol(dt))
							continue
						}
						checkReductionMeta(t, gfx, r, dt, k)
					}
				}
				for _, op := range AllOps() {
					for _, dt := range AllDTypes() {
						k, ok := meta.Kernel(op.Symbol(dt))
						if !ok {
							t.Errorf("no kernel %s", op.Symbol(dt))
							continue
						}
						checkKernelMeta(t, gfx, op, dt, k)
					}
				}
			})
		}
	}
	// 17 targets in v5, the seven that ROCm 5.0-5.2 know also in v4, 6 generic
	// targets in v6.
	if want := len(wantTargets) + len(wantV4Targets) + len(wantGenericTargets); seen != want {
		t.Errorf("checked %d code objects, want %d", seen, want)
	}
}

// familyMember returns gfx, or for a generic target the first processor
// (by name) of its family: the code runs on the members, whose wavefront
// size Wavefront knows.
func familyMember(gfx string) string {
	if !strings.HasSuffix(gfx, "-generic") {
		return gfx
	}
	var members []string
	for m, g := range genericOf {
		if g == gfx {
			members = append(members, m)
		}
	}
	slices.Sort(members)
	if len(members) == 0 {
		return gfx
	}
	return members[0]
}

func checkKernelMeta(t *testing.T, gfx string, op Op, dt DType, k *KernelMeta) {
	t.Helper()
	sym := op.Symbol(dt)
	if k.Name != op.KernelName(dt) {
		t.Errorf("%s: .name = %q", sym, k.Name)
	}
	if len(k.Args) != len(Layout) {
		t.Errorf("%s: %d args, want %d: %+v", sym, len(k.Args), len(Layout), k.Args)
	}
	for i, arg := range k.Args {
		if strings.HasPrefix(arg.ValueKind, "hidden_") {
			t.Errorf("%s: hidden argument %+v; the dispatcher would have to fill it", sym, arg)
			continue
		}
		if i >= len(Layout) {
			continue
		}
		spec := Layout[i]
		want := ArgMeta{Name: spec.Name, Offset: spec.Offset, Size: spec.Size(dt), ValueKind: spec.Kind}
		core := ArgMeta{Name: arg.Name, Offset: arg.Offset, Size: arg.Size, ValueKind: arg.ValueKind}
		if core != want {
			t.Errorf("%s: arg %d = %+v, Layout says %+v", sym, i, arg, want)
		}
		// The descriptive fields: the inputs a and b are pointers to
		// const, out is not, and every pointer is global.
		if isPtr := spec.Kind == KindGlobalBuffer; isPtr != (arg.AddressSpace == "global") {
			t.Errorf("%s: arg %d (%s) .address_space = %q", sym, i, spec.Name, arg.AddressSpace)
		}
		if wantConst := spec.Name == "a" || spec.Name == "b"; arg.IsConst != wantConst {
			t.Errorf("%s: arg %d (%s) .is_const = %v, want %v", sym, i, spec.Name, arg.IsConst, wantConst)
		}
		if arg.TypeName == "" {
			t.Errorf("%s: arg %d (%s) has no .type_name (built with -cl-kernel-arg-info)", sym, i, spec.Name)
		}
	}
	if k.KernargSegmentSize != KernargSize {
		t.Errorf("%s: .kernarg_segment_size = %d, want %d", sym, k.KernargSegmentSize, KernargSize)
	}
	if k.KernargSegmentAlign == 0 || KernargAlign%k.KernargSegmentAlign != 0 {
		t.Errorf("%s: .kernarg_segment_align = %d does not divide KernargAlign %d", sym, k.KernargSegmentAlign, KernargAlign)
	}
	if k.GroupSegmentFixedSize != 0 || k.PrivateSegmentFixedSize != 0 {
		t.Errorf("%s: group/private segment = %d/%d, want 0/0", sym, k.GroupSegmentFixedSize, k.PrivateSegmentFixedSize)
	}
	if want := Wavefront(familyMember(gfx)); int(k.WavefrontSize) != want {
		t.Errorf("%s: .wavefront_size = %d, Wavefront(%s) = %d", sym, k.WavefrontSize, familyMember(gfx), want)
	}
	if ws := DefaultWorkgroupSize(gfx); k.MaxFlatWorkgroupSize < uint32(ws) {
		t.Errorf("%s: .max_flat_workgroup_size = %d < DefaultWorkgroupSize %d", sym, k.MaxFlatWorkgroupSize, ws)
	}
	checkEncodeAgainstMeta(t, sym, dt, k.Args)
}

// checkEncodeAgainstMeta encodes distinctive values and reads each one back
// from the offset and size the compiler recorded, independently of Layout;
// bytes outside every argument must be zero.
func checkEncodeAgainstMeta(t *testing.T, sym string, dt DType, args []ArgMeta) {
	t.Helper()
	in := Args{Out: 0x1111_2222_3333_4444, A: 0x5555_6666_7777_8888, B: 0x9999_aaaa_bbbb_cccc, Alpha: -3.25, N: 0x0102_0304_0506_0708}
	buf := bytes.Repeat([]byte{0xEE}, KernargSize)
	in.Encode(buf, dt)
	covered := make([]bool, KernargSize)
	le := binary.LittleEndian
	for _, arg := range args {
		end := uint64(arg.Offset) + uint64(arg.Size)
		if end > KernargSize {
			t.Errorf("%s: arg %s ends at %d, past KernargSize", sym, arg.Name, end)
			continue
		}
		field := buf[arg.Offset:end]
		for i := arg.Offset; i < uint32(end); i++ {
			covered[i] = true
		}
		var got, want uint64
		switch arg.Name {
		case "out":
			got, want = le.Uint64(field), in.Out
		case "a":
			got, want = le.Uint64(field), in.A
		case "b":
			got, want = le.Uint64(field), in.B
		case "n":
			got, want = le.Uint64(field), in.N
		case "alpha":
			if arg.Size == 4 {
				got, want = uint64(le.Uint32(field)), uint64(math.Float32bits(float32(in.Alpha)))
			} else {
				got, want = le.Uint64(field), math.Float64bits(in.Alpha)
			}
		default:
			t.Errorf("%s: unknown argument %q", sym, arg.Name)
			continue
		}
		if got != want {
			t.Errorf("%s: at the metadata offset of %s (%d, %d bytes) Encode wrote %#x, want %#x", sym, arg.Name, arg.Offset, arg.Size, got, want)
		}
	}
	for i, c := range covered {
		if !c && buf[i] != 0 {
			t.Errorf("%s: padding byte %d = %#x, want 0", sym, i, buf[i])
		}
	}
}

func TestKernelLookupByName(t *testing.T) {
	co, _ := CodeObject("gfx942")
	meta, err := ReadMetadata(co)
	if err != nil {
		t.Fatal(err)
	}
	k1, ok1 := meta.Kernel("rocsync_relu_f64")
	k2, ok2 := meta.Kernel("rocsync_relu_f64.kd")
	if !ok1 || !ok2 || k1 != k2 {
		t.Errorf("Kernel by name and by symbol disagree: %v %v", k1, k2)
	}
	if _, ok := meta.Kernel("rocsync_relu_f16.kd"); ok {
		t.Error("found a kernel that does not exist")
	}
}

func TestReadMetadataRejectsMalformed(t *testing.T) {
	good, _ := CodeObject("gfx90a")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		self = nil
	}

	// The note comes before .dynstr, so the first occurrence of a symbol
	// name is the metadata's .symbol.
	renamed := bytes.Clone(good)
	i := bytes.Index(renamed, []byte("rocsync_mul_f32.kd"))
	copy(renamed[i:], "rocsync_mul_f32.kx")

	// Break the msgpack: turn the top-level map's first key string into an
	// extension type byte.
	badNote := bytes.Clone(good)
	j := bytes.Index(badNote, []byte("amdhsa."))
	badNote[j-1] = 0xd4

	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":          {nil, "not an ELF file"},
		"text":           {[]byte("not an elf at all"), "not an ELF file"},
		"host ELF":       {self, "not EM_AMDGPU"},
		"half":           {good[:len(good)/2], ""},
		"missing symbol": {renamed, `descriptor symbol "rocsync_mul_f32.kx" is not defined`},
		"bad msgpack":    {badNote, "msgpack: unsupported type byte 0xd4"},
	} {
		if tc.data == nil && name == "host ELF" {
			continue
		}
		meta, err := ReadMetadata(tc.data)
		if err == nil {
			t.Errorf("%s: ReadMetadata succeeded: %+v", name, meta)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not mention %q", name, err, tc.want)
		}
	}

	// Every truncation must fail cleanly (those that keep the note and the
	// symbols intact may succeed).
	for n := 0; n < len(good); n += 61 {
		_, _ = ReadMetadata(good[:n])
	}
}

func TestMsgpackDecode(t *testing.T) {
	data := []byte{0x8d,
		0xa1, 'a', 0xff, // -1
		0xa1, 'b', 0xd1, 0xfe, 0xd4, // int16 -300
		0xa1, 'c', 0xcd, 0x01, 0x2c, // uint16 300
		0xa1, 'd', 0xca, 0x3f, 0xc0, 0, 0, // float32 1.5
		0xa1, 'e', 0xcb, 0x40, 0x04, 0, 0, 0, 0, 0, 0, // float64 2.5
		0xa1, 'f', 0xc0, // nil
		0xa1, 'g', 0xc3, // true
		0xa1, 'h', 0xc4, 0x02, 1, 2, // bin8
		0xa1, 'i', 0xdc, 0x00, 0x02, 0x01, 0xc2, // array16 [1, false]
		0xa1, 'j', 0xd9, 0x02, 'x', 'y', // str8
		0xa1, 'k', 0xde, 0x00, 0x00, // map16 {}
		0xa1, 'l', 0xd3, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, // int64 -2^40
		0xa1, 'm', 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // uint64 max
		0, 0, 0, // note padding
	}
	got, err := decodeMsgpack(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": int64(-1), "b": int64(-300), "c": uint64(300), "d": 1.5, "e": 2.5, "f": nil, "g": true,
		"h": []byte{1, 2}, "i": []any{uint64(1), false}, "j": "xy", "k": map[string]any{},
		"l": int64(-1 << 40), "m": uint64(math.MaxUint64),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decodeMsgpack =\n%#v\nwant\n%#v", got, want)
	}

	deep := append(bytes.Repeat([]byte{0x91}, maxMsgpackDepth+1), 0x01)
	for name, bad := range map[string][]byte{
		"empty":        {},
		"ext":          {0xd4, 0x01, 0x02},
		"never used":   {0xc1},
		"short str":    {0xa5, 'a'},
		"huge array":   {0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge map":     {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a'},
		"huge bin":     {0xc6, 0xff, 0xff, 0xff, 0xff},
		"short int":    {0xd2, 0x01},
		"int key":      {0x81, 0x01, 0x01},
		"duplicate":    {0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02},
		"trailing":     {0x01, 0x02},
		"too deep":     deep,
		"missing val":  {0x81, 0xa1, 'a'},
		"short float":  {0xcb, 0x40},
		"short array":  {0x92, 0x01},
		"short len 32": {0xdb, 0x00, 0x00},
	} {
		if v, err := decodeMsgpack(bad); err == nil {
			t.Errorf("%s: decodeMsgpack(% x) = %#v, want an error", name, bad, v)
		}
	}
}

func TestMetadataFromRejectsWrongShapes(t *testing.T) {
	kernel := func(edit func(map[string]any)) any {
		k := map[string]any{
			".name": "k", ".symbol": "k.kd",
			".kernarg_segment_size": uint64(8), ".kernarg_segment_align": uint64(8),
			".group_segment_fixed_size": uint64(0), ".private_segment_fixed_size": uint64(0),
			".wavefront_size": uint64(64),
			".args":           []any{map[string]any{".offset": uint64(0), ".size": uint64(8), ".value_kind": "by_value"}},
		}
		edit(k)
		return map[string]any{"amdhsa.target": "t", "amdhsa.version": []any{uint64(1), uint64(2)}, "amdhsa.kernels": []any{k}}
	}
	if _, err := metadataFrom(kernel(func(map[string]any) {})); err != nil {
		t.Fatalf("well-formed metadata rejected: %v", err)
	}
	for name, edit := range map[string]func(map[string]any){
		"no name":        func(k map[string]any) { delete(k, ".name") },
		"symbol int":     func(k map[string]any) { k[".symbol"] = uint64(3) },
		"negative size":  func(k map[string]any) { k[".kernarg_segment_size"] = int64(-1) },
		"size too big":   func(k map[string]any) { k[".kernarg_segment_size"] = uint64(1 << 40) },
		"float wave":     func(k map[string]any) { k[".wavefront_size"] = 64.0 },
		"args not array": func(k map[string]any) { k[".args"] = "x" },
		"arg not map":    func(k map[string]any) { k[".args"] = []any{uint64(1)} },
		"arg no offset": func(k map[string]any) {
			k[".args"] = []any{map[string]any{".size": uint64(8), ".value_kind": "by_value"}}
		},
	} {
		if _, err := metadataFrom(kernel(edit)); err == nil {
			t.Errorf("%s: metadata accepted", name)
		}
	}
	for name, root := range map[string]any{
		"not a map":      []any{},
		"no target":      map[string]any{"amdhsa.version": []any{}, "amdhsa.kernels": []any{}},
		"bad version":    map[string]any{"amdhsa.target": "t", "amdhsa.version": []any{"1"}, "amdhsa.kernels": []any{}},
		"kernels no arr": map[string]any{"amdhsa.target": "t", "amdhsa.version": []any{}, "amdhsa.kernels": uint64(1)},
	} {
		if _, err := metadataFrom(root); err == nil {
			t.Errorf("%s: metadata accepted", name)
		}
	}
}

func FuzzReadMetadata(f *testing.F) {
	co, err := CodeObject("gfx1100")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(co)
	f.Add(co[:1024])
	v4, err := CodeObjectFor("gfx1030", CodeObjectV4)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v4)
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		meta, err := ReadMetadata(data)
		if err != nil {
			return
		}
		for _, k := range meta.Kernels {
			if k.Symbol == "" {
				t.Errorf("accepted a kernel with no symbol: %+v", k)
			}
		}
	})
}
