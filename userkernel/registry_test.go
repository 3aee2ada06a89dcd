package userkernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/rocsync/rocsync/kernels"
)

// fakeLoader stands in for a driver: it counts loads, hands out handles,
// and can refuse code-object versions the way HIP 5.2 refuses v5.
type fakeLoader struct {
	dev     Device
	refuse  map[kernels.CodeObjectVersion]bool
	fail    int // the next fail loads fail with an ordinary error
	mu      sync.Mutex
	loads   []Target
	lookups int
}

func (f *fakeLoader) Device() Device { return f.dev }

func (f *fakeLoader) LoadImage(img *Image) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads = append(f.loads, img.Target)
	if f.fail > 0 {
		f.fail--
		return 0, errors.New("out of memory")
	}
	if f.refuse[img.Target.CodeObject] {
		return 0, fmt.Errorf("hipModuleLoadData: hipErrorSharedObjectInitFailed: %w", ErrImageRefused)
	}
	return uint64(len(f.loads)), nil
}

func (f *fakeLoader) Function(module uint64, k *Signature) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	return module<<32 | uint64(f.lookups), nil
}

func TestRegistryLoadsOncePerDevice(t *testing.T) {
	b := newBuilder(t)
	src := saxpy(t)
	dev1 := &fakeLoader{dev: Device{ISA: "gfx90a"}}
	dev2 := &fakeLoader{dev: Device{ISA: "sm_90"}}
	r1, r2 := NewRegistry(b, dev1), NewRegistry(b, dev2)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, r := range []*Registry{r1, r2} {
				if _, err := r.Kernel(src, "saxpy"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	k1, _ := r1.Kernel(src, "saxpy")
	again, _ := r1.Kernel(saxpy(t), "saxpy") // an equal Source shares the module
	if len(dev1.loads) != 1 || len(dev2.loads) != 1 || k1 != again {
		t.Errorf("loads %v / %v; same kernel %v", dev1.loads, dev2.loads, k1 == again)
	}
	if dev1.loads[0] != (Target{Family: AMD, Arch: "gfx90a", CodeObject: kernels.CodeObjectV5}) || dev2.loads[0].Arch != "sm_90" {
		t.Errorf("targets %v %v", dev1.loads, dev2.loads)
	}
	if k1.Handle == 0 || k1.Name != "saxpy" {
		t.Errorf("loaded kernel %+v", k1)
	}
	if _, err := r1.Kernel(src, "nope"); !errors.Is(err, ErrNoKernel) {
		t.Errorf("missing kernel: %v", err)
	}
}

// A runtime that refuses v5 gets v4, as rocsync's own kernels do.
func TestRegistryFallsBackOnRefusal(t *testing.T) {
	b := newBuilder(t)
	l := &fakeLoader{dev: Device{ISA: "gfx90a"}, refuse: map[kernels.CodeObjectVersion]bool{kernels.CodeObjectV5: true}}
	k, err := NewRegistry(b, l).Kernel(saxpy(t), "saxpy")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.loads) != 2 || l.loads[1].CodeObject != kernels.CodeObjectV4 || k.Target.CodeObject != kernels.CodeObjectV4 {
		t.Errorf("loads %v, kernel for %v", l.loads, k.Target)
	}
	all := &fakeLoader{dev: Device{ISA: "gfx90a"}, refuse: map[kernels.CodeObjectVersion]bool{4: true, 5: true}}
	if _, err := NewRegistry(b, all).Kernel(saxpy(t), "saxpy"); !errors.Is(err, ErrImageRefused) {
		t.Errorf("every version refused: %v", err)
	}
}

// sliceMemory is device memory for the reference hook: buffers at fixed
// addresses.
type sliceMemory map[uint64][]byte

func (m sliceMemory) Bytes(ptr, size uint64, write bool) ([]byte, error) {
	for base, buf := range m {
		if ptr >= base && ptr+size <= base+uint64(len(buf)) {
			return buf[ptr-base : ptr-base+size], nil
		}
	}
	return nil, fmt.Errorf("no memory at %#x+%d", ptr, size)
}

// The emulator runs kernels from Go references by name; a user kernel gets
// one through References, fed from the packed argument block.
func TestReferenceRunsFromArgumentBlock(t *testing.T) {
	b := newBuilder(t)
	k := buildKernel(t, b, saxpy(t), Device{ISA: "gfx90a"}, "saxpy")
	var refs References
	err := refs.Register("saxpy", func(g Geometry, args []Arg, mem Memory) error {
		n := args[3].Uint64()
		y, err := mem.Bytes(args[0].Ptr(), 4*n, true)
		if err != nil {
			return err
		}
		x, err := mem.Bytes(args[1].Ptr(), 4*n, false)
		if err != nil {
			return err
		}
		a := float32(args[2].Float64())
		for i := range n {
			xi := math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))
			yi := math.Float32frombits(binary.LittleEndian.Uint32(y[4*i:]))
			binary.LittleEndian.PutUint32(y[4*i:], math.Float32bits(a*xi+yi))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := refs.Register("saxpy", func(Geometry, []Arg, Memory) error { return nil }); err == nil {
		t.Error("registering twice succeeded")
	}
	const n = 100
	x, y := make([]byte, 4*n), make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(x[4*i:], math.Float32bits(float32(i)))
		binary.LittleEndian.PutUint32(y[4*i:], math.Float32bits(1))
	}
	mem := sliceMemory{0x10000: y, 0x20000: x}
	block := make([]byte, k.ArgsSize)
	g := Grid1D(128, 64)
	if err := k.Pack(block, g, []Arg{Buffer(0x10000, ReadWrite), Buffer(0x20000, Read), Float32(3), Uint32(n)}); err != nil {
		t.Fatal(err)
	}
	if err := refs.Run(k, g, block, mem); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(y[4*i:])); got != 3*float32(i)+1 {
			t.Fatalf("y[%d] = %v, want %v", i, got, 3*float32(i)+1)
		}
	}
	other := *k
	other.Name = "unregistered"
	if err := refs.Run(&other, g, block, mem); !errors.Is(err, ErrNoReference) {
		t.Errorf("unregistered kernel: %v", err)
	}
}

// A failed load is not remembered: the next call loads again.
func TestRegistryRetriesAFailedLoad(t *testing.T) {
	b := newBuilder(t)
	l := &fakeLoader{dev: Device{ISA: "gfx90a"}, fail: 1}
	r := NewRegistry(b, l)
	if _, err := r.Kernel(saxpy(t), "saxpy"); err == nil || errors.Is(err, ErrImageRefused) {
		t.Fatalf("first load: %v, want the loader's error", err)
	}
	if len(l.loads) != 1 {
		t.Errorf("an ordinary failure tried other versions: %v", l.loads)
	}
	if _, err := r.Kernel(saxpy(t), "saxpy"); err != nil || len(l.loads) != 2 {
		t.Errorf("second load: %v, loads %v", err, l.loads)
	}
}

// A reference that panics fails its run with ErrReferencePanic, naming the
// kernel and the panic, instead of taking the process down.
func TestRunRecoversReferencePanic(t *testing.T) {
	var refs References
	k := &Signature{Name: "k", MaxWorkgroupSize: 64}
	if err := refs.Register("k", func(Geometry, []Arg, Memory) error { panic("oops") }); err != nil {
		t.Fatal(err)
	}
	err := refs.Run(k, Geometry{Dims: 1, Grid: [3]uint32{1, 1, 1}, Workgroup: [3]uint32{1, 1, 1}}, nil, nil)
	if !errors.Is(err, ErrReferencePanic) || !strings.Contains(err.Error(), "kernel k") || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("Run: %v", err)
	}
}
