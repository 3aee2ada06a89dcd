package cuda

import (
	"runtime"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/kernels"
)

// Benchmarks of the call forms purego offers, against the fake libcuda
// (BenchmarkFake*: what the binding itself costs, the fake's functions do
// almost nothing) and against the real driver (BenchmarkGPU*, with
// ROCSYNC_GPU=1). Run with -benchmem: the point is the allocs/op column.
//
//   - SyscallNVariadic: purego.SyscallN(fn, a, b). The implicit variadic
//     slice escapes (SyscallN is //go:uintptrescapes): 1 allocation.
//   - SyscallNPooled: the arguments in a pooled heap array passed with
//     "...": no allocation. This is what the binding uses.
//   - RegisterFunc: purego.RegisterFunc with a fixed Go signature; it
//     goes through reflect and allocates per call.
//   - Lib/Ctx: the binding's own methods; Ctx adds LockOSThread and
//     cuCtxSetCurrent.

type benchEnv struct {
	l   *Lib
	c   *Ctx
	obj *fakeObjs
}

func benchSetup(b *testing.B, gpu bool) *benchEnv {
	var c *Ctx
	if gpu {
		c = gpuCtx(b)
	} else {
		l := fakeLib(b)
		var err error
		if c, err = l.PrimaryCtxRetain(0); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Release() })
	}
	o := newObjs(b, c)
	b.Cleanup(o.close)
	return &benchEnv{l: c.lib, c: c, obj: o}
}

// newObjs is newFakeObjs with the PTX for the context's device.
func newObjs(tb testing.TB, c *Ctx) *fakeObjs {
	o := newFakeObjs(tb, c)
	ma, _, err := c.lib.ComputeCapability(c.dev)
	if err != nil {
		tb.Fatal(err)
	}
	arch := "sm_80"
	if ma >= 9 {
		arch = "sm_90"
	}
	ptx, _ := kernels.PTX(arch)
	if err := c.ModuleUnload(o.m); err != nil {
		tb.Fatal(err)
	}
	if o.m, err = c.ModuleLoadData(ptx); err != nil {
		tb.Fatal(err)
	}
	if o.f, err = c.ModuleGetFunction(o.m, "rocsync_mul_f32"); err != nil {
		tb.Fatal(err)
	}
	return o
}

// lockCurrent pins the benchmark goroutine to its thread with the context
// current, for the raw forms.
func (e *benchEnv) lockCurrent(b *testing.B) {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	if err := e.c.MakeCurrent(); err != nil {
		b.Fatal(err)
	}
}

func benchSyscallNVariadic(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	e.lockCurrent(b)
	fn, ev, s := e.l.sym[symEventRecord], uintptr(e.obj.e), uintptr(e.obj.s)
	b.ReportAllocs()
	for b.Loop() {
		purego.SyscallN(fn, ev, s)
	}
}

func benchSyscallNPooled(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	e.lockCurrent(b)
	fn, ev, s := e.l.sym[symEventRecord], uintptr(e.obj.e), uintptr(e.obj.s)
	b.ReportAllocs()
	for b.Loop() {
		blk := blocks.Get()
		blk.Call(fn, ev, s)
		blocks.Put(blk)
	}
}

func benchRegisterFunc(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	e.lockCurrent(b)
	var record func(ev, s uintptr) int32
	purego.RegisterFunc(&record, e.l.sym[symEventRecord])
	ev, s := uintptr(e.obj.e), uintptr(e.obj.s)
	b.ReportAllocs()
	for b.Loop() {
		record(ev, s)
	}
}

func benchLibEventRecord(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	e.lockCurrent(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = e.l.EventRecord(e.obj.e, e.obj.s)
	}
}

func benchCtxEventRecord(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	b.ReportAllocs()
	for b.Loop() {
		_ = e.c.EventRecord(e.obj.e, e.obj.s)
	}
}

func benchCtxSetCurrent(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	e.lockCurrent(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = e.l.CtxSetCurrent(e.c.h)
	}
}

func benchCtxEventQuery(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	if err := e.c.EventRecord(e.obj.e, e.obj.s); err != nil {
		b.Fatal(err)
	}
	if err := e.c.EventSynchronize(e.obj.e); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = e.c.EventQuery(e.obj.e)
	}
}

func benchCtxStreamWaitEvent(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	if err := e.c.EventRecord(e.obj.e, e.obj.s); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = e.c.StreamWaitEvent(e.obj.s, e.obj.e)
		if i++; i%4096 == 0 {
			_ = e.c.StreamSynchronize(e.obj.s)
		}
	}
	_ = e.c.StreamSynchronize(e.obj.s)
}

// The launches are synchronized every 1024 so the queue never fills.
func benchLaunch(b *testing.B, gpu, raw bool) {
	benchLaunchMode(b, gpu, raw, true)
}

// benchLaunchMode with check unset measures Ctx calls that set the context
// every time instead of checking it first (cuCtxGetCurrent).
func benchLaunchMode(b *testing.B, gpu, raw, check bool) {
	checkCurrent = check
	defer func() { checkCurrent = true }()
	e := benchSetup(b, gpu)
	if raw {
		e.lockCurrent(b)
	}
	o := e.obj
	grid, block := Dim3{1, 1, 1}, Dim3{256, 1, 1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var err error
		if raw {
			err = e.l.LaunchKernel(o.f, grid, block, 0, o.s, o.pb.Params())
		} else {
			err = e.c.LaunchKernel(o.f, grid, block, 0, o.s, o.pb.Params())
		}
		if err != nil {
			b.Fatal(err)
		}
		if i++; i%1024 == 0 {
			_ = e.c.StreamSynchronize(o.s)
		}
	}
	_ = e.c.StreamSynchronize(o.s)
}

func BenchmarkFakeSyscallNVariadic(b *testing.B)   { benchSyscallNVariadic(b, false) }
func BenchmarkFakeSyscallNPooled(b *testing.B)     { benchSyscallNPooled(b, false) }
func BenchmarkFakeRegisterFunc(b *testing.B)       { benchRegisterFunc(b, false) }
func BenchmarkFakeLibEventRecord(b *testing.B)     { benchLibEventRecord(b, false) }
func BenchmarkFakeCtxEventRecord(b *testing.B)     { benchCtxEventRecord(b, false) }
func BenchmarkFakeCtxSetCurrent(b *testing.B)      { benchCtxSetCurrent(b, false) }
func BenchmarkFakeCtxEventQuery(b *testing.B)      { benchCtxEventQuery(b, false) }
func BenchmarkFakeCtxStreamWaitEvent(b *testing.B) { benchCtxStreamWaitEvent(b, false) }
func BenchmarkFakeLibLaunch(b *testing.B)          { benchLaunch(b, false, true) }
func BenchmarkFakeCtxLaunch(b *testing.B)          { benchLaunch(b, false, false) }

func BenchmarkGPUSyscallNVariadic(b *testing.B)    { benchSyscallNVariadic(b, true) }
func BenchmarkGPUSyscallNPooled(b *testing.B)      { benchSyscallNPooled(b, true) }
func BenchmarkGPURegisterFunc(b *testing.B)        { benchRegisterFunc(b, true) }
func BenchmarkGPULibEventRecord(b *testing.B)      { benchLibEventRecord(b, true) }
func BenchmarkGPUCtxEventRecord(b *testing.B)      { benchCtxEventRecord(b, true) }
func BenchmarkGPUCtxSetCurrent(b *testing.B)       { benchCtxSetCurrent(b, true) }
func BenchmarkGPUCtxEventQuery(b *testing.B)       { benchCtxEventQuery(b, true) }
func BenchmarkGPUCtxStreamWaitEvent(b *testing.B)  { benchCtxStreamWaitEvent(b, true) }
func BenchmarkGPULibLaunch(b *testing.B)           { benchLaunch(b, true, true) }
func BenchmarkGPUCtxLaunch(b *testing.B)           { benchLaunch(b, true, false) }
func BenchmarkGPUCtxLaunchSetAlways(b *testing.B)  { benchLaunchMode(b, true, false, false) }
func BenchmarkFakeCtxLaunchSetAlways(b *testing.B) { benchLaunchMode(b, false, false, false) }

func benchCtxEventRecordSetAlways(b *testing.B, gpu bool) {
	checkCurrent = false
	defer func() { checkCurrent = true }()
	benchCtxEventRecord(b, gpu)
}

func BenchmarkGPUCtxEventRecordSetAlways(b *testing.B)  { benchCtxEventRecordSetAlways(b, true) }
func BenchmarkFakeCtxEventRecordSetAlways(b *testing.B) { benchCtxEventRecordSetAlways(b, false) }

// benchGraphLaunch launches an empty captured graph: on the fake it runs
// nothing, so the figure is the binding's cost (raw: Lib.GraphLaunch on a
// thread locked with the context current; else Ctx.GraphLaunch, which
// locks the thread and checks the context per call).
func benchGraphLaunch(b *testing.B, gpu, raw bool) {
	e := benchSetup(b, gpu)
	o := e.obj
	if err := e.c.BeginCapture(o.s, CaptureModeRelaxed); err != nil {
		b.Fatal(err)
	}
	g, err := e.c.EndCapture(o.s)
	if err != nil {
		b.Fatal(err)
	}
	exec, err := e.c.GraphInstantiate(g)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.c.GraphDestroy(g); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.c.GraphExecDestroy(exec) })
	if raw {
		e.lockCurrent(b)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if raw {
			err = e.l.GraphLaunch(exec, o.s)
		} else {
			err = e.c.GraphLaunch(exec, o.s)
		}
		if err != nil {
			b.Fatal(err)
		}
		if i++; i%1024 == 0 {
			_ = e.c.StreamSynchronize(o.s)
		}
	}
	_ = e.c.StreamSynchronize(o.s)
}

// benchMakeCurrent is Ctx.MakeCurrent with the context already current,
// as cudadev calls it before every cuBLAS call.
func benchMakeCurrent(b *testing.B, gpu bool) {
	e := benchSetup(b, gpu)
	e.lockCurrent(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := e.c.MakeCurrent(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFakeLibGraphLaunch(b *testing.B) { benchGraphLaunch(b, false, true) }
func BenchmarkFakeCtxGraphLaunch(b *testing.B) { benchGraphLaunch(b, false, false) }
func BenchmarkFakeCtxMakeCurrent(b *testing.B) { benchMakeCurrent(b, false) }
func BenchmarkGPULibGraphLaunch(b *testing.B)  { benchGraphLaunch(b, true, true) }
func BenchmarkGPUCtxGraphLaunch(b *testing.B)  { benchGraphLaunch(b, true, false) }
func BenchmarkGPUCtxMakeCurrent(b *testing.B)  { benchMakeCurrent(b, true) }
