package userkernel

import (
	"path/filepath"
	"strconv"
	"testing"
)

var benchDevices = []struct {
	name string
	dev  Device
}{{"gfx90a-v5", gfx90aV5}, {"sm_80", sm80}}

// BenchmarkCompileCold is a first compile: an empty cache directory and a
// new Builder, so it includes finding the tools, asking their versions
// (clang --version, ld.lld --version), compiling, linking, verifying and
// writing the cache entry.
func BenchmarkCompileCold(b *testing.B) {
	needClang(b)
	src := saxpy(b)
	for _, d := range benchDevices {
		b.Run(d.name, func(b *testing.B) {
			root := b.TempDir()
			i := 0
			for b.Loop() {
				i++
				bld := NewBuilder(Options{CacheDir: filepath.Join(root, strconv.Itoa(i))})
				if _, err := bld.Build(src, d.dev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoadWarmDisk is a warm start: a new Builder (as in a new
// process) over a filled cache: stat the tools, read and verify the entry
// (SHA-256), parse the metadata or PTX. No tool runs.
func BenchmarkLoadWarmDisk(b *testing.B) {
	needClang(b)
	src := saxpy(b)
	for _, d := range benchDevices {
		b.Run(d.name, func(b *testing.B) {
			dir := b.TempDir()
			if _, err := NewBuilder(Options{CacheDir: dir}).Build(src, d.dev); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				bld := NewBuilder(Options{CacheDir: dir})
				if _, err := bld.Build(src, d.dev); err != nil {
					b.Fatal(err)
				}
				if s := bld.Stats(); s.DiskHits != 1 || s.Compiles != 0 {
					b.Fatalf("not a disk hit: %+v", s)
				}
			}
		})
	}
}

// BenchmarkBuildInMemory is a repeated Build in one process (tool stat,
// key hash, map hit).
func BenchmarkBuildInMemory(b *testing.B) {
	bld := newBuilder(b)
	src := saxpy(b)
	if _, err := bld.Build(src, gfx90aV5); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := bld.Build(src, gfx90aV5); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLaunchHostCost is the per-launch host work of a loaded kernel:
// finding it in the device's Registry, checking and packing its four
// arguments and geometry, and listing its buffer accesses.
func BenchmarkLaunchHostCost(b *testing.B) {
	bld := newBuilder(b)
	src := saxpy(b)
	for _, d := range benchDevices {
		b.Run(d.name, func(b *testing.B) {
			reg := NewRegistry(bld, &fakeLoader{dev: d.dev})
			k, err := reg.Kernel(src, "saxpy")
			if err != nil {
				b.Fatal(err)
			}
			block := make([]byte, k.ArgsSize)
			acc := make([]BufferAccess, 0, 4)
			args := []Arg{Buffer(0x1000, ReadWrite), Buffer(0x2000, Read), Float32(2), Uint32(1 << 20)}
			b.ReportAllocs()
			for b.Loop() {
				lk, err := reg.Kernel(src, "saxpy")
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Pack(block, Grid1D(1<<20, 256), args); err != nil {
					b.Fatal(err)
				}
				acc = lk.Accesses(acc[:0], args)
			}
		})
	}
}

// BenchmarkPack is Pack alone.
func BenchmarkPack(b *testing.B) {
	bld := newBuilder(b)
	k := buildKernel(b, bld, saxpy(b), gfx90aV5, "saxpy")
	block := make([]byte, k.ArgsSize)
	args := []Arg{Buffer(0x1000, ReadWrite), Buffer(0x2000, Read), Float32(2), Uint32(1 << 20)}
	b.ReportAllocs()
	for b.Loop() {
		if err := k.Pack(block, Grid1D(1<<20, 256), args); err != nil {
			b.Fatal(err)
		}
	}
}
