//go:build linux && (amd64 || arm64)

package kfdsim

import (
	"debug/elf"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/rocblas/simblas"
)

// The executor is tested on its own here: testdata/exec_harness.c stands in
// for the thunk's memory records, so the test registers allocations, maps
// them to GPU node 1 or not, and dispatches kernels at descriptors in code
// objects loaded the way ROCr's loader loads them (PT_LOAD segments copied
// to their virtual addresses in one allocation).

const gpuNode = 1
const nodeMask = 1 << gpuNode

type harness struct {
	t    *testing.T
	path string
	h    uintptr
}

func buildHarness(t *testing.T) *harness {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s)", cc)
	}
	if err := cmem.Libc(); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(t.TempDir(), "libkfdsim_exec_harness.so")
	build := exec.Command(cc, "-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
		"-Wl,-Bsymbolic", "-Icsrc", "-o", so, filepath.Join("csrc", "exec.c"), filepath.Join("testdata", "exec_harness.c"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	hs := &harness{t: t, path: so, h: h}
	hs.call("harness_reset")
	return hs
}

func (hs *harness) call(name string, args ...uintptr) uintptr {
	hs.t.Helper()
	fn, err := purego.Dlsym(hs.h, name)
	if err != nil {
		hs.t.Fatal(err)
	}
	return cmem.Call(fn, args...)
}

// mem allocates n bytes of page-aligned C memory and registers it with the
// harness, mapped to the nodes in mask. It returns the address and the
// allocation's index.
func (hs *harness) mem(n uint64, mask uint64) (uint64, int) {
	hs.t.Helper()
	raw := cmem.Alloc(uintptr(n + 4096))
	if raw == nil {
		hs.t.Fatal("calloc failed")
	}
	hs.t.Cleanup(func() { cmem.Free(raw) })
	addr := (uint64(uintptr(raw)) + 4095) &^ 4095
	i := int(int32(hs.call("harness_add_alloc", uintptr(addr), uintptr(n), uintptr(mask))))
	if i < 0 {
		hs.t.Fatal("harness allocation table full")
	}
	return addr, i
}

func (hs *harness) dispatch(ko, kernarg uint64, grid [3]uint32, wg [3]uint16) int {
	hs.t.Helper()
	r := hs.call("harness_dispatch", gpuNode, uintptr(ko), uintptr(kernarg),
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]), uintptr(wg[0]), uintptr(wg[1]), uintptr(wg[2]))
	return int(int32(uint32(r)))
}

func (hs *harness) faults() uint64 { return uint64(hs.call("harness_faults")) }

// loadImage copies a code object's PT_LOAD segments to their virtual
// addresses in a new allocation, as ROCr's loader does, and returns the
// base, the extent, and the descriptor offset of each kernel by name.
func (hs *harness) loadImage(co []byte, mask uint64) (base, extent uint64, kds map[string]uint64) {
	hs.t.Helper()
	f, err := elf.NewFile(strings.NewReader(string(co)))
	if err != nil {
		hs.t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			extent = max(extent, p.Vaddr+p.Memsz)
		}
	}
	base, _ = hs.mem(extent, mask)
	img := bytesAt(base, extent)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			copy(img[p.Vaddr:p.Vaddr+p.Filesz], co[p.Off:p.Off+p.Filesz])
		}
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		hs.t.Fatal(err)
	}
	kds = map[string]uint64{}
	for _, s := range syms {
		if name, ok := strings.CutSuffix(s.Name, ".kd"); ok {
			kds[name] = s.Value
		}
	}
	return base, extent, kds
}

func TestExecLayoutMatchesC(t *testing.T) {
	hs := buildHarness(t)
	out := cmem.Alloc(10 * 8)
	defer cmem.Free(out)
	hs.call("harness_layout", uintptr(out))
	got := unsafe.Slice((*uint64)(out), 10)
	want := []uint64{callName, callImageBase, callImageSize, callDispatch,
		dispGPUNode, dispQueueID, dispKernelObject, dispKernarg, dispGrid, dispWorkgroup}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("field %d: C offset %d, Go reads %d", i, got[i], want[i])
		}
	}
}

// Every kernel of every committed code object is named from the loaded
// image's dynamic symbol table.
func TestExecNamesEveryKernel(t *testing.T) {
	hs := buildHarness(t)
	for _, target := range kernels.Targets() {
		co, err := kernels.CodeObject(target)
		if err != nil {
			t.Fatal(err)
		}
		base, extent, kds := hs.loadImage(co, nodeMask)
		if want := 2 * (kernels.NumOps + len(kernels.AllReductions())); len(kds) != want {
			t.Fatalf("%s: %d descriptors, want %d", target, len(kds), want)
		}
		for name, off := range kds {
			hs.call("harness_use_recorder", 0)
			if r := hs.dispatch(base+off, 0, [3]uint32{1, 1, 1}, [3]uint16{1, 1, 1}); r != execOK {
				t.Fatalf("%s %s: dispatch = %d", target, name, r)
			}
			var b, s, calls uint64
			got := cmem.GoString(hs.call("harness_recorded", uintptr(unsafe.Pointer(&b)), uintptr(unsafe.Pointer(&s)), uintptr(unsafe.Pointer(&calls))))
			if got != name || b != base || s != extent || calls != 1 {
				t.Fatalf("%s: recorded %q base %#x size %d calls %d, want %q %#x %d 1", target, got, b, s, calls, name, base, extent)
			}
		}
	}
}

// A descriptor address that no symbol names, a missing executor, and an
// executor that does not know the kernel are all refused (never a no-op);
// an image not mapped to the GPU faults.
func TestExecRefusesWhatItCannotName(t *testing.T) {
	hs := buildHarness(t)
	co, _ := kernels.CodeObject("gfx90a")
	base, _, kds := hs.loadImage(co, nodeMask)
	kd := base + kds[kernels.Mul.KernelName(kernels.F32)]

	hs.call("harness_use_recorder", 0)
	if r := hs.dispatch(kd+4, 0, [3]uint32{1, 1, 1}, [3]uint16{1, 1, 1}); r != execUnknownKernel {
		t.Errorf("descriptor named by no symbol: %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
	hs.call("harness_use_recorder", uintptr(uint32(0xfffffffe))) // -2
	if r := hs.dispatch(kd, 0, [3]uint32{1, 1, 1}, [3]uint16{1, 1, 1}); r != execUnknownKernel {
		t.Errorf("executor says unknown: %d", r)
	}
	hs.call("harness_reset")
	base, _, kds = hs.loadImage(co, nodeMask)
	kd = base + kds[kernels.Mul.KernelName(kernels.F32)]
	if r := hs.dispatch(kd, 0, [3]uint32{1, 1, 1}, [3]uint16{1, 1, 1}); r != execUnknownKernel {
		t.Errorf("no executor: %d", r)
	}
	unmapped, _, kds2 := hs.loadImage(co, 0)
	before := hs.faults()
	if r := hs.dispatch(unmapped+kds2[kernels.Mul.KernelName(kernels.F32)], 0, [3]uint32{1, 1, 1}, [3]uint16{1, 1, 1}); r != execFault {
		t.Errorf("image not mapped to the GPU: %d, want KFDSIM_FAULT", r)
	}
	if hs.faults() != before+1 {
		t.Errorf("no VM fault raised for the unmapped descriptor")
	}
}

// elementwise sets up one rocsync kernel dispatch through the Go executor.
type elementwise struct {
	hs              *harness
	kd              uint64
	out, a, b, karg uint64
	kargIdx, bIdx   int
	n               int
}

func newElementwise(t *testing.T, op kernels.Op, dt kernels.DType, n int) *elementwise {
	hs := buildHarness(t)
	e, err := RegisterExecutor(hs.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	co, _ := kernels.CodeObject("gfx90a")
	base, _, kds := hs.loadImage(co, nodeMask)
	w := &elementwise{hs: hs, kd: base + kds[op.KernelName(dt)], n: n}
	nb := uint64(n * dt.Size())
	w.out, _ = hs.mem(nb, nodeMask)
	w.a, _ = hs.mem(nb, nodeMask)
	w.b, w.bIdx = hs.mem(nb, nodeMask)
	w.karg, w.kargIdx = hs.mem(kernels.KernargSize, nodeMask)
	a, b := bytesAt(w.a, nb), bytesAt(w.b, nb)
	for i := range n {
		x, y := float64(i%17)-8.25, float64(i%5)+0.5
		if dt == kernels.F32 {
			binary.LittleEndian.PutUint32(a[4*i:], math.Float32bits(float32(x)))
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(y)))
		} else {
			binary.LittleEndian.PutUint64(a[8*i:], math.Float64bits(x))
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(y))
		}
	}
	for i := range bytesAt(w.out, nb) {
		bytesAt(w.out, nb)[i] = 0xAB
	}
	args := kernels.Args{Out: w.out, A: w.a, B: w.b, Alpha: 1.5, N: uint64(n)}
	args.Encode(bytesAt(w.karg, kernels.KernargSize), dt)
	return w
}

func (w *elementwise) run() int {
	return w.hs.dispatch(w.kd, w.karg, [3]uint32{256, 1, 1}, [3]uint16{256, 1, 1})
}

func TestExecutorRunsRocsyncKernels(t *testing.T) {
	for _, tc := range []struct {
		op kernels.Op
		dt kernels.DType
	}{{kernels.Mul, kernels.F32}, {kernels.AXPY, kernels.F64}, {kernels.ReLU, kernels.F32}} {
		w := newElementwise(t, tc.op, tc.dt, 1000)
		if r := w.run(); r != execOK {
			t.Fatalf("%v %v: dispatch = %d", tc.op, tc.dt, r)
		}
		nb := uint64(w.n * tc.dt.Size())
		want := make([]byte, nb)
		kernels.RefBytes(tc.op, tc.dt, want, bytesAt(w.a, nb), bytesAt(w.b, nb), 1.5)
		if got := bytesAt(w.out, nb); string(got) != string(want) {
			t.Errorf("%v %v: result differs from kernels.RefBytes", tc.op, tc.dt)
		}
	}
}

// The kernarg segment is memory the GPU reads: not mapped (a kernarg ring
// that was never allow_access'ed), the dispatch faults and writes nothing.
func TestExecutorFaultsOnUnmappedKernarg(t *testing.T) {
	w := newElementwise(t, kernels.Mul, kernels.F32, 100)
	w.hs.call("harness_set_mapped", uintptr(w.kargIdx), 0)
	before := w.hs.faults()
	if r := w.run(); r != execFault {
		t.Fatalf("dispatch = %d, want KFDSIM_FAULT", r)
	}
	if w.hs.faults() != before+1 || uint64(w.hs.call("harness_last_fault")) != w.karg {
		t.Errorf("fault not raised at the kernarg address")
	}
	for _, c := range bytesAt(w.out, 400) {
		if c != 0xAB {
			t.Fatal("a faulting dispatch wrote its output")
		}
	}
}

func TestExecutorFaultsOnOperands(t *testing.T) {
	// b mapped to another GPU only.
	w := newElementwise(t, kernels.Add, kernels.F32, 100)
	w.hs.call("harness_set_mapped", uintptr(w.bIdx), 1<<2)
	if r := w.run(); r != execFault {
		t.Errorf("operand mapped to another node: %d, want KFDSIM_FAULT", r)
	}
	// n larger than the arrays.
	w = newElementwise(t, kernels.Add, kernels.F32, 100)
	args := kernels.Args{Out: w.out, A: w.a, B: w.b, N: 101}
	args.Encode(bytesAt(w.karg, kernels.KernargSize), kernels.F32)
	if r := w.run(); r != execFault {
		t.Errorf("n past the end of the operands: %d, want KFDSIM_FAULT", r)
	}
	for _, c := range bytesAt(w.out, 400) {
		if c != 0xAB {
			t.Fatal("a faulting dispatch wrote its output")
		}
	}
	// An op that does not read b ignores its pointer.
	w = newElementwise(t, kernels.Neg, kernels.F32, 100)
	args = kernels.Args{Out: w.out, A: w.a, B: 0, N: 100}
	args.Encode(bytesAt(w.karg, kernels.KernargSize), kernels.F32)
	if r := w.run(); r != execOK {
		t.Errorf("neg with b = 0: %d, want KFDSIM_OK", r)
	}
}

// rocrDescriptor writes the amd_kernel_code_t header ROCr's AssembleShader
// writes for a blit kernel with the given register needs.
func rocrDescriptor(hs *harness, sgprs, vgprs int) uint64 {
	kd, _ := hs.mem(4096, nodeMask)
	b := bytesAt(kd, 256)
	binary.LittleEndian.PutUint64(b[16:], 256)
	rsrc1 := uint32((vgprs-1)/4) | uint32((sgprs-1)/8)<<6 | 3<<18 | 1<<23
	binary.LittleEndian.PutUint32(b[48:], rsrc1)
	binary.LittleEndian.PutUint32(b[52:], 2<<1|1<<7)
	return kd
}

// rocrCopyArgs computes the kernargs of ROCr's SubmitLinearCopyCommand.
func rocrCopyArgs(k []byte, dst, src, size uint64, numCUs uint32) (aligned bool, items uint32) {
	le := binary.LittleEndian
	items = 64 * 4 * numCUs
	if src&3 == dst&3 {
		p1 := min(size, (0x100-(dst&0xff))&0xff)
		block := uint64(items) * 4 * 4
		p2 := (size - p1) / block * block
		p3 := (size - p1 - p2) / 4 * 4
		for i, v := range []uint64{src, dst, src + p1, dst + p1, src + p1 + p2, dst + p1 + p2,
			src + p1 + p2 + p3, dst + p1 + p2 + p3, src + size, dst + size} {
			le.PutUint64(k[8*i:], v)
		}
		le.PutUint32(k[80:], items)
		return true, items
	}
	block := uint64(items) * 4
	p1 := size / block * block
	for i, v := range []uint64{src, dst, src + p1, dst + p1, src + size, dst + size} {
		le.PutUint64(k[8*i:], v)
	}
	le.PutUint32(k[48:], items)
	return false, items
}

func TestExecRunsROCrBlitKernels(t *testing.T) {
	hs := buildHarness(t)
	copyAligned, copyMisaligned, fill := rocrDescriptor(hs, 32, 12), rocrDescriptor(hs, 23, 10), rocrDescriptor(hs, 19, 8)
	karg, _ := hs.mem(128, nodeMask)
	const bufSize = 70000
	src, _ := hs.mem(bufSize, nodeMask)
	dst, dstIdx := hs.mem(bufSize, nodeMask)
	for i, s := 0, bytesAt(src, bufSize); i < bufSize; i++ {
		s[i] = byte(i*7 + i>>8)
	}
	for _, tc := range []struct{ srcOff, dstOff, size uint64 }{
		{0, 0, 1}, {1, 1, 3}, {3, 7, 255}, {0, 0, 65536}, {5, 9, 65537}, {2, 1, 40000}, {0, 3, 16384 + 5},
	} {
		clear(bytesAt(dst, bufSize))
		aligned, items := rocrCopyArgs(bytesAt(karg, 128), dst+tc.dstOff, src+tc.srcOff, tc.size, 4)
		kd := copyMisaligned
		if aligned {
			kd = copyAligned
		}
		if r := hs.dispatch(kd, karg, [3]uint32{items, 1, 1}, [3]uint16{64, 1, 1}); r != execOK {
			t.Fatalf("%+v: dispatch = %d", tc, r)
		}
		d, s := bytesAt(dst, bufSize), bytesAt(src, bufSize)
		if string(d[tc.dstOff:tc.dstOff+tc.size]) != string(s[tc.srcOff:tc.srcOff+tc.size]) {
			t.Errorf("%+v: copy wrong", tc)
		}
		for i := range d {
			if (uint64(i) < tc.dstOff || uint64(i) >= tc.dstOff+tc.size) && d[i] != 0 {
				t.Fatalf("%+v: byte %d outside the copy written", tc, i)
			}
		}
	}

	// Fill, as SubmitLinearFillCommand sets it up: 64*numCUs work-items.
	le := binary.LittleEndian
	items := uint32(64 * 4)
	count := uint64(5000)
	block := uint64(items) * 16
	p1 := count * 4 / block * block
	k := bytesAt(karg, 32)
	le.PutUint64(k, dst)
	le.PutUint64(k[8:], dst+p1)
	le.PutUint64(k[16:], dst+count*4)
	le.PutUint32(k[24:], 0xdeadbeef)
	le.PutUint32(k[28:], items)
	clear(bytesAt(dst, bufSize))
	if r := hs.dispatch(fill, karg, [3]uint32{items, 1, 1}, [3]uint16{64, 1, 1}); r != execOK {
		t.Fatalf("fill: %d", r)
	}
	for i := range count + 1 {
		want := uint32(0xdeadbeef)
		if i == count {
			want = 0
		}
		if got := le.Uint32(bytesAt(dst, bufSize)[4*i:]); got != want {
			t.Fatalf("fill: dword %d = %#x, want %#x", i, got, want)
		}
	}

	// A grid other than ROCr's is refused, not guessed at.
	if r := hs.dispatch(fill, karg, [3]uint32{items * 2, 1, 1}, [3]uint16{64, 1, 1}); r != execUnknownKernel {
		t.Errorf("fill with a grid ROCr never uses: %d", r)
	}
	// Destination not mapped: a fault, nothing written.
	hs.call("harness_set_mapped", uintptr(dstIdx), 0)
	clear(bytesAt(dst, bufSize))
	_, items = rocrCopyArgs(bytesAt(karg, 128), dst, src, 1000, 4)
	if r := hs.dispatch(copyAligned, karg, [3]uint32{items, 1, 1}, [3]uint16{64, 1, 1}); r != execFault {
		t.Errorf("copy to unmapped memory: %d, want KFDSIM_FAULT", r)
	}
	for _, c := range bytesAt(dst, bufSize) {
		if c != 0 {
			t.Fatal("a faulting copy wrote")
		}
	}
	// A descriptor that is neither in an image nor ROCr's.
	other := rocrDescriptor(hs, 40, 40)
	if r := hs.dispatch(other, karg, [3]uint32{64, 1, 1}, [3]uint16{64, 1, 1}); r != execUnknownKernel {
		t.Errorf("unknown non-ELF descriptor: %d", r)
	}
}

// buildCL compiles an OpenCL file into a code object v4 for gfx90a.
func buildCL(t *testing.T, src string, defines ...string) []byte {
	t.Helper()
	clang, lld := "clang-22", "ld.lld-22"
	for _, tool := range []string{clang, lld} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	obj, co := filepath.Join(dir, "k.o"), filepath.Join(dir, "k.hsaco")
	args := append([]string{"-x", "cl", "-cl-std=CL2.0", "-O3", "--target=amdgcn-amd-amdhsa", "-nogpulib",
		"-mcode-object-version=4", "-mcpu=gfx90a", "-c", src, "-o", obj}, defines...)
	if out, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	if out, err := exec.Command(lld, "-shared", obj, "-o", co).CombinedOutput(); err != nil {
		t.Fatalf("lld: %v\n%s", err, out)
	}
	data, err := os.ReadFile(co)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestExecRunsHIPBlitKernels(t *testing.T) {
	hs := buildHarness(t)
	base, _, kds := hs.loadImage(buildCL(t, filepath.Join("testdata", "hipblit.cl")), nodeMask)
	karg, _ := hs.mem(256, nodeMask)
	const n = 4096
	src, _ := hs.mem(n, nodeMask)
	dst, _ := hs.mem(n, nodeMask)
	pattern, _ := hs.mem(64, nodeMask)
	s := bytesAt(src, n)
	for i := range s {
		s[i] = byte(i*13 + 1)
	}
	le := binary.LittleEndian
	k := bytesAt(karg, 256)
	put := func(vals ...uint64) {
		clear(k)
		for i, v := range vals {
			le.PutUint64(k[8*i:], v)
		}
	}
	run := func(name string, grid [3]uint32) int {
		return hs.dispatch(base+kds[name], karg, grid, [3]uint16{64, 1, 1})
	}
	d := bytesAt(dst, n)

	// copyBuffer, bytes (remain == 8): 100 bytes from src+3 to dst+5.
	clear(d)
	put(src, dst, 3, 5, 100, 8)
	if r := run("__amd_rocclr_copyBuffer", [3]uint32{128, 1, 1}); r != execOK || string(d[5:105]) != string(s[3:103]) || d[105] != 0 || d[4] != 0 {
		t.Errorf("copyBuffer bytes: %d", r)
	}
	// copyBuffer, dwords with a 3-byte tail: 10 items = 9 dwords + 3 bytes.
	clear(d)
	put(src, dst, 8, 16, 10, 3)
	if r := run("__amd_rocclr_copyBuffer", [3]uint32{64, 1, 1}); r != execOK || string(d[16:16+39]) != string(s[8:8+39]) || d[16+39] != 0 {
		t.Errorf("copyBuffer dwords: %d", r)
	}
	// copyBufferAligned with uint4 elements: origins count elements.
	clear(d)
	put(src, dst, 2, 1, 5, 16)
	if r := run("__amd_rocclr_copyBufferAligned", [3]uint32{64, 1, 1}); r != execOK || string(d[16:96]) != string(s[32:112]) || d[96] != 0 {
		t.Errorf("copyBufferAligned: %d", r)
	}
	// copyBufferRect: 3 rows of 7 bytes, source pitch 100, destination pitch 10.
	clear(d)
	put(src, dst, 0, 0, 100, 0, 2, 0, 10, 0, 1, 0, 0, 0, 0, 0, 0, 0) // src @0, dst @8, srcRect @32, dstRect @64, size @96
	le.PutUint64(k[32:], 100)
	le.PutUint64(k[40:], 1000)
	le.PutUint64(k[48:], 2)
	le.PutUint64(k[64:], 10)
	le.PutUint64(k[72:], 100)
	le.PutUint64(k[80:], 1)
	le.PutUint64(k[96:], 7)
	le.PutUint64(k[104:], 3)
	le.PutUint64(k[112:], 1)
	if r := run("__amd_rocclr_copyBufferRect", [3]uint32{64, 3, 1}); r != execOK {
		t.Errorf("copyBufferRect: %d", r)
	}
	for y := range 3 {
		if string(d[1+10*y:8+10*y]) != string(s[2+100*y:9+100*y]) {
			t.Errorf("copyBufferRect row %d wrong", y)
		}
	}
	// fillBufferAligned, uint elements, a 2-element pattern, 6 items from element 3.
	clear(d)
	le.PutUint32(bytesAt(pattern, 8), 0x11111111)
	le.PutUint32(bytesAt(pattern, 8)[4:], 0x22222222)
	put(0, 0, dst, 0, pattern)
	le.PutUint32(k[40:], 2)
	le.PutUint64(k[48:], 3)
	le.PutUint64(k[56:], 6)
	if r := run("__amd_rocclr_fillBufferAligned", [3]uint32{64, 1, 1}); r != execOK {
		t.Errorf("fillBufferAligned: %d", r)
	}
	for i := range 20 {
		want := uint32(0)
		if i >= 3 && i < 15 {
			want = 0x11111111
			if (i-3)%2 == 1 {
				want = 0x22222222
			}
		}
		if got := le.Uint32(d[4*i:]); got != want {
			t.Fatalf("fillBufferAligned dword %d = %#x, want %#x", i, got, want)
		}
	}
	// streamOpsWrite, 64-bit.
	clear(d)
	put(0, dst+8, 0x0102030405060708, 8)
	if r := run("__amd_rocclr_streamOpsWrite", [3]uint32{1, 1, 1}); r != execOK || le.Uint64(d[8:]) != 0x0102030405060708 {
		t.Errorf("streamOpsWrite: %d", r)
	}
	// streamOpsWait EQ on a value already there returns.
	put(0, dst+8, 0x0102030405060708, 1, math.MaxUint64)
	if r := run("__amd_rocclr_streamOpsWait", [3]uint32{1, 1, 1}); r != execOK {
		t.Errorf("streamOpsWait: %d", r)
	}
	// Operands not mapped fault; kernels exec.c does not implement are refused.
	put(src, dst+n-50, 0, 0, 100, 8)
	if r := run("__amd_rocclr_copyBuffer", [3]uint32{128, 1, 1}); r != execFault {
		t.Errorf("copyBuffer past the end of dst: %d, want KFDSIM_FAULT", r)
	}
	if r := run("__amd_rocclr_gwsInit", [3]uint32{1, 1, 1}); r != execUnknownKernel {
		t.Errorf("gwsInit: %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
}

// HIP 6.4.3's blit kernels whose layouts differ from 5.2.3's run by their
// own layout (testdata/hipblit64.cl): copyBuffer and fillBufferAligned
// loop over chunks up to an end address, streamOpsWrite has no size.
func TestExecRunsHIP64BlitKernels(t *testing.T) {
	hs := buildHarness(t)
	base, _, kds := hs.loadImage(buildCL(t, filepath.Join("testdata", "hipblit64.cl")), nodeMask)
	karg, _ := hs.mem(256, nodeMask)
	const n = 4096
	src, _ := hs.mem(n, nodeMask)
	dst, _ := hs.mem(n, nodeMask)
	pattern, _ := hs.mem(64, nodeMask)
	s := bytesAt(src, n)
	for i := range s {
		s[i] = byte(i*7 + 3)
	}
	le := binary.LittleEndian
	k := bytesAt(karg, 256)
	run := func(name string, grid uint32) int {
		return hs.dispatch(base+kds[name], karg, [3]uint32{grid, 1, 1}, [3]uint16{64, 1, 1})
	}
	d := bytesAt(dst, n)
	copyArgs := func(src, dst, size uint64, remainder, aligned uint32, end uint64, chunk uint32) {
		clear(k)
		le.PutUint64(k[0:], src)
		le.PutUint64(k[8:], dst)
		le.PutUint64(k[16:], size)
		le.PutUint32(k[24:], remainder)
		le.PutUint32(k[28:], aligned)
		le.PutUint64(k[32:], end)
		le.PutUint32(k[40:], chunk)
	}
	// 1000 bytes from src+16 to dst+32 as 62 uint4s and a 8-byte remainder,
	// 64 work-items striding by 64 elements.
	clear(d)
	copyArgs(src+16, dst+32, 1000, 8, 16, dst+32+992, 64)
	if r := run("__amd_rocclr_copyBuffer", 64); r != execOK || string(d[32:1032]) != string(s[16:1016]) || d[1032] != 0 || d[31] != 0 {
		t.Errorf("copyBuffer uint4: %d", r)
	}
	// uint elements, a grid of 8 striding by 16: elements 8..15 of each
	// 16 are never reached, as on hardware.
	clear(d)
	copyArgs(src, dst, 128, 0, 4, dst+128, 16)
	if r := run("__amd_rocclr_copyBuffer", 8); r != execOK {
		t.Fatalf("copyBuffer strided: %d", r)
	}
	for i := range 32 {
		want := le.Uint32(s[4*i:])
		if i%16 >= 8 {
			want = 0
		}
		if got := le.Uint32(d[4*i:]); got != want {
			t.Fatalf("copyBuffer strided: element %d = %#x, want %#x", i, got, want)
		}
	}
	// A stride of 0 with work to do would never end: refused.
	copyArgs(src, dst, 128, 0, 4, dst+128, 0)
	if r := run("__amd_rocclr_copyBuffer", 8); r != execUnknownKernel {
		t.Errorf("copyBuffer with next_chunk 0: %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
	// Past the end of dst: a fault.
	copyArgs(src, dst+n-64, 128, 0, 4, dst+n-64+128, 64)
	if r := run("__amd_rocclr_copyBuffer", 64); r != execFault {
		t.Errorf("copyBuffer past the end of dst: %d, want KFDSIM_FAULT", r)
	}
	// fillBufferAligned: a 2-element pattern of uints from dst+12 to
	// dst+12+48, 3 work-items striding by 6 elements.
	clear(d)
	le.PutUint32(bytesAt(pattern, 8), 0xaaaaaaaa)
	le.PutUint32(bytesAt(pattern, 8)[4:], 0xbbbbbbbb)
	clear(k)
	le.PutUint64(k[0:], dst+12)
	le.PutUint64(k[8:], pattern)
	le.PutUint32(k[16:], 2)
	le.PutUint32(k[20:], 4)
	le.PutUint64(k[24:], dst+12+48)
	le.PutUint32(k[32:], 6)
	if r := run("__amd_rocclr_fillBufferAligned", 3); r != execOK {
		t.Fatalf("fillBufferAligned: %d", r)
	}
	for i := range 20 {
		want := uint32(0)
		if i >= 3 && i < 15 {
			want = 0xaaaaaaaa
			if (i-3)%2 == 1 {
				want = 0xbbbbbbbb
			}
		}
		if got := le.Uint32(d[4*i:]); got != want {
			t.Fatalf("fillBufferAligned dword %d = %#x, want %#x", i, got, want)
		}
	}
	// streamOpsWrite of 6.4.3, 32-bit.
	clear(d)
	clear(k)
	le.PutUint64(k[0:], dst+4)
	le.PutUint64(k[16:], 0x55667788)
	if r := run("__amd_rocclr_streamOpsWrite", 1); r != execOK || le.Uint32(d[4:]) != 0x55667788 || d[8] != 0 {
		t.Errorf("streamOpsWrite: %d", r)
	}
	// batchMemOp of 6.4.3 (hipStreamBatchMemOp): work-item i performs
	// params[i] alone, 48 bytes each: a 64-bit write, a 32-bit wait
	// (GEQ) satisfied by what is there, a 32-bit write, and an element
	// no work-item reaches.
	clear(d)
	params, _ := hs.mem(4*48, nodeMask)
	ps := bytesAt(params, 4*48)
	op := func(i int, operation uint32, addr, value uint64, cmp uint32) {
		e := ps[48*i:]
		le.PutUint32(e[0:], operation)
		le.PutUint64(e[8:], addr)
		le.PutUint64(e[16:], value)
		le.PutUint32(e[24:], cmp)
	}
	op(0, 5, dst+8, 0x1122334455667788, 0)
	op(1, 1, dst+8, 0x55667788, 0)
	op(2, 2, dst+16, 0xcafef00d, 0)
	op(3, 2, dst+24, 0xdeadbeef, 0)
	clear(k)
	le.PutUint64(k[0:], params)
	le.PutUint32(k[8:], 4)
	if r := run("__amd_rocclr_batchMemOp", 3); r != execOK {
		t.Fatalf("batchMemOp: %d", r)
	}
	if got := le.Uint64(d[8:]); got != 0x1122334455667788 {
		t.Errorf("batchMemOp 64-bit write: %#x", got)
	}
	if got := le.Uint32(d[16:]); got != 0xcafef00d {
		t.Errorf("batchMemOp 32-bit write: %#x", got)
	}
	if got := le.Uint32(d[24:]); got != 0 {
		t.Errorf("batchMemOp ran params[3] with a grid of 3: %#x", got)
	}
	// A 64-bit EQ wait ends once the value is there: here work-item 0
	// writes it, and work-item 1's wait sees it.
	clear(ps)
	op(0, 5, dst+32, 7, 0)
	op(1, 4, dst+32, 7, 1)
	if r := run("__amd_rocclr_batchMemOp", 2); r != execOK || le.Uint64(d[32:]) != 7 {
		t.Errorf("batchMemOp write then wait: %d", r)
	}
	// An address not mapped to the GPU is a VM fault.
	clear(ps)
	op(0, 2, 0x10, 1, 0)
	if r := run("__amd_rocclr_batchMemOp", 1); r != execFault {
		t.Errorf("batchMemOp to an unmapped address: %d, want a fault", r)
	}
}

// A blit kernel whose metadata disagrees with HIP 5.2.3's signature is
// refused rather than misread.
func TestExecRefusesHIPBlitWithOtherLayout(t *testing.T) {
	hs := buildHarness(t)
	base, _, kds := hs.loadImage(buildCL(t, filepath.Join("testdata", "hipblit.cl"), "-DWRONG_LAYOUT"), nodeMask)
	karg, _ := hs.mem(256, nodeMask)
	if r := hs.dispatch(base+kds["__amd_rocclr_copyBuffer"], karg, [3]uint32{1, 1, 1}, [3]uint16{1, 1, 1}); r != execUnknownKernel {
		t.Errorf("dispatch = %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
}

func TestExecutorRunsSimblasGemm(t *testing.T) {
	root, err := simblas.Build(t.TempDir())
	if err != nil {
		t.Skip(err)
	}
	co, err := os.ReadFile(filepath.Join(root, "co", "gfx90a.hsaco"))
	if err != nil {
		t.Fatal(err)
	}
	hs := buildHarness(t)
	e, err := RegisterExecutor(hs.path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	base, _, kds := hs.loadImage(co, nodeMask)
	const m, n, k, lda, ldb, ldc = 5, 7, 3, 8, 8, 6
	a, _ := hs.mem(lda*k*4, nodeMask)
	b, _ := hs.mem(ldb*n*4, nodeMask)
	c, cIdx := hs.mem(ldc*n*4, nodeMask)
	karg, _ := hs.mem(88, nodeMask)
	av, bv, cv := unsafe.Slice((*float32)(cmem.Ptr(uintptr(a))), lda*k), unsafe.Slice((*float32)(cmem.Ptr(uintptr(b))), ldb*n), unsafe.Slice((*float32)(cmem.Ptr(uintptr(c))), ldc*n)
	for i := range av {
		av[i] = float32(i%7) - 3
	}
	for i := range bv {
		bv[i] = float32(i%5) * 0.5
	}
	for i := range cv {
		cv[i] = 1
	}
	kk := bytesAt(karg, 88)
	le := binary.LittleEndian
	for i, v := range []uint64{a, b, c, m, n, k, lda, ldb, ldc} {
		le.PutUint64(kk[8*i:], v)
	}
	le.PutUint32(kk[72:], math.Float32bits(2))
	le.PutUint32(kk[76:], math.Float32bits(0.5))
	le.PutUint32(kk[80:], 0) // op(A) = A (m×k, lda)
	le.PutUint32(kk[84:], 1) // op(B) = Bᵀ: B is n×k with ldb
	if r := hs.dispatch(base+kds[simblas.SgemmKernel], karg, [3]uint32{16, 16, 1}, [3]uint16{16, 16, 1}); r != execOK {
		t.Fatalf("sgemm dispatch = %d", r)
	}
	for j := range n {
		for i := range m {
			var sum float64
			for l := range k {
				sum += float64(av[i+l*lda]) * float64(bv[j+l*ldb])
			}
			want := 2*sum + 0.5
			if got := float64(cv[i+j*ldc]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("C[%d,%d] = %v, want %v", i, j, got, want)
			}
		}
	}
	// Padding rows between m and ldc stay untouched.
	if cv[m] != 1 {
		t.Errorf("C row %d (beyond m) was written", m)
	}
	// C not mapped: a fault.
	hs.call("harness_set_mapped", uintptr(cIdx), 0)
	if r := hs.dispatch(base+kds[simblas.SgemmKernel], karg, [3]uint32{16, 16, 1}, [3]uint16{16, 16, 1}); r != execFault {
		t.Errorf("sgemm with C unmapped: %d, want KFDSIM_FAULT", r)
	}
	if st := e.Stats(); st.Runs != 1 || st.Faults != 1 {
		t.Errorf("stats %+v, want 1 run and 1 fault", st)
	}
}

// The per-dispatch path (after the first dispatch of a kernel in an image)
// makes no Go allocation.
func TestExecutorHotPathAllocatesNothing(t *testing.T) {
	if execRaceEnabled {
		t.Skip("sync.Pool drops items under -race, so allocations reappear there")
	}
	w := newElementwise(t, kernels.Mul, kernels.F32, 64)
	e := current.Load()
	if e == nil {
		t.Fatal("no executor registered")
	}
	co, _ := kernels.CodeObject("gfx90a")
	base, extent, _ := w.hs.loadImage(co, nodeMask)
	// kfdsim_kernel_call and kfdsim_dispatch in C memory, as exec.c passes them.
	mem := cmem.Alloc(256)
	defer cmem.Free(mem)
	name := kernels.Mul.KernelName(kernels.F32)
	copy(unsafe.Slice((*byte)(unsafe.Add(mem, 128)), len(name)+1), name+"\x00")
	call, disp := uintptr(mem), uintptr(mem)+64
	*(*uint64)(cmem.Ptr(call + callName)) = uint64(call + 128)
	*(*uint64)(cmem.Ptr(call + callImageBase)) = base
	*(*uint64)(cmem.Ptr(call + callImageSize)) = extent
	*(*uint64)(cmem.Ptr(call + callDispatch)) = uint64(disp)
	*(*uint32)(cmem.Ptr(disp + dispGPUNode)) = gpuNode
	*(*uint64)(cmem.Ptr(disp + dispKernarg)) = w.karg
	*(*uint32)(cmem.Ptr(disp + dispGrid)) = 64
	*(*uint32)(cmem.Ptr(disp + dispGrid + 4)) = 1
	*(*uint32)(cmem.Ptr(disp + dispGrid + 8)) = 1
	if r := e.run(call); r != execOK {
		t.Fatalf("first run = %d", r)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if r := e.run(call); r != execOK {
			t.Fatalf("run = %d", r)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per dispatch, want 0", allocs)
	}
}

// A kernel that has a rocsync name but another signature (here n is a
// uint, not a ulong) is refused: the executor reads arguments only where the
// loaded code object's metadata says they are.
func TestExecutorRefusesLayoutOtherThanMetadata(t *testing.T) {
	src := filepath.Join(t.TempDir(), "wrong.cl")
	if err := os.WriteFile(src, []byte("kernel void rocsync_mul_f32(global float* out, global const float* a, "+
		"global const float* b, float alpha, uint n) {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	co := buildCL(t, src)
	hs := buildHarness(t)
	e, err := RegisterExecutor(hs.path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	base, _, kds := hs.loadImage(co, nodeMask)
	karg, _ := hs.mem(64, nodeMask)
	if r := hs.dispatch(base+kds["rocsync_mul_f32"], karg, [3]uint32{64, 1, 1}, [3]uint16{64, 1, 1}); r != execUnknownKernel {
		t.Errorf("dispatch = %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
	if st := e.Stats(); st.Unknown != 1 || st.Runs != 0 {
		t.Errorf("stats %+v, want one unknown", st)
	}
}
