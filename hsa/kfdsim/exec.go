//go:build linux && (amd64 || arm64)

package kfdsim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/rocblas/simblas"
	"github.com/rocsync/rocsync/userkernel"
)

// The executor status codes of kfdsim.h.
const (
	execOK            = 0
	execFault         = -1
	execUnknownKernel = -2
)

// ShimSoname is the soname of the simulated driver; in a child process
// (which preloads it) dlopen finds the loaded copy under it.
const ShimSoname = LibraryName

// Executor runs, on the CPU, the kernels the simulated GPU hands to its
// registered executor: rocsync's elementwise kernels (rocsync_<op>_<f32|f64>,
// computed with kernels.RefBytes, the reference the CPU tests use), its
// reductions (rocsync_sum_<all|rows|cols>_<f32|f64>, computed with
// kernels.ReduceBytes, which refuses a workspace that is not zero) and the
// test-only rocBLAS's gemm kernels (simblas.SgemmKernel, simblas.DgemmKernel).
// Before it touches memory it checks the kernel's argument layout against the
// metadata note of the loaded code object, the kernarg segment and every
// operand range with kfdsim_gpu_access, which raises the VM fault itself when
// the memory is not mapped to the GPU.
//
// One Executor is registered per process at a time; it is called on the
// simulated command processor's threads.
type Executor struct {
	lib          uintptr // dlopen handle of the simulated driver
	setExecutor  uintptr // kfdsim_set_executor
	gpuAccessFn  uintptr // kfdsim_gpu_access
	registeredAt uintptr // the callback passed to kfdsim_set_executor

	mu     sync.RWMutex
	images map[uint64]*imageMeta // by image base

	runs, faults, unknown atomic.Uint64
	refused               atomic.Uint64
	refs                  atomic.Pointer[userkernel.References]
	lastRefusal           atomic.Pointer[error]
	logUnknown            bool
}

// imageMeta is the parsed metadata of one loaded code object, kept while
// its note is unchanged (an image unloaded and another loaded at the same
// address has a different note, or the same one and the same kernels).
type imageMeta struct {
	note []byte
	meta *kernels.Metadata
	// checked maps a kernel name to its verified argument layout.
	checked map[string]*kernelPlan
}

// kernelPlan is what a dispatch of one kernel needs, worked out once per image.
type kernelPlan struct {
	kind    int // planElementwise, planGemm or planReduce
	op      kernels.Op
	red     kernels.Reduction
	reqd    [3]uint32 // .reqd_workgroup_size; zero: any
	dt      kernels.DType
	kernarg uint64 // bytes of kernarg the kernel reads
	err     error  // the layout did not match: every dispatch is refused
	// user is the signature of a kernel that is not rocsync's or
	// simblas's (planUser), read from its code object's metadata note: it
	// runs through the References given to UseReferences.
	user *userkernel.Signature
}

const (
	planElementwise = iota
	planGemm
	planReduce
	planUser
)

// ErrNoThunk is matched by errors.Is when the simulated driver cannot be
// opened or lacks the executor entry points.
var ErrNoThunk = errors.New("kfdsim: simulated driver not available")

var (
	callbackOnce sync.Once
	callback     uintptr
	current      atomic.Pointer[Executor]
)

// RegisterExecutor opens the simulated driver (libPath, or ShimSoname when
// empty: in a process where ROCr will load it through LD_LIBRARY_PATH this
// opens that same copy) and registers the Executor with kfdsim_set_executor.
// Call it before hsa_init, so the first dispatch finds it. It replaces any
// Executor registered earlier.
func RegisterExecutor(libPath string) (*Executor, error) {
	if libPath == "" {
		libPath = ShimSoname
	}
	h, err := dl.Dlopen(libPath, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: dlopen %s: %v", ErrNoThunk, libPath, err)
	}
	e := &Executor{lib: h, images: make(map[uint64]*imageMeta), logUnknown: true}
	if e.setExecutor, err = dl.Dlsym(h, "kfdsim_set_executor"); err != nil {
		purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %s has no kfdsim_set_executor: %v", ErrNoThunk, libPath, err)
	}
	if e.gpuAccessFn, err = dl.Dlsym(h, "kfdsim_gpu_access"); err != nil {
		purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %s has no kfdsim_gpu_access: %v", ErrNoThunk, libPath, err)
	}
	// purego callbacks are never freed and limited in number: one for the
	// process, which forwards to the Executor registered now.
	callbackOnce.Do(func() { callback = purego.NewCallback(executorTrampoline) })
	current.Store(e)
	e.registeredAt = callback
	cmem.Call(e.setExecutor, callback)
	return e, nil
}

// rtldNoload is glibc's RTLD_NOLOAD: dlopen only finds a library already
// loaded.
const rtldNoload = 0x4

// RegisterExecutorIfLoaded registers an Executor when this process runs
// over the simulated driver (the driver is already loaded: preloaded, as
// simrun and the test children do), and returns nil, nil otherwise. A
// program that should run rocsync's kernels wherever it finds the
// simulated driver (the bench, the hardware test suite under
// cmd/simrun) calls it first thing, before HSA is initialised.
func RegisterExecutorIfLoaded() (*Executor, error) {
	h, err := dl.Dlopen(ShimSoname, purego.RTLD_NOW|purego.RTLD_LOCAL|rtldNoload)
	if err != nil {
		return nil, nil
	}
	defer purego.Dlclose(h)
	return RegisterExecutor("")
}

// Close unregisters the Executor (when it is still the registered one) and
// releases its reference to the thunk.
func (e *Executor) Close() error {
	if current.CompareAndSwap(e, nil) {
		cmem.Call(e.setExecutor, 0)
	}
	return purego.Dlclose(e.lib)
}

// Stats counts the dispatches the Executor ran, those it refused for a VM
// fault, and those whose kernel it did not know (or whose layout did not
// match its metadata). Refused counts, among Unknown, the launches of a
// known kernel that the Executor would not compute because a GPU would
// compute garbage: a reduction whose workspace is not zero, or a workgroup
// shape its metadata forbids (LastRefusal says why). Like every refusal
// they reach the queue as KFDSIM_UNKNOWN_KERNEL, which faults it.
type Stats struct {
	Runs, Faults, Unknown, Refused uint64
}

// Stats returns the counts so far.
func (e *Executor) Stats() Stats {
	return Stats{Runs: e.runs.Load(), Faults: e.faults.Load(), Unknown: e.unknown.Load(), Refused: e.refused.Load()}
}

// LastRefusal is the reason for the latest refused launch (see Stats), or
// nil; a dirty reduction workspace matches kernels.ErrWorkspaceNotZero.
func (e *Executor) LastRefusal() error {
	if p := e.lastRefusal.Load(); p != nil {
		return *p
	}
	return nil
}

// refuse records why a launch of a known kernel is refused.
func (e *Executor) refuse(name string, err error) int {
	e.refused.Add(1)
	e.lastRefusal.Store(&err)
	e.complain(name, err.Error())
	return execUnknownKernel
}

// The layout of kfdsim_kernel_call and kfdsim_dispatch (kfdsim.h), checked
// against the C compiler's offsetof in the tests.
const (
	callName      = 0
	callImageBase = 8
	callImageSize = 16
	callDispatch  = 24

	dispGPUNode      = 0
	dispQueueID      = 8
	dispKernelObject = 16
	dispKernarg      = 24
	dispGrid         = 32
	dispWorkgroup    = 44
)

// dispatch is the part of kfdsim_dispatch the executor uses.
type dispatch struct {
	node      uint32
	kernarg   uint64
	grid      [3]uint32
	workgroup [3]uint16
}

// executorTrampoline runs on a command-processor thread created by C.
func executorTrampoline(call uintptr) uintptr {
	r := execUnknownKernel
	if e := current.Load(); e != nil {
		r = e.run(call)
	}
	return uintptr(uint32(int32(r))) // a C int: the callee's caller reads the low 32 bits
}

func load64(addr uintptr) uint64 { return *(*uint64)(cmem.Ptr(addr)) }
func load32(addr uintptr) uint32 { return *(*uint32)(cmem.Ptr(addr)) }
func load16(addr uintptr) uint16 { return *(*uint16)(cmem.Ptr(addr)) }

// bytesAt views C or GPU memory as a byte slice; the caller has checked it.
func bytesAt(addr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(cmem.Ptr(uintptr(addr))), n)
}

func (e *Executor) run(call uintptr) int {
	var nameBuf [256]byte
	namePtr := uintptr(load64(call + callName))
	n := 0
	for ; n < len(nameBuf); n++ {
		c := *(*byte)(cmem.Ptr(namePtr + uintptr(n)))
		if c == 0 {
			break
		}
		nameBuf[n] = c
	}
	if n == len(nameBuf) {
		e.unknown.Add(1)
		return execUnknownKernel
	}
	name := nameBuf[:n]
	base, size := load64(call+callImageBase), load64(call+callImageSize)
	dp := uintptr(load64(call + callDispatch))
	d := dispatch{
		node:      load32(dp + dispGPUNode),
		kernarg:   load64(dp + dispKernarg),
		grid:      [3]uint32{load32(dp + dispGrid), load32(dp + dispGrid + 4), load32(dp + dispGrid + 8)},
		workgroup: [3]uint16{load16(dp + dispWorkgroup), load16(dp + dispWorkgroup + 2), load16(dp + dispWorkgroup + 4)},
	}

	plan, r := e.plan(d.node, base, size, name)
	if r != execOK {
		e.count(r)
		return r
	}
	switch plan.kind {
	case planElementwise:
		r = e.runElementwise(&d, plan)
	case planGemm:
		r = e.runGemm(&d, plan)
	case planReduce:
		r = e.runReduce(&d, plan, name)
	case planUser:
		r = e.runUser(&d, plan)
	}
	e.count(r)
	return r
}

func (e *Executor) count(r int) {
	switch r {
	case execOK:
		e.runs.Add(1)
	case execFault:
		e.faults.Add(1)
	default:
		e.unknown.Add(1)
	}
}

// access is kfdsim_gpu_access: false means the thunk raised a VM fault.
func (e *Executor) access(node uint32, addr, size uint64, write bool) bool {
	if size == 0 {
		return true
	}
	if addr+size < addr {
		size = math.MaxUint64 - addr
	}
	w := uintptr(0)
	if write {
		w = 1
	}
	return uint8(cmem.Call(e.gpuAccessFn, uintptr(node), uintptr(addr), uintptr(size), w)) != 0
}

// plan finds the kernel's verified layout, parsing the image's metadata note
// the first time the image (or a changed one at the same address) is seen.
func (e *Executor) plan(node uint32, base, size uint64, name []byte) (*kernelPlan, int) {
	note, ok := noteOf(bytesAt(base, size))
	if !ok {
		e.complain(string(name), "its code object has no readable metadata note")
		return nil, execUnknownKernel
	}
	e.mu.RLock()
	im := e.images[base]
	if im != nil && bytes.Equal(im.note, note) {
		if p := im.checked[string(name)]; p != nil {
			e.mu.RUnlock()
			if p.err != nil {
				return nil, execUnknownKernel
			}
			return p, execOK
		}
	}
	e.mu.RUnlock()

	// Slow path: once per image and kernel.
	if !e.access(node, base, size, false) {
		return nil, execFault
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	im = e.images[base]
	if im == nil || !bytes.Equal(im.note, note) {
		meta, err := kernels.ReadMetadata(elfFromImage(bytesAt(base, size)))
		if err != nil {
			e.complain(string(name), "metadata: "+err.Error())
			return nil, execUnknownKernel
		}
		im = &imageMeta{note: bytes.Clone(note), meta: meta, checked: make(map[string]*kernelPlan)}
		e.images[base] = im
	}
	p := im.checked[string(name)]
	if p == nil {
		p = planFor(im.meta, string(name))
		if errors.Is(p.err, errUnknownKernel) {
			p = userPlan(bytesAt(base, size), string(name), p)
		}
		im.checked[string(name)] = p
		if p.err != nil {
			e.complain(string(name), p.err.Error())
		}
	}
	if p.err != nil {
		return nil, execUnknownKernel
	}
	return p, execOK
}

// complain takes the name as a string, converted on the slow paths only, so
// the per-dispatch name buffer never escapes to the heap.
func (e *Executor) complain(name, what string) {
	if e.logUnknown {
		fmt.Fprintf(os.Stderr, "kfdsim executor: kernel %s: %s\n", name, what)
	}
}

// errUnknownKernel marks a kernel the Executor does not run.
var errUnknownKernel = errors.New("not a kernel this executor runs")

// planFor checks a kernel's metadata against the layout the Executor reads.
func planFor(meta *kernels.Metadata, name string) *kernelPlan {
	km, ok := meta.Kernel(name)
	if !ok {
		return &kernelPlan{err: fmt.Errorf("not in its code object's metadata")}
	}
	if op, dt, ok := kernels.ParseSymbol(name); ok {
		p := &kernelPlan{kind: planElementwise, op: op, dt: dt, kernarg: kernels.KernargSize}
		want := make([]argWant, len(kernels.Layout))
		for i, a := range kernels.Layout {
			want[i] = argWant{a.Offset, a.Size(dt), a.Kind}
		}
		p.err = checkArgs(km, want)
		return p
	}
	if red, dt, ok := kernels.ParseReductionSymbol(name); ok {
		p := &kernelPlan{kind: planReduce, red: red, dt: dt, kernarg: kernels.ReduceKernargSize, reqd: km.ReqdWorkgroupSize}
		want := make([]argWant, len(kernels.ReduceLayout))
		for i, a := range kernels.ReduceLayout {
			want[i] = argWant{a.Offset, a.Size(dt), a.Kind}
		}
		p.err = checkArgs(km, want)
		if p.err == nil && km.ReqdWorkgroupSize != [3]uint32{kernels.ReduceWorkgroupSize, 1, 1} {
			p.err = fmt.Errorf("metadata requires workgroup %v, the executor runs %d-wide workgroups", km.ReqdWorkgroupSize, kernels.ReduceWorkgroupSize)
		}
		return p
	}
	if dt, ok := simblas.GemmKernelDType(name); ok {
		layout := simblas.GemmLayout(dt)
		p := &kernelPlan{kind: planGemm, dt: dt}
		want := make([]argWant, len(layout))
		for i, a := range layout {
			want[i] = argWant{a.Offset, a.Size, a.Kind}
			p.kernarg = max(p.kernarg, uint64(a.Offset+a.Size))
		}
		p.err = checkArgs(km, want)
		return p
	}
	return &kernelPlan{err: errUnknownKernel}
}

type argWant struct {
	offset, size uint32
	kind         string
}

// checkArgs compares the explicit arguments in the metadata with want, and
// refuses a kernarg segment too small to hold them.
func checkArgs(km *kernels.KernelMeta, want []argWant) error {
	var explicit []kernels.ArgMeta
	for _, a := range km.Args {
		if len(a.ValueKind) < 7 || a.ValueKind[:7] != "hidden_" {
			explicit = append(explicit, a)
		}
	}
	if len(explicit) != len(want) {
		return fmt.Errorf("metadata lists %d explicit arguments, the executor reads %d", len(explicit), len(want))
	}
	for i, w := range want {
		a := explicit[i]
		if a.Offset != w.offset || a.Size != w.size || a.ValueKind != w.kind {
			return fmt.Errorf("argument %d is %s at %d (%d bytes) in the metadata, the executor reads %s at %d (%d bytes)",
				i, a.ValueKind, a.Offset, a.Size, w.kind, w.offset, w.size)
		}
		if w.offset+w.size > km.KernargSegmentSize {
			return fmt.Errorf("kernarg segment of %d bytes cannot hold argument %d", km.KernargSegmentSize, i)
		}
	}
	return nil
}

// runElementwise runs rocsync_<op>_<dt> over n elements. The kernels loop
// over the grid with a stride of the grid size, so every grid computes all n
// elements; an empty grid computes none.
func (e *Executor) runElementwise(d *dispatch, p *kernelPlan) int {
	if !e.access(d.node, d.kernarg, p.kernarg, false) {
		return execFault
	}
	args := kernels.DecodeArgs(bytesAt(d.kernarg, kernels.KernargSize), p.dt)
	if d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0 || args.N == 0 {
		return execOK
	}
	es := uint64(p.dt.Size())
	if args.N > math.MaxUint64/es {
		return e.overflow(d)
	}
	nb := args.N * es
	readsA, readsB := p.op.Reads()
	if readsA && !e.access(d.node, args.A, nb, false) ||
		readsB && !e.access(d.node, args.B, nb, false) ||
		!e.access(d.node, args.Out, nb, true) {
		return execFault
	}
	var a, b []byte
	if readsA {
		a = bytesAt(args.A, nb)
	}
	if readsB {
		b = bytesAt(args.B, nb)
	}
	kernels.RefBytes(p.op, p.dt, bytesAt(args.Out, nb), a, b, args.Alpha)
	return execOK
}

// runReduce runs rocsync_sum_<kind>_<dt>: the input is read, the workspace
// read and written, the outputs written, each access checked first. The
// launch must have the metadata's workgroup shape and a whole number of
// workgroups; kernels.ReduceBytes then refuses a workspace that is not
// zero (nvFuser's checkZeroed), which on a GPU would leave the semaphores
// counting wrong and the sums missing, silently.
func (e *Executor) runReduce(d *dispatch, p *kernelPlan, name []byte) int {
	if !e.access(d.node, d.kernarg, p.kernarg, false) {
		return execFault
	}
	for i := range 3 {
		want := max(p.reqd[i], 1)
		if uint32(max(d.workgroup[i], 1)) != want || max(d.grid[i], 1)%want != 0 {
			return e.refuse(string(name), fmt.Errorf("grid %v in workgroups %v; the kernel requires workgroups of %v and a whole number of them",
				d.grid, d.workgroup, p.reqd))
		}
	}
	args := kernels.DecodeReduceArgs(bytesAt(d.kernarg, kernels.ReduceKernargSize))
	if d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0 {
		return execOK
	}
	shape, err := p.red.Shape(args.Rows, args.Cols)
	if err != nil {
		return e.overflow(d)
	}
	es := uint64(p.dt.Size())
	inBytes, outBytes, wsBytes := args.Rows*args.Cols*es, shape.Outputs*es, shape.WorkspaceSize(p.dt)
	if !e.access(d.node, args.In, inBytes, false) ||
		!e.access(d.node, args.Workspace, wsBytes, false) ||
		!e.access(d.node, args.Workspace, wsBytes, true) ||
		!e.access(d.node, args.Out, outBytes, true) {
		return execFault
	}
	if err := kernels.ReduceBytes(p.red, p.dt, bytesAt(args.Out, outBytes), bytesAt(args.In, inBytes),
		bytesAt(args.Workspace, wsBytes), args.Rows, args.Cols); err != nil {
		return e.refuse(string(name), err)
	}
	return execOK
}

// overflow refuses a range that wraps the address space: the GPU would
// fault on it, so the access check (which raises that fault) gets the
// whole remaining space.
func (e *Executor) overflow(d *dispatch) int {
	e.access(d.node, math.MaxUint64-1, 2, false)
	return execFault
}

// runGemm runs simblas's gemm kernel: one work-item per element of C, so
// elements outside the grid are left alone, as on the GPU.
func (e *Executor) runGemm(d *dispatch, p *kernelPlan) int {
	if !e.access(d.node, d.kernarg, p.kernarg, false) {
		return execFault
	}
	g := simblas.DecodeGemmArgs(bytesAt(d.kernarg, p.kernarg), p.dt)
	m, n := min(g.M, uint64(d.grid[0])), min(g.N, uint64(d.grid[1]))
	if d.grid[2] == 0 || m == 0 || n == 0 {
		return execOK
	}
	es := uint64(p.dt.Size())
	span := func(rows, cols, ld uint64) (uint64, bool) {
		// elements (rows-1) + (cols-1)*ld + 1 of a column-major matrix
		if rows == 0 || cols == 0 {
			return 0, true
		}
		hi, lo := bits64Mul(cols-1, ld)
		if hi != 0 || lo+rows < lo || (lo+rows) > math.MaxUint64/es {
			return 0, false
		}
		return (lo + rows) * es, true
	}
	readAB := g.Alpha != 0 && g.K != 0
	var aBytes, bBytes uint64
	ok := true
	if readAB {
		ar, ac := m, g.K
		if g.TransA {
			ar, ac = g.K, m
		}
		br, bc := g.K, n
		if g.TransB {
			br, bc = n, g.K
		}
		var ok1, ok2 bool
		aBytes, ok1 = span(ar, ac, g.LDA)
		bBytes, ok2 = span(br, bc, g.LDB)
		ok = ok1 && ok2
	}
	cBytes, ok3 := span(m, n, g.LDC)
	if !ok || !ok3 {
		return e.overflow(d)
	}
	if readAB && (!e.access(d.node, g.A, aBytes, false) || !e.access(d.node, g.B, bBytes, false)) {
		return execFault
	}
	if g.Beta != 0 && !e.access(d.node, g.C, cBytes, false) {
		return execFault
	}
	if !e.access(d.node, g.C, cBytes, true) {
		return execFault
	}
	simblas.GemmBytes(p.dt, &g, m, n, bytesAt(g.A, aBytes), bytesAt(g.B, bBytes), bytesAt(g.C, cBytes))
	return execOK
}

func bits64Mul(a, b uint64) (hi, lo uint64) {
	const mask32 = 1<<32 - 1
	a0, a1 := a&mask32, a>>32
	b0, b1 := b&mask32, b>>32
	w0 := a0 * b0
	t := a1*b0 + w0>>32
	w1, w2 := t&mask32, t>>32
	w1 += a0 * b1
	hi = a1*b1 + w2 + w1>>32
	lo = a * b
	return
}

// ---- the loaded image ------------------------------------------------------

// noteOf returns the descriptor of the NT_AMDGPU_METADATA note in a loaded
// image, found through its PT_NOTE program header (a loaded image has no
// section headers).
func noteOf(img []byte) ([]byte, bool) {
	le := binary.LittleEndian
	if len(img) < 64 || string(img[:4]) != "\x7fELF" {
		return nil, false
	}
	phoff, phnum := le.Uint64(img[32:]), uint64(le.Uint16(img[56:]))
	if le.Uint16(img[54:]) != 56 || phoff > uint64(len(img)) || phnum > (uint64(len(img))-phoff)/56 {
		return nil, false
	}
	for i := uint64(0); i < phnum; i++ {
		ph := img[phoff+i*56:]
		if le.Uint32(ph) != 4 { // PT_NOTE
			continue
		}
		off, size := le.Uint64(ph[16:]), le.Uint64(ph[40:])
		if off > uint64(len(img)) || size > uint64(len(img))-off {
			return nil, false
		}
		notes := img[off : off+size]
		for len(notes) >= 12 {
			nameSize, descSize, typ := uint64(le.Uint32(notes)), uint64(le.Uint32(notes[4:])), le.Uint32(notes[8:])
			nameEnd := 12 + (nameSize+3)&^3
			descEnd := nameEnd + (descSize+3)&^3
			if nameSize > uint64(len(notes)) || descSize > uint64(len(notes)) || descEnd > uint64(len(notes)) {
				return nil, false
			}
			if typ == 32 && nameSize == 7 && string(notes[12:18]) == "AMDGPU" {
				return notes[nameEnd : nameEnd+descSize], true
			}
			notes = notes[descEnd:]
		}
	}
	return nil, false
}

// elfFromImage rebuilds a parseable ELF file from a loaded image so that
// kernels.ReadMetadata (the code the CPU tests use) can read it: the loader
// copies segments to their virtual addresses, which are their offsets in
// the copy, but not the section headers. The copy gets section headers for
// the note and the dynamic symbol and string tables, found through
// PT_NOTE and PT_DYNAMIC. Anything malformed gives bytes that
// ReadMetadata refuses.
func elfFromImage(img []byte) []byte {
	le := binary.LittleEndian
	out := bytes.Clone(img)
	if len(img) < 64 {
		return out
	}
	phoff, phnum := le.Uint64(img[32:]), uint64(le.Uint16(img[56:]))
	if phoff > uint64(len(img)) || phnum > (uint64(len(img))-phoff)/56 {
		return out
	}
	var noteOff, noteSize, symtab, strtab, strsz, hash, gnuHash uint64
	for i := uint64(0); i < phnum; i++ {
		ph := img[phoff+i*56:]
		off, size := le.Uint64(ph[16:]), le.Uint64(ph[40:])
		if off > uint64(len(img)) || size > uint64(len(img))-off {
			continue
		}
		switch le.Uint32(ph) {
		case 4: // PT_NOTE
			noteOff, noteSize = off, size
		case 2: // PT_DYNAMIC
			for at := off; at+16 <= off+size; at += 16 {
				tag, val := le.Uint64(img[at:]), le.Uint64(img[at+8:])
				switch tag {
				case 0:
					at = off + size
				case 4:
					hash = val
				case 5:
					strtab = val
				case 6:
					symtab = val
				case 10:
					strsz = val
				case 0x6ffffef5:
					gnuHash = val
				}
			}
		}
	}
	nsyms := dynsymCount(img, hash, gnuHash)
	shstr := []byte("\x00.note\x00.dynsym\x00.dynstr\x00.shstrtab\x00")
	shstrOff := uint64(len(out))
	out = append(out, shstr...)
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	shoff := uint64(len(out))
	section := func(name, typ uint32, flags, off, size uint64, link, info uint32, align, entsize uint64) {
		var sh [64]byte
		le.PutUint32(sh[0:], name)
		le.PutUint32(sh[4:], typ)
		le.PutUint64(sh[8:], flags)
		le.PutUint64(sh[16:], off) // sh_addr == offset in the image
		le.PutUint64(sh[24:], off)
		le.PutUint64(sh[32:], size)
		le.PutUint32(sh[40:], link)
		le.PutUint32(sh[44:], info)
		le.PutUint64(sh[48:], align)
		le.PutUint64(sh[56:], entsize)
		out = append(out, sh[:]...)
	}
	section(0, 0, 0, 0, 0, 0, 0, 0, 0)
	section(1, 7, 2, noteOff, noteSize, 0, 0, 4, 0)             // .note, SHT_NOTE
	section(7, 11, 2, symtab, nsyms*24, 3, 1, 8, 24)            // .dynsym, SHT_DYNSYM, linked to .dynstr
	section(15, 3, 2, strtab, strsz, 0, 0, 1, 0)                // .dynstr, SHT_STRTAB
	section(23, 3, 0, shstrOff, uint64(len(shstr)), 0, 0, 1, 0) // .shstrtab
	le.PutUint64(out[40:], shoff)                               // e_shoff
	le.PutUint16(out[58:], 64)                                  // e_shentsize
	le.PutUint16(out[60:], 5)                                   // e_shnum
	le.PutUint16(out[62:], 4)                                   // e_shstrndx
	return out
}

// dynsymCount is the number of dynamic symbols: nchain of DT_HASH, or one
// past the last symbol reachable through DT_GNU_HASH.
func dynsymCount(img []byte, hash, gnuHash uint64) uint64 {
	le := binary.LittleEndian
	n := uint64(len(img))
	if hash != 0 && hash+8 <= n {
		return uint64(le.Uint32(img[hash+4:]))
	}
	if gnuHash == 0 || gnuHash+16 > n {
		return 0
	}
	nbuckets, symoffset, bloom := uint64(le.Uint32(img[gnuHash:])), uint64(le.Uint32(img[gnuHash+4:])), uint64(le.Uint32(img[gnuHash+8:]))
	if nbuckets > n || bloom > n {
		return 0
	}
	buckets := gnuHash + 16 + bloom*8
	chains := buckets + nbuckets*4
	if chains > n {
		return 0
	}
	last := uint64(0)
	for i := uint64(0); i < nbuckets; i++ {
		last = max(last, uint64(le.Uint32(img[buckets+i*4:])))
	}
	if last < symoffset {
		return symoffset
	}
	for {
		at := chains + (last-symoffset)*4
		if at+4 > n {
			return 0
		}
		if le.Uint32(img[at:])&1 != 0 {
			return last + 1
		}
		last++
	}
}
