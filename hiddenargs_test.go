package rocsync

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/hiptest"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// HIP kernels built by clang-22 read blockDim and gridDim: in code object v4
// from the dispatch packet, from v5 on from the hidden arguments after the
// explicit ones (the whole 256-byte implicit area reserved: scale's kernarg
// segment is 272 bytes). They are launched here, each from a source holding
// that one version, under every policy: through rocsync's HSA queue (Pack
// fills the hidden arguments the metadata lists) or, under Unified, through
// hipModuleLaunchKernel (HIP fills them; rocsync passes the explicit
// arguments only). The device runs each kernel through its Go reference
// (internal/hiptest), which gets the geometry the kernel reads from the
// hidden arguments, and is compared with the CPU expectation of what a
// work-item sees: on the HSA path the grid of 1000 work-items in
// workgroups of 64 leaves a last workgroup of 40 (blockDim is the
// remainder there, as ockl computes it), HIP launches whole blocks.

// hipTestKernels builds launch.hip as code object v, or skips the test
// where clang-22 or Debian's HIP headers are missing (CI installs both).
func hipTestKernels(t *testing.T, v kernels.CodeObjectVersion) []byte {
	t.Helper()
	co, err := hiptest.Build("gfx90a", v)
	if errors.Is(err, hiptest.ErrNoToolchain) {
		t.Skip(err)
	}
	require.NoError(t, err)
	return co
}

// noargsSeen records the geometries noargs's reference ran with.
type noargsSeen struct {
	mu sync.Mutex
	gs []userkernel.Geometry
}

func (s *noargsSeen) add(g userkernel.Geometry) {
	s.mu.Lock()
	s.gs = append(s.gs, g)
	s.mu.Unlock()
}

func (s *noargsSeen) take() []userkernel.Geometry {
	s.mu.Lock()
	defer s.mu.Unlock()
	gs := s.gs
	s.gs = nil
	return gs
}

// hiddenArgsProgram launches the four test kernels of one code object on d
// and checks what each work-item saw.
func hiddenArgsProgram(t *testing.T, d *Device, co []byte, seen *noargsSeen) {
	t.Helper()
	src, err := userkernel.CodeObjects(co)
	require.NoError(t, err)
	load := func(name string) *Kernel {
		k, err := d.LoadKernel(src, name)
		require.NoError(t, err, "LoadKernel(%s)", name)
		return k
	}
	scale, geom, offs, noargs := load("scale"), load("geom"), load("offs"), load("noargs")
	tk, err := d.NewTask()
	require.NoError(t, err)
	defer func() { require.NoError(t, tk.Close()) }()

	const n, wg, groups = 1000, 64, 16 // 15 whole workgroups and one of 40
	hip := d.Policy() == Unified       // whole blocks: 16 of 64
	download := func(b *Buffer, size int) []byte {
		out := make([]byte, size)
		p, err := tk.Download(b, out)
		require.NoError(t, err)
		require.NoError(t, p.Wait(context.Background()))
		return out
	}

	// geom: blockDim.x | gridDim.x<<16 per work-item.
	geomBuf, err := d.NewBuffer(4 * groups * hiptest.GeomStride)
	require.NoError(t, err)
	sentinel := make([]byte, 4*groups*hiptest.GeomStride)
	for i := range sentinel {
		sentinel[i] = 0xff
	}
	require.NoError(t, tk.Upload(geomBuf, sentinel))
	require.NoError(t, tk.Launch(geom, userkernel.Grid1D(n, wg), Out(geomBuf)))
	got := download(geomBuf, len(sentinel))
	for b := range groups {
		size := wg
		if b == groups-1 && !hip {
			size = n - (groups-1)*wg
		}
		for tid := range hiptest.GeomStride {
			want := uint32(math.MaxUint32)
			if tid < size {
				want = uint32(size) | groups<<16
			}
			if v := binary.LittleEndian.Uint32(got[4*(b*hiptest.GeomStride+tid):]); v != want {
				t.Fatalf("geom: workgroup %d work-item %d saw %#x, want %#x", b, tid, v, want)
			}
		}
	}

	// scale over whole blocks with a bounds check, as HIP code is launched.
	x, err := d.NewBuffer(4 * n)
	require.NoError(t, err)
	xs := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(xs[4*i:], math.Float32bits(float32(i%97)-30))
	}
	require.NoError(t, tk.Upload(x, xs))
	require.NoError(t, tk.Launch(scale, userkernel.Grid1D(groups*wg, wg), InOut(x), I32(n)))
	got = download(x, 4*n)
	for i := range n {
		want := 2*(float32(i%97)-30) + groups
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != want {
			t.Fatalf("scale: x[%d] = %v, want %v", i, v, want)
		}
	}

	// offs: the global offset the kernel reads (0) plus its index.
	o, err := d.NewBuffer(8 * groups * wg)
	require.NoError(t, err)
	require.NoError(t, tk.Upload(o, make([]byte, 8*groups*wg)))
	require.NoError(t, tk.Launch(offs, userkernel.Grid1D(n, wg), Out(o)))
	got = download(o, 8*groups*wg)
	last := n
	if hip {
		last = groups * wg
	}
	for i := range groups * wg {
		want := uint64(0)
		if i < last {
			want = uint64(i)
		}
		if v := binary.LittleEndian.Uint64(got[8*i:]); v != want {
			t.Fatalf("offs: out[%d] = %d, want %d", i, v, want)
		}
	}

	// noargs: no explicit argument; under Unified HIP is given none.
	seen.take()
	require.NoError(t, tk.Launch(noargs, userkernel.Grid1D(n, wg)))
	require.NoError(t, tk.Synchronize())
	wantGrid := uint32(n)
	if hip {
		wantGrid = groups * wg
	}
	gs := seen.take()
	require.Len(t, gs, 1, "noargs ran once")
	require.Equal(t, [3]uint32{wantGrid, 1, 1}, gs[0].Grid)
	require.Equal(t, [3]uint32{wg, 1, 1}, gs[0].Workgroup)
}

// On the emulator (ROCm 6.2: ROCr and HIP load v4, v5 and v6), with the
// hazard checker and random delays on, under every policy.
func TestHIPKernelsHiddenArgsOnEmulator(t *testing.T) {
	objects := map[kernels.CodeObjectVersion][]byte{}
	for _, v := range []kernels.CodeObjectVersion{kernels.CodeObjectV4, kernels.CodeObjectV5, kernels.CodeObjectV6} {
		objects[v] = hipTestKernels(t, v)
	}
	seen := &noargsSeen{}
	refs := &userkernel.References{}
	require.NoError(t, hiptest.Register(refs, seen.add))
	for _, p := range allPolicies {
		for _, v := range []kernels.CodeObjectVersion{kernels.CodeObjectV4, kernels.CodeObjectV5, kernels.CodeObjectV6} {
			t.Run(p.String()+"/"+v.String(), func(t *testing.T) {
				d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
					Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 20 * time.Microsecond, Seed: 5, KernelReferences: refs}})
				require.NoError(t, err)
				defer func() { require.NoError(t, d.Close()) }()
				hiddenArgsProgram(t, d, objects[v], seen)
				require.NoError(t, d.Synchronize())
				require.Empty(t, d.Hazards())
			})
		}
	}
}
