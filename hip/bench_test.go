package hip

import (
	"testing"

	"github.com/ebitengine/purego"
)

// Benchmarks that need no GPU. The Real* ones call the installed
// libamdhip64: hipGetErrorName does no runtime initialisation and measures
// the binding, while every other HIP call on a machine without a GPU spends
// ~25 µs inside HIP failing its initialisation again. The Fake* ones call
// testdata/fakehip.c, whose functions do almost nothing, so they measure
// what the binding adds (pool, maps, LockOSThread, hipSetDevice, SyscallN).

func BenchmarkRealSyscallNDirect(b *testing.B) {
	l := realLib(b)
	fn := l.sym[symGetErrorName]
	b.ReportAllocs()
	for b.Loop() {
		purego.SyscallN(fn, uintptr(ErrorNoDevice))
	}
}

func BenchmarkRealSyscallNPooledArgs(b *testing.B) {
	l := realLib(b)
	fn := l.sym[symGetErrorName]
	b.ReportAllocs()
	for b.Loop() {
		blk := l.scratch.Get()
		blk.Call(fn, uintptr(ErrorNoDevice))
		l.scratch.Put(blk)
	}
}

func BenchmarkRealErrorName(b *testing.B) {
	l := realLib(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = l.ErrorName(ErrorNoDevice)
	}
}

func BenchmarkRealDeviceCountNoGPU(b *testing.B) {
	l := realLib(b)
	if _, err := l.DeviceCount(); err == nil {
		b.Skip("a GPU is present")
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.DeviceCount()
	}
}

func BenchmarkRealEventRecordNoGPU(b *testing.B) {
	l := realLib(b)
	if _, err := l.DeviceCount(); err == nil {
		b.Skip("a GPU is present")
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = l.EventRecord(0, 0)
	}
}

type fakeObjs struct {
	s    Stream
	ev   Event
	ev2  Event
	f    Function
	args []byte
}

func fakeSetup(b *testing.B) (*Lib, fakeObjs) {
	l := fakeLib(b)
	var o fakeObjs
	var err error
	if o.s, err = l.StreamCreate(1, 0); err != nil {
		b.Fatal(err)
	}
	o.ev, _ = l.EventCreate(1, 0)
	o.ev2, _ = l.EventCreate(1, 0)
	m, err := l.ModuleLoadData(1, []byte("FAKE"))
	if err != nil {
		b.Fatal(err)
	}
	if o.f, err = l.ModuleGetFunction(m, "kern"); err != nil {
		b.Fatal(err)
	}
	o.args = launchArgs(3, 24)
	b.Cleanup(func() {
		l.EventDestroy(o.ev)
		l.EventDestroy(o.ev2)
		l.ModuleUnload(m)
		l.StreamDestroy(o.s)
	})
	return l, o
}

func BenchmarkFakeEventRecord(b *testing.B) {
	l, o := fakeSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.EventRecord(o.ev, o.s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFakeStreamWaitEvent(b *testing.B) {
	l, o := fakeSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.StreamWaitEvent(o.s, o.ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFakeStreamQuery(b *testing.B) {
	l, o := fakeSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.StreamQuery(o.s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFakeEventQueryNotReady(b *testing.B) {
	l, o := fakeSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.EventQuery(o.ev2); err == nil {
			b.Fatal("not NotReady")
		}
	}
}

func BenchmarkFakeModuleLaunchKernel(b *testing.B) {
	l, o := fakeSetup(b)
	grid, block, shared := launchGeom(3)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.ModuleLaunchKernel(o.f, grid, block, shared, o.s, o.args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFakeModuleLaunchKernelParallel(b *testing.B) {
	l, o := fakeSetup(b)
	grid, block, shared := launchGeom(3)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.ModuleLaunchKernel(o.f, grid, block, shared, o.s, o.args); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkFakeDeviceCount(b *testing.B) {
	l := fakeLib(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.DeviceCount(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFakeMalloc(b *testing.B) {
	l := fakeLib(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := l.Malloc(2, 64)
		if err != nil {
			b.Fatal(err)
		}
		l.Free(2, p)
	}
}
