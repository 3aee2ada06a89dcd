package cudadev

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// The reduction kernels on the real GPU (ROCSYNC_GPU=1): launched from the
// embedded PTX by name with kernels.ReduceLayout's parameter block, they
// must equal the CPU reference bit for bit (the combination order is fixed,
// whatever the grid and the timing) and leave the workspace zero, launch
// after launch, with no memset after the first.

// reduceRun is one reduction's device buffers and parameter block.
type reduceRun struct {
	d                        *Device
	tk                       *Task
	fn                       uintptr
	pb                       *cuda.ParamBlock
	red                      kernels.Reduction
	dt                       kernels.DType
	rows, cols               uint64
	shape                    kernels.ReduceShape
	in, out, ws              driver.DevicePtr
	inHost                   []byte
	inBytes, outBytes, wsLen uint64
}

func newReduceRun(tb testing.TB, d *Device, tk *Task, red kernels.Reduction, dt kernels.DType, rows, cols uint64) *reduceRun {
	tb.Helper()
	if _, err := d.function(kernels.Fill, kernels.F32); err != nil { // loads the module
		tb.Fatal(err)
	}
	fn, err := d.b.function(red.KernelName(dt))
	if err != nil {
		tb.Fatal(err)
	}
	offsets := make([]int, len(kernels.ReduceLayout))
	for i, a := range kernels.ReduceLayout {
		offsets[i] = int(a.Offset)
	}
	pb, err := cuda.NewParamBlock(kernels.ReduceKernargSize, offsets)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pb.Free)
	s, err := red.Shape(rows, cols)
	if err != nil {
		tb.Fatal(err)
	}
	r := &reduceRun{d: d, tk: tk, fn: fn, pb: pb, red: red, dt: dt, rows: rows, cols: cols, shape: s}
	es := uint64(dt.Size())
	r.inBytes, r.outBytes, r.wsLen = rows*cols*es, s.Outputs*es, s.WorkspaceSize(dt)
	alloc := func(n uint64) driver.DevicePtr {
		p, err := d.Malloc(max(n, 8))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = d.Free(p) })
		return p
	}
	r.in, r.out, r.ws = alloc(r.inBytes), alloc(r.outBytes), alloc(r.wsLen)
	g := rand.New(rand.NewPCG(rows, cols))
	r.inHost = make([]byte, r.inBytes)
	for i := uint64(0); i < rows*cols; i++ {
		v := (g.Float64() - 0.5) * math.Pow(2, float64(g.IntN(30)-15))
		if dt == kernels.F32 {
			binary.LittleEndian.PutUint32(r.inHost[4*i:], math.Float32bits(float32(v)))
		} else {
			binary.LittleEndian.PutUint64(r.inHost[8*i:], math.Float64bits(v))
		}
	}
	r.upload(tb, r.in, r.inHost)
	r.upload(tb, r.ws, make([]byte, r.wsLen)) // zeroed once, before the first launch
	return r
}

func (r *reduceRun) upload(tb testing.TB, dst driver.DevicePtr, b []byte) {
	if len(b) > 0 {
		if err := r.d.CopyHtoD(dst, unsafe.Pointer(&b[0]), uint64(len(b))); err != nil {
			tb.Fatal(err)
		}
	}
}

func (r *reduceRun) download(tb testing.TB, src driver.DevicePtr, n uint64) []byte {
	if err := r.tk.Kernel().Drain(); err != nil {
		tb.Fatal(err)
	}
	b := make([]byte, n)
	if n > 0 {
		if err := r.d.CopyDtoH(unsafe.Pointer(&b[0]), src, n); err != nil {
			tb.Fatal(err)
		}
	}
	return b
}

// launch submits one reduction on the task's kernel stream with groups
// blocks (0: the shape's suggestion) of kernels.ReduceWorkgroupSize.
func (r *reduceRun) launch(tb testing.TB, groups uint32) {
	if groups == 0 {
		groups = r.shape.Workgroups()
	}
	args := kernels.ReduceArgs{Out: uint64(r.out), In: uint64(r.in), Workspace: uint64(r.ws), Rows: r.rows, Cols: r.cols}
	if _, err := r.tk.Kernel().Submit(func(s uintptr) error {
		args.Encode(r.pb.Bytes())
		return r.d.b.launch(r.fn, [3]uint32{groups, 1, 1}, [3]uint32{kernels.ReduceWorkgroupSize, 1, 1}, s, r.pb)
	}); err != nil {
		tb.Fatal(err)
	}
}

func (r *reduceRun) want(tb testing.TB) []byte {
	out := make([]byte, r.outBytes)
	if err := kernels.ReduceBytes(r.red, r.dt, out, r.inHost, make([]byte, r.wsLen), r.rows, r.cols); err != nil {
		tb.Fatal(err)
	}
	return out
}

func TestGPUReductions(t *testing.T) {
	d := gpuDevice(t, syncstate.DeviceSide)
	tk := newTask(t, d, syncstate.Sinks{})
	defer tk.Close()
	for _, sz := range [][2]uint64{{1, 1}, {1, 255}, {3, 257}, {1, 4097}, {5, 9000}, {9000, 5}, {300, 300}, {1, 3_000_001}, {2000, 2000}} {
		for _, red := range kernels.AllReductions() {
			for _, dt := range kernels.AllDTypes() {
				r := newReduceRun(t, d, tk, red, dt, sz[0], sz[1])
				want := r.want(t)
				for _, groups := range []uint32{1, 3, 0, kernels.ReduceMaxWorkgroups} {
					r.launch(t, groups)
					if got := r.download(t, r.out, r.outBytes); !bytes.Equal(got, want) {
						t.Errorf("%v %v %dx%d, %d blocks: GPU result differs from the reference", red, dt, sz[0], sz[1], groups)
					}
					if err := kernels.CheckZeroed(r.download(t, r.ws, r.wsLen)); err != nil {
						t.Errorf("%v %v %dx%d, %d blocks: %v", red, dt, sz[0], sz[1], groups, err)
					}
				}
			}
		}
	}
}

// TestGPUReductionWorkspaceStaysZeroOver10kLaunches: the acceptance
// criterion on the GPU, with several blocks racing for each semaphore.
func TestGPUReductionWorkspaceStaysZeroOver10kLaunches(t *testing.T) {
	d := gpuDevice(t, syncstate.DeviceSide)
	tk := newTask(t, d, syncstate.Sinks{})
	defer tk.Close()
	for _, red := range kernels.AllReductions() {
		r := newReduceRun(t, d, tk, red, kernels.F32, 1000, 1000)
		if red == kernels.SumRows {
			r = newReduceRun(t, d, tk, red, kernels.F32, 64, 300_000)
		}
		want := r.want(t)
		for i := range 10_000 {
			r.launch(t, 0)
			if i%2500 == 2499 {
				if got := r.download(t, r.out, r.outBytes); !bytes.Equal(got, want) {
					t.Fatalf("%v: launch %d: result differs from the reference", red, i)
				}
				if err := kernels.CheckZeroed(r.download(t, r.ws, r.wsLen)); err != nil {
					t.Fatalf("%v: after launch %d: %v", red, i, err)
				}
			}
		}
	}
}

// BenchmarkGPUReduction compares the zeroed-arena protocol (the reduction
// alone) with a memset per launch (rocsync_fill_f32 of 0 over the workspace,
// then the reduction, on the same stream), launches queued back to back and
// drained every 256: the GPU's per-launch cost of each. ROCSYNC_GPU=1.
func BenchmarkGPUReduction(b *testing.B) {
	if !gpuEnabled() {
		b.Skip("set ROCSYNC_GPU=1 to run on an NVIDIA GPU")
	}
	d, _ := backendKinds[2].open(b, driver.DeviceConfig{Policy: syncstate.DeviceSide})
	b.Cleanup(func() { _ = d.Close() })
	tkI, err := d.NewTask(syncstate.Sinks{})
	if err != nil {
		b.Fatal(err)
	}
	tk := tkI.(*Task)
	b.Cleanup(func() { _ = tk.Close() })
	for _, sz := range [][2]uint64{{1, 1 << 16}, {1, 1 << 22}, {256, 8192}} {
		r := newReduceRun(b, d, tk, kernels.SumRows, kernels.F32, sz[0], sz[1])
		if sz[0] == 1 {
			r = newReduceRun(b, d, tk, kernels.SumAll, kernels.F32, sz[0], sz[1])
		}
		wsWords := (r.wsLen + 3) / 4
		fill := kernels.Args{Out: uint64(r.ws), N: wsWords}
		name := r.red.String() + "/" + strconv.FormatUint(sz[0], 10) + "x" + strconv.FormatUint(sz[1], 10)
		for _, variant := range []string{"arena", "memset"} {
			b.Run(name+"/"+variant, func(b *testing.B) {
				i := 0
				for b.Loop() {
					if variant == "memset" {
						if _, err := tk.Launch(kernels.Fill, kernels.F32, fill); err != nil {
							b.Fatal(err)
						}
					}
					r.launch(b, 0)
					if i++; i%256 == 0 {
						_ = tk.Kernel().Drain()
					}
				}
				_ = tk.Kernel().Drain()
				b.StopTimer()
				if err := kernels.CheckZeroed(r.download(b, r.ws, r.wsLen)); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
