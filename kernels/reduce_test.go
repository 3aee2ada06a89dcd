package kernels

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestReductionNames(t *testing.T) {
	want := map[Reduction]string{SumAll: "rocsync_sum_all_f32", SumRows: "rocsync_sum_rows_f32", SumCols: "rocsync_sum_cols_f32"}
	for r, name := range want {
		if got := r.KernelName(F32); got != name {
			t.Errorf("%v.KernelName(F32) = %q, want %q", r, got, name)
		}
	}
	for _, r := range AllReductions() {
		for _, dt := range AllDTypes() {
			for _, sym := range []string{r.Symbol(dt), r.KernelName(dt)} {
				gr, gdt, ok := ParseReductionSymbol(sym)
				if !ok || gr != r || gdt != dt {
					t.Errorf("ParseReductionSymbol(%q) = %v, %v, %v", sym, gr, gdt, ok)
				}
				// The two name spaces do not overlap: the emulator and the
				// simulated driver pick the executor by name.
				if op, odt, ok := ParseSymbol(sym); ok {
					t.Errorf("ParseSymbol(%q) = %v %v: a reduction parses as an elementwise op", sym, op, odt)
				}
			}
		}
	}
	for _, op := range AllOps() {
		if _, _, ok := ParseReductionSymbol(op.Symbol(F32)); ok {
			t.Errorf("ParseReductionSymbol(%q) accepted an elementwise kernel", op.Symbol(F32))
		}
	}
	for _, bad := range []string{"", "rocsync_sum_f32", "rocsync_sum_all_f16", "rocsync_sum_all", "sum_all_f32", "rocsync_sum_all_f32.kd.kd"} {
		if _, _, ok := ParseReductionSymbol(bad); ok {
			t.Errorf("ParseReductionSymbol(%q) accepted", bad)
		}
	}
	if got := Reduction(9).String(); got != "Reduction(9)" || Reduction(9).Valid() {
		t.Errorf("Reduction(9) = %q, valid %v", got, Reduction(9).Valid())
	}
}

// The constants the kernels and the Go side must agree on are written
// once in each language; this keeps them equal.
func TestReduceSourceMatchesGo(t *testing.T) {
	src, err := os.ReadFile("src/reduce.cl")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"RS_LANES": ReduceWorkgroupSize, "RS_CHUNK": ReduceChunk, "RS_MAX_SLICES": ReduceMaxSlices} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("src/reduce.cl does not #define %s", name)
			continue
		}
		if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("src/reduce.cl: %s = %d, Go says %d", name, got, want)
		}
	}
	for _, r := range AllReductions() {
		kind := strings.TrimPrefix(r.String(), "sum_")
		if !bytes.Contains(src, []byte("RS_REDUCE("+kind+",")) {
			t.Errorf("src/reduce.cl has no RS_REDUCE(%s, ...)", kind)
		}
	}
}

func TestReduceShape(t *testing.T) {
	for _, tc := range []struct {
		r                 Reduction
		rows, cols        uint64
		outputs, length   uint64
		slices, sliceLen  uint64
		workspaceF32Bytes uint64
	}{
		{SumAll, 1, 1, 1, 1, 1, 1, 0},
		{SumAll, 0, 5, 1, 0, 1, 0, 0},
		{SumAll, 1, 4096, 1, 4096, 1, 4096, 0},
		{SumAll, 1, 4097, 1, 4097, 2, 2049, 8 + 2*4},
		{SumAll, 1000, 1000, 1, 1e6, 245, 4082, 8 + 245*4},
		{SumAll, 1 << 20, 1 << 10, 1, 1 << 30, 256, 1 << 22, 8 + 256*4},
		{SumRows, 3, 5, 3, 5, 1, 5, 0},
		{SumRows, 3, 5000, 3, 5000, 2, 2500, 16 + 3*2*4},
		{SumCols, 5000, 3, 3, 5000, 2, 2500, 16 + 3*2*4},
		{SumCols, 7, 0, 0, 7, 1, 7, 0},
	} {
		s, err := tc.r.Shape(tc.rows, tc.cols)
		if err != nil {
			t.Fatal(err)
		}
		want := ReduceShape{tc.outputs, tc.length, tc.slices, tc.sliceLen}
		if s != want {
			t.Errorf("%v.Shape(%d, %d) = %+v, want %+v", tc.r, tc.rows, tc.cols, s, want)
		}
		if got := s.WorkspaceSize(F32); got != tc.workspaceF32Bytes {
			t.Errorf("%v %dx%d: WorkspaceSize(F32) = %d, want %d", tc.r, tc.rows, tc.cols, got, tc.workspaceF32Bytes)
		}
		if s.SliceLen*s.Slices < s.Length || (s.Slices > 1 && s.SliceLen*(s.Slices-1) >= s.Length) {
			t.Errorf("%v %dx%d: %d slices of %d do not tile %d elements without an empty one", tc.r, tc.rows, tc.cols, s.Slices, s.SliceLen, s.Length)
		}
	}
	if _, err := SumAll.Shape(1<<40, 1<<30); !errors.Is(err, ErrReduceShape) {
		t.Errorf("overflowing shape: %v", err)
	}
	if _, err := Reduction(7).Shape(1, 1); err == nil {
		t.Error("invalid Reduction accepted")
	}
}

func TestReduceArgsEncode(t *testing.T) {
	a := ReduceArgs{Out: 0x1111, In: 0x2222_0000_0000, Workspace: 0x3333, Rows: 7, Cols: 1 << 40}
	buf := bytes.Repeat([]byte{0xEE}, ReduceKernargSize)
	a.Encode(buf)
	if got := DecodeReduceArgs(buf); got != a {
		t.Errorf("DecodeReduceArgs(Encode(%+v)) = %+v", a, got)
	}
	if got := binary.LittleEndian.Uint64(buf[ReduceOffsetCols:]); got != 1<<40 {
		t.Errorf("cols at %d = %#x", ReduceOffsetCols, got)
	}
	if testing.AllocsPerRun(100, func() { a.Encode(buf) }) != 0 {
		t.Error("Encode allocates")
	}
}

// reduceInputs gives values whose sum depends on the order: mixed signs and
// magnitudes, and a few specials at the front.
func reduceInputs(n uint64, seed uint64) []float64 {
	r := rand.New(rand.NewPCG(seed, n))
	v := make([]float64, n)
	for i := range v {
		v[i] = (r.Float64() - 0.5) * math.Pow(2, float64(r.IntN(40)-20))
	}
	if n > 2 {
		v[0], v[1] = math.Copysign(0, -1), 1e-40
	}
	return v
}

var reduceSizes = [][2]uint64{
	{1, 1}, {1, 255}, {1, 257}, {3, 100}, {1, 4096}, {1, 4097}, {2, 5000}, {13, 777},
	{5000, 3}, {4100, 2}, {300, 300}, {1, 70_001}, {0, 4}, {4, 0},
}

func bytesF32(v []float64) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
	}
	return b
}

func bytesF64(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

// Unaligned input takes the element-by-element path; it gives the same bits.
func TestReduceBytesUnalignedInput(t *testing.T) {
	rows, cols := uint64(3), uint64(5000)
	for _, dt := range AllDTypes() {
		vals := reduceInputs(rows*cols, 4)
		in := bytesF64(vals)
		if dt == F32 {
			in = bytesF32(vals)
		}
		shifted := append(make([]byte, 1, len(in)+1), in...)[1:]
		for _, r := range AllReductions() {
			s, _ := r.Shape(rows, cols)
			a, b := make([]byte, s.Outputs*uint64(dt.Size())), make([]byte, s.Outputs*uint64(dt.Size()))
			if err := ReduceBytes(r, dt, a, in, make([]byte, s.WorkspaceSize(dt)), rows, cols); err != nil {
				t.Fatal(err)
			}
			if err := ReduceBytes(r, dt, b, shifted, make([]byte, s.WorkspaceSize(dt)), rows, cols); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%v %v: unaligned input gives other bits", r, dt)
			}
		}
	}
}

// TestReduceBytesMatchesReference checks the workspace-protocol model
// against the plain reference bit for bit, that both are sums (close to an
// exactly rounded one), and that the workspace is zero afterwards.
func TestReduceBytesMatchesReference(t *testing.T) {
	for _, sz := range reduceSizes {
		rows, cols := sz[0], sz[1]
		vals := reduceInputs(rows*cols, 1)
		for _, r := range AllReductions() {
			s, _ := r.Shape(rows, cols)
			for _, dt := range AllDTypes() {
				in := bytesF64(vals)
				if dt == F32 {
					in = bytesF32(vals)
				}
				out := bytes.Repeat([]byte{0xAB}, int(s.Outputs)*dt.Size())
				ws := make([]byte, s.WorkspaceSize(dt))
				if err := ReduceBytes(r, dt, out, in, ws, rows, cols); err != nil {
					t.Fatalf("%v %v %dx%d: %v", r, dt, rows, cols, err)
				}
				if err := CheckZeroed(ws); err != nil {
					t.Errorf("%v %v %dx%d: workspace left dirty: %v", r, dt, rows, cols, err)
				}
				want := refOutputs(r, dt, vals, rows, cols)
				if !bytes.Equal(out, want) {
					t.Errorf("%v %v %dx%d: ReduceBytes differs from RefReduce", r, dt, rows, cols)
				}
				checkCloseToExact(t, r, dt, out, vals, rows, cols)
			}
		}
	}
}

func refOutputs(r Reduction, dt DType, vals []float64, rows, cols uint64) []byte {
	s, _ := r.Shape(rows, cols)
	if dt == F32 {
		in := make([]float32, len(vals))
		for i, v := range vals {
			in[i] = float32(v)
		}
		out := make([]float32, s.Outputs)
		RefReduceF32(r, out, in, rows, cols)
		o := make([]float64, len(out))
		for i, v := range out {
			o[i] = float64(v)
		}
		return bytesF32(o)
	}
	out := make([]float64, s.Outputs)
	RefReduceF64(r, out, vals, rows, cols)
	return bytesF64(out)
}

// checkCloseToExact compares each output with a compensated sum of the
// same (rounded) inputs: a wrong index or a dropped element is far off, a
// different order is a few ulps of the largest partial.
func checkCloseToExact(t *testing.T, r Reduction, dt DType, out []byte, vals []float64, rows, cols uint64) {
	t.Helper()
	s, _ := r.Shape(rows, cols)
	for j := uint64(0); j < s.Outputs; j++ {
		var sum, comp, abs float64
		for k := uint64(0); k < s.Length; k++ {
			var idx uint64
			switch r {
			case SumAll:
				idx = k
			case SumRows:
				idx = j*cols + k
			case SumCols:
				idx = k*cols + j
			}
			x := vals[idx]
			if dt == F32 {
				x = float64(float32(x))
			}
			y := x - comp
			tt := sum + y
			comp = (tt - sum) - y
			sum = tt
			abs += math.Abs(x)
		}
		var got float64
		eps := 0x1p-52
		if dt == F32 {
			got = float64(loadF32(out, j))
			eps = 0x1p-23
		} else {
			got = loadF64(out, j)
		}
		if tol := eps * abs * float64(8+s.Length/256); math.Abs(got-sum) > tol {
			t.Errorf("%v %v %dx%d output %d = %g, exact sum %g (tolerance %g)", r, dt, rows, cols, j, got, sum, tol)
		}
	}
}

// The order is the kernels' (lane-strided, then a tree), not a left fold:
// with values where order matters, the two differ. If this fails the test
// above would not catch a reference that merely sums.
func TestReduceOrderIsNotALeftFold(t *testing.T) {
	vals := []float32{1e8, 1, -1e8, 1}
	in := make([]float32, 600)
	for i := range in {
		in[i] = vals[i%4] * float32(1+i%7)
	}
	var out [1]float32
	RefReduceF32(SumAll, out[:], in, 1, uint64(len(in)))
	var fold float32
	for _, v := range in {
		fold += v
	}
	if out[0] == fold {
		t.Errorf("reference equals the left fold (%g); the test inputs do not tell the orders apart", fold)
	}
}

// TestLaneTreeSkip: the tree that skips the all-zero lanes gives the bits of
// the kernels' full tree, for lane values as the kernels make them (each
// +0 plus elements, so never -0), specials included.
func TestLaneTreeSkip(t *testing.T) {
	g := rand.New(rand.NewPCG(7, 7))
	specials := []float64{math.Copysign(0, -1), 0, math.Inf(1), math.Inf(-1), 1e-310, -1e-310, 1e300, -1e300}
	for trial := range 20000 {
		active := 1 + g.IntN(ReduceWorkgroupSize)
		var a, b [ReduceWorkgroupSize]float64
		var c, d [ReduceWorkgroupSize]float32
		for l := range active {
			x := (g.Float64() - 0.5) * math.Pow(2, float64(g.IntN(80)-40))
			if g.IntN(10) == 0 {
				x = specials[g.IntN(len(specials))]
			}
			a[l] = 0 + x // as a lane: +0 plus its elements
			c[l] = 0 + float32(x)
		}
		b, d = a, c
		got, want := laneTree(&a, active), laneTreeFull(&b)
		if math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("trial %d f64, %d active: %v, full tree %v", trial, active, got, want)
		}
		got32, want32 := laneTree(&c, active), laneTreeFull(&d)
		if math.Float32bits(got32) != math.Float32bits(want32) && !(got32 != got32 && want32 != want32) {
			t.Fatalf("trial %d f32, %d active: %v, full tree %v", trial, active, got32, want32)
		}
	}
}

func TestCheckZeroed(t *testing.T) {
	if err := CheckZeroed(nil); err != nil {
		t.Fatal(err)
	}
	ws := make([]byte, 37)
	if err := CheckZeroed(ws); err != nil {
		t.Fatal(err)
	}
	for i := range ws {
		ws[i] = 0x40
		err := CheckZeroed(ws)
		var nz *WorkspaceNotZeroError
		if !errors.As(err, &nz) || !errors.Is(err, ErrWorkspaceNotZero) || nz.Offset != uint64(i) || nz.Value != 0x40 || nz.Size != 37 {
			t.Errorf("byte %d dirty: CheckZeroed = %v", i, err)
		}
		ws[i] = 0
	}
	if testing.AllocsPerRun(100, func() { _ = CheckZeroed(ws) }) != 0 {
		t.Error("CheckZeroed allocates on a zero workspace")
	}
}

// TestReduceBytesRefusesDirtyWorkspace is the reference's checkZeroed: a
// semaphore or a partial left non-zero is an error, and out is untouched.
func TestReduceBytesRefusesDirtyWorkspace(t *testing.T) {
	rows, cols := uint64(3), uint64(5000) // 2 slices per row
	in := bytesF32(reduceInputs(rows*cols, 2))
	s, _ := SumRows.Shape(rows, cols)
	size := s.WorkspaceSize(F32)
	for _, dirty := range []uint64{0, 4 * 2, size - 1} { // semaphore 0, semaphore 2, last partial
		ws := make([]byte, size)
		ws[dirty] = 1
		out := bytes.Repeat([]byte{0xCD}, int(s.Outputs)*4)
		err := ReduceBytes(SumRows, F32, out, in, ws, rows, cols)
		var nz *WorkspaceNotZeroError
		if !errors.As(err, &nz) || nz.Offset != dirty {
			t.Errorf("dirty byte %d: ReduceBytes = %v", dirty, err)
		}
		if !bytes.Equal(out, bytes.Repeat([]byte{0xCD}, len(out))) {
			t.Errorf("dirty byte %d: out was written", dirty)
		}
	}
	// Short buffers are errors, not panics.
	ws := make([]byte, size)
	for name, call := range map[string]func() error{
		"in":        func() error { return ReduceBytes(SumRows, F32, make([]byte, 12), in[:len(in)-1], ws, rows, cols) },
		"out":       func() error { return ReduceBytes(SumRows, F32, make([]byte, 11), in, ws, rows, cols) },
		"workspace": func() error { return ReduceBytes(SumRows, F32, make([]byte, 12), in, ws[:size-1], rows, cols) },
	} {
		if err := call(); !errors.Is(err, ErrReduceBuffer) {
			t.Errorf("short %s: %v", name, err)
		}
	}
	if err := ReduceBytes(SumRows, DType(9), nil, nil, nil, 1, 1); err == nil {
		t.Error("invalid DType accepted")
	}
}

func TestReduceBytesDoesNotAllocate(t *testing.T) {
	rows, cols := uint64(4), uint64(9000)
	in := bytesF64(reduceInputs(rows*cols, 3))
	out := make([]byte, 8*rows)
	ws := make([]byte, mustWorkspace(t, SumRows, F64, rows, cols))
	if n := testing.AllocsPerRun(5, func() {
		if err := ReduceBytes(SumRows, F64, out, in, ws, rows, cols); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ReduceBytes allocates %v times per call", n)
	}
}

func mustWorkspace(t testing.TB, r Reduction, dt DType, rows, cols uint64) uint64 {
	t.Helper()
	n, err := ReduceWorkspaceSize(r, dt, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkReductionMeta checks one reduction kernel's metadata against
// ReduceLayout: arguments, no hidden ones, the kernarg size, the static LDS
// of ReduceGroupSegmentSize and the required workgroup size.
func checkReductionMeta(t *testing.T, gfx string, r Reduction, dt DType, k *KernelMeta) {
	t.Helper()
	sym := r.Symbol(dt)
	if k.Name != r.KernelName(dt) {
		t.Errorf("%s: .name = %q", sym, k.Name)
	}
	if len(k.Args) != len(ReduceLayout) {
		t.Errorf("%s: %d args, want %d: %+v", sym, len(k.Args), len(ReduceLayout), k.Args)
	}
	for i, arg := range k.Args {
		if strings.HasPrefix(arg.ValueKind, "hidden_") {
			t.Errorf("%s: hidden argument %+v", sym, arg)
			continue
		}
		if i >= len(ReduceLayout) {
			continue
		}
		spec := ReduceLayout[i]
		want := ArgMeta{Name: spec.Name, Offset: spec.Offset, Size: spec.Size(dt), ValueKind: spec.Kind}
		if core := (ArgMeta{Name: arg.Name, Offset: arg.Offset, Size: arg.Size, ValueKind: arg.ValueKind}); core != want {
			t.Errorf("%s: arg %d = %+v, ReduceLayout says %+v", sym, i, arg, want)
		}
		if isPtr := spec.Kind == KindGlobalBuffer; isPtr != (arg.AddressSpace == "global") {
			t.Errorf("%s: arg %s .address_space = %q", sym, spec.Name, arg.AddressSpace)
		}
		if wantConst := spec.Name == "in"; arg.IsConst != wantConst {
			t.Errorf("%s: arg %s .is_const = %v, want %v", sym, spec.Name, arg.IsConst, wantConst)
		}
	}
	if k.KernargSegmentSize != ReduceKernargSize {
		t.Errorf("%s: .kernarg_segment_size = %d, want %d", sym, k.KernargSegmentSize, ReduceKernargSize)
	}
	if k.KernargSegmentAlign == 0 || KernargAlign%k.KernargSegmentAlign != 0 {
		t.Errorf("%s: .kernarg_segment_align = %d", sym, k.KernargSegmentAlign)
	}
	if k.GroupSegmentFixedSize != ReduceGroupSegmentSize(dt) || k.PrivateSegmentFixedSize != 0 {
		t.Errorf("%s: group/private segment = %d/%d, want %d/0", sym, k.GroupSegmentFixedSize, k.PrivateSegmentFixedSize, ReduceGroupSegmentSize(dt))
	}
	if k.ReqdWorkgroupSize != [3]uint32{ReduceWorkgroupSize, 1, 1} {
		t.Errorf("%s: .reqd_workgroup_size = %v", sym, k.ReqdWorkgroupSize)
	}
	if k.MaxFlatWorkgroupSize != ReduceWorkgroupSize {
		t.Errorf("%s: .max_flat_workgroup_size = %d", sym, k.MaxFlatWorkgroupSize)
	}
	if want := Wavefront(familyMember(gfx)); int(k.WavefrontSize) != want {
		t.Errorf("%s: .wavefront_size = %d, want %d", sym, k.WavefrontSize, want)
	}
}

func TestPTXHasReductions(t *testing.T) {
	for _, arch := range PTXTargets() {
		p, err := PTX(arch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range AllReductions() {
			for _, dt := range AllDTypes() {
				if !bytes.Contains(p, []byte(".visible .entry "+r.KernelName(dt)+"(")) {
					t.Errorf("%s: no entry %s", arch, r.KernelName(dt))
				}
			}
		}
		// The copies of the kernel bodies that clang emits are dropped
		// (build.sh internalizes them), so nothing but kernels is visible.
		if bytes.Contains(p, []byte(".visible .func __clang_ocl_kern_imp_rocsync_sum")) {
			t.Errorf("%s: the reductions' body copies are still exported", arch)
		}
		if !slices.Contains(PTXTargets(), arch) {
			t.Fatal("unreachable")
		}
	}
}
