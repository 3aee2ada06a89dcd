// Package raw is the baseline for rocsync's CUDA backend: the seed
// programs written directly against the CUDA driver API and cuBLAS (the
// purego bindings in cuda/ and cublas/, nothing of rocsync above them),
// each iteration ended by one final stream synchronization. The command
// bench/rawcuda runs it on its own; bench -paired-raw alternates its
// iterations with rocsync's in one process, so that the layer's overhead is
// a ratio measured side by side.
//
// Programs (same inputs, shapes and checksums as bench):
//
//	matmul                 t1 = x·x, t2 = x·t1, t3 = x·t2 (cublasSgemm_v2), one stream
//	elementwise            t1 = x∘x, t2 = x∘t1, t3 = x∘t2 (rocsync_mul_f32), one stream
//	mixed/one-stream       (x∘x)·x, repeat times, kernel and cuBLAS on one stream (Unified's shape)
//	mixed/event            the kernel on stream K, cuBLAS on stream L, ordered by
//	                       cuEventRecord + cuStreamWaitEvent (DeviceBridge's shape)
//	mixed/host-wait        the same two streams, ordered by cuEventRecord +
//	                       cuEventSynchronize (DeviceSide's shape)
//	chain99                t1 = y∘y, t(i+1) = y∘t(i), 99 multiplies on one stream,
//	                       where y = 1 + x (so that the product neither under-
//	                       nor overflows): a long chain for per-op costs
//
// With Graph the single-stream programs (matmul, elementwise, chain99,
// mixed/one-stream) are also captured once into a CUDA graph (stream
// capture: cuStreamBeginCapture, the program's calls, cuStreamEndCapture,
// cuGraphInstantiate), and every measured iteration then also replays it
// (cuGraphLaunch, then the same final synchronization), alternating with
// the eager iteration: the graph's total per iteration, and the host cost
// of one cuGraphLaunch as its dispatch time.
//
// By default every driver call is made from one OS thread with the context
// made current once (Open does it; the caller holds runtime.LockOSThread),
// which is what a C program does and the fastest a Go program can do. With
// PerCall each call locks the thread and calls cuCtxSetCurrent first, as
// cuda.Ctx (and so rocsync) does to be correct from any goroutine.
package raw

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/bench/internal/measure"
	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/reference"
	"github.com/rocsync/rocsync/kernels"
)

// Programs are the program names Prepare knows, in the standalone
// command's default order.
var Programs = []string{"matmul", "elementwise", "mixed/one-stream", "mixed/event", "mixed/host-wait", "chain99"}

// chainLength is chain99's number of multiplies.
const chainLength = 99

// Config is one standalone run (the rawcuda command's flags).
type Config struct {
	N, Iters, Warmup, Repeat int
	Seed                     uint64
	Device                   int
	PerCall                  bool
	Programs                 []string
	// Graph also replays the single-stream programs as CUDA graphs.
	Graph bool
}

// Meta describes the machine and the start-up costs.
type Meta struct {
	Tool           string  `json:"tool"`
	Device         string  `json:"device"`
	ComputeCap     string  `json:"compute_capability"`
	DriverVersion  int     `json:"driver_api_version"`
	CUBLAS         string  `json:"cublas"`
	CUBLASPath     string  `json:"cublas_path"`
	LibCUDA        string  `json:"libcuda"`
	PTX            string  `json:"ptx"`
	ContextPerCall bool    `json:"context_per_call"`
	InitMS         float64 `json:"cuinit_ms"`
	CtxRetainMS    float64 `json:"primary_ctx_retain_ms"`
	ModuleLoadMS   float64 `json:"module_load_first_ms"`
	ModuleLoad2MS  float64 `json:"module_load_second_ms"`
	CUBLASCreateMS float64 `json:"cublas_create_ms"`
	GoVersion      string  `json:"go_version"`
	GOMAXPROCS     int     `json:"gomaxprocs"`
}

// Result is one program, in bench's field names where they overlap.
type Result struct {
	Program          string  `json:"program"`
	Policy           string  `json:"policy"`
	Backend          string  `json:"backend"`
	Shape            string  `json:"shape"`
	N                int     `json:"n"`
	Iterations       int     `json:"iterations"`
	Warmup           int     `json:"warmup"`
	DispatchMedianUS float64 `json:"dispatch_median_us"`
	DispatchP90US    float64 `json:"dispatch_p90_us"`
	TotalMedianUS    float64 `json:"total_median_us"`
	TotalP90US       float64 `json:"total_p90_us"`
	TotalMinUS       float64 `json:"total_min_us"`
	TotalMeanUS      float64 `json:"total_mean_us"`
	HostWaitsPerIter float64 `json:"host_waits_per_iter"`
	MallocsPerIter   float64 `json:"go_mallocs_per_iter"`
	GCs              uint32  `json:"gcs"`
	Checksum         float64 `json:"checksum"`
	MaxRelErr        float64 `json:"max_rel_err_vs_cpu"`

	// With Config.Graph, for the programs a graph can hold: the replay's
	// total per iteration (cuGraphLaunch + the final synchronization) and
	// the host cost of the cuGraphLaunch call, from the same iterations as
	// the eager numbers above (one eager, one replay, in turn).
	Ops                   int     `json:"ops_per_iter"`
	GraphTotalMedianUS    float64 `json:"graph_total_median_us,omitempty"`
	GraphTotalP90US       float64 `json:"graph_total_p90_us,omitempty"`
	GraphLaunchMedianUS   float64 `json:"graph_launch_median_us,omitempty"`
	GraphLaunchP90US      float64 `json:"graph_launch_p90_us,omitempty"`
	GraphOverEager        float64 `json:"graph_total_over_eager,omitempty"`
	GraphChecksum         float64 `json:"graph_checksum,omitempty"`
	GraphMallocsPerIter   float64 `json:"graph_go_mallocs_per_iter,omitempty"`
	GraphInstantiateMS    float64 `json:"graph_capture_instantiate_ms,omitempty"`
	GraphUnavailableCause string  `json:"graph_unavailable,omitempty"`
}

// Output is what the command's -json prints.
type Output struct {
	Meta    Meta     `json:"meta"`
	Results []Result `json:"results"`
}

// Validate checks a Config's sizes and program names.
func (cfg Config) Validate() error {
	if cfg.N <= 0 || cfg.Iters <= 0 || cfg.Warmup < 0 || cfg.Repeat <= 0 {
		return errors.New("-n, -iters and -repeat must be positive, -warmup not negative")
	}
	for _, p := range cfg.Programs {
		if !slices.Contains(Programs, p) {
			return fmt.Errorf("unknown program %q (want one of %v)", p, Programs)
		}
	}
	return nil
}

// Run is the standalone command: open the device, then run every program
// for Warmup + Iters iterations, on one OS thread.
func Run(cfg Config) (*Output, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// One OS thread with the context current for the whole run.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g, err := Open(cfg.Device, cfg.PerCall)
	if err != nil {
		return nil, err
	}
	out := &Output{Meta: g.Meta()}
	for _, name := range cfg.Programs {
		r, err := g.runProgram(cfg, name)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w", name, err), g.Close())
		}
		out.Results = append(out.Results, r)
	}
	return out, g.Close()
}

// WriteText prints the command's table.
func WriteText(w io.Writer, out *Output) {
	m := out.Meta
	fmt.Fprintf(w, "%s (cc %s), driver API %d, cuBLAS %s, %s PTX; context per call: %v\n", m.Device, m.ComputeCap, m.DriverVersion, m.CUBLAS, m.PTX, m.ContextPerCall)
	fmt.Fprintf(w, "start-up: cuInit %.1f ms, primary context %.1f ms, first cuModuleLoadData %.1f ms (second %.1f ms), cublasCreate %.1f ms\n",
		m.InitMS, m.CtxRetainMS, m.ModuleLoadMS, m.ModuleLoad2MS, m.CUBLASCreateMS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tshape\tdispatch med µs\tp90\ttotal med µs\tp90\tmin\tmallocs/it\tGCs\tchecksum\tmax rel err\t")
	graphs := false
	for _, r := range out.Results {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.6g\t%.1e\t\n", r.Program, r.Shape, r.DispatchMedianUS, r.DispatchP90US,
			r.TotalMedianUS, r.TotalP90US, r.TotalMinUS, r.MallocsPerIter, r.GCs, r.Checksum, r.MaxRelErr)
		graphs = graphs || r.GraphTotalMedianUS > 0 || r.GraphUnavailableCause != ""
	}
	tw.Flush()
	if !graphs {
		return
	}
	fmt.Fprintln(w, "CUDA-graph replay, alternating with the eager iterations above:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tops\teager total med µs\tgraph total med µs\tp90\tgraph/eager\tcuGraphLaunch med µs\tp90\tcapture+instantiate ms\tmallocs/it\tsame checksum\t")
	for _, r := range out.Results {
		switch {
		case r.GraphUnavailableCause != "":
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t\t\t\t\t\t\t\t\n", r.Program, r.Ops, r.TotalMedianUS, r.GraphUnavailableCause)
		case r.GraphTotalMedianUS > 0:
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.3f\t%.2f\t%.2f\t%.2f\t%.2f\t%v\t\n", r.Program, r.Ops, r.TotalMedianUS, r.GraphTotalMedianUS, r.GraphTotalP90US,
				r.GraphOverEager, r.GraphLaunchMedianUS, r.GraphLaunchP90US, r.GraphInstantiateMS, r.GraphMallocsPerIter, r.GraphChecksum == r.Checksum)
		}
	}
	tw.Flush()
}

// GPU is one device's context, kernel and cuBLAS handle, with the call
// forms chosen by PerCall. Without PerCall it must be used from the OS
// thread that opened it (the caller holds runtime.LockOSThread from
// before Open until after Close); other code may make calls on that thread
// in between as long as it leaves the same context current (rocsync's
// cuda.Ctx calls do: they share the primary context).
type GPU struct {
	lib     *cuda.Lib
	ctx     *cuda.Ctx
	blas    *cublas.Lib
	h       cublas.Handle
	mod     cuda.Module
	mul     cuda.Function
	pb      *cuda.ParamBlock
	perCall bool
	meta    Meta
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// Open loads libcuda and cuBLAS, retains device's primary context and
// makes it current on the calling thread, loads the kernels' PTX (twice,
// to time the first load against a second one) and creates a cuBLAS
// handle, timing each step in Meta.
func Open(device int, perCall bool) (g *GPU, err error) {
	g = &GPU{perCall: perCall}
	m := &g.meta
	m.Tool, m.ContextPerCall, m.GoVersion, m.GOMAXPROCS = "rawcuda", perCall, runtime.Version(), runtime.GOMAXPROCS(0)
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
			g = nil
		}
	}()

	if g.lib, err = cuda.Open(); err != nil {
		return g, err
	}
	lib := g.lib
	m.LibCUDA = lib.Path()
	t := time.Now()
	if err := lib.Init(); err != nil {
		return g, err
	}
	m.InitMS = ms(time.Since(t))
	if m.DriverVersion, err = lib.DriverVersion(); err != nil {
		return g, err
	}
	dev, err := lib.DeviceGet(device)
	if err != nil {
		return g, err
	}
	if m.Device, err = lib.DeviceName(dev); err != nil {
		return g, err
	}
	major, minor, err := lib.ComputeCapability(dev)
	if err != nil {
		return g, err
	}
	m.ComputeCap = fmt.Sprintf("%d.%d", major, minor)
	m.PTX = "sm_80"
	if major >= 9 {
		m.PTX = "sm_90"
	}
	t = time.Now()
	if g.ctx, err = lib.PrimaryCtxRetain(dev); err != nil {
		return g, err
	}
	if err := g.ctx.MakeCurrent(); err != nil {
		return g, err
	}
	m.CtxRetainMS = ms(time.Since(t))

	ptx, err := kernels.PTX(m.PTX)
	if err != nil {
		return g, err
	}
	t = time.Now()
	if g.mod, err = lib.ModuleLoadData(ptx); err != nil {
		return g, err
	}
	m.ModuleLoadMS = ms(time.Since(t))
	t = time.Now()
	mod2, err := lib.ModuleLoadData(ptx)
	if err != nil {
		return g, err
	}
	m.ModuleLoad2MS = ms(time.Since(t))
	_ = lib.ModuleUnload(mod2)
	if g.mul, err = lib.ModuleGetFunction(g.mod, kernels.Mul.KernelName(kernels.F32)); err != nil {
		return g, err
	}

	if g.blas, err = cublas.Open(); err != nil {
		return g, err
	}
	m.CUBLASPath = g.blas.Path()
	if a, b, c, err := g.blas.Version(); err == nil {
		m.CUBLAS = fmt.Sprintf("%d.%d.%d", a, b, c)
	}
	t = time.Now()
	if g.h, err = g.blas.Create(); err != nil {
		return g, err
	}
	m.CUBLASCreateMS = ms(time.Since(t))

	if g.pb, err = cuda.NewParamBlock(kernels.KernargSize, []int{kernels.OffsetOut, kernels.OffsetA, kernels.OffsetB, kernels.OffsetAlpha, kernels.OffsetN}); err != nil {
		return g, err
	}
	return g, nil
}

// Meta is the device and the start-up costs Open measured.
func (g *GPU) Meta() Meta { return g.meta }

// Close destroys what Open made. It is safe on a partly opened GPU.
func (g *GPU) Close() error {
	var errs []error
	if g.pb != nil {
		g.pb.Free()
		g.pb = nil
	}
	if g.h != 0 {
		errs = append(errs, g.blas.Destroy(g.h))
		g.h = 0
	}
	if g.mod != 0 {
		errs = append(errs, g.lib.ModuleUnload(g.mod))
		g.mod = 0
	}
	if g.ctx != nil {
		errs = append(errs, g.ctx.Release())
		g.ctx = nil
	}
	return errors.Join(errs...)
}

// The calls, in the form PerCall chose.

func (g *GPU) launchMul(s cuda.Stream, out, a, b cuda.DevicePtr, n int) error {
	args := kernels.Args{Out: uint64(out), A: uint64(a), B: uint64(b), N: uint64(n)}
	args.Encode(g.pb.Bytes(), kernels.F32)
	grid := cuda.Dim3{X: uint32((n + 255) / 256), Y: 1, Z: 1}
	block := cuda.Dim3{X: 256, Y: 1, Z: 1}
	if g.perCall {
		return g.ctx.LaunchKernel(g.mul, grid, block, 0, s, g.pb.Params())
	}
	return g.lib.LaunchKernel(g.mul, grid, block, 0, s, g.pb.Params())
}

// matmul is row-major c = a·b (bench's MatMul): column-major cuBLAS
// computes cᵀ = bᵀ·aᵀ on the row-major buffers as they are.
func (g *GPU) matmul(c, a, b cuda.DevicePtr, n int) error {
	if g.perCall {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := g.ctx.MakeCurrent(); err != nil {
			return err
		}
	}
	return g.blas.Sgemm(g.h, cublas.OpN, cublas.OpN, n, n, n, 1, b, n, a, n, 0, c, n)
}

func (g *GPU) record(e cuda.Event, s cuda.Stream) error {
	if g.perCall {
		return g.ctx.EventRecord(e, s)
	}
	return g.lib.EventRecord(e, s)
}

func (g *GPU) wait(s cuda.Stream, e cuda.Event) error {
	if g.perCall {
		return g.ctx.StreamWaitEvent(s, e)
	}
	return g.lib.StreamWaitEvent(s, e)
}

func (g *GPU) eventSync(e cuda.Event) error {
	if g.perCall {
		return g.ctx.EventSynchronize(e)
	}
	return g.lib.EventSynchronize(e)
}

func (g *GPU) streamSync(s cuda.Stream) error {
	if g.perCall {
		return g.ctx.StreamSynchronize(s)
	}
	return g.lib.StreamSynchronize(s)
}

// Program is one program prepared on a GPU: its streams, event and
// preallocated buffers, with the input uploaded. A GPU runs one Program at
// a time (Prepare binds the GPU's cuBLAS handle to the program's stream).
type Program struct {
	g         *GPU
	name      string
	n, repeat int
	shape     string
	hostWaits float64
	ops       int
	k, l      cuda.Stream
	graph     cuda.Graph
	exec      cuda.GraphExec
	ev        cuda.Event
	bufs      []cuda.DevicePtr
	final     cuda.Stream
	result    cuda.DevicePtr
	body      func() error
	ref       func() []float64
}

// Prepare sets up program name at n×n float32, with mixed repeating
// (x∘x)·x repeat times, from bench's input for seed.
func (g *GPU) Prepare(name string, n, repeat int, seed uint64) (p *Program, err error) {
	if !slices.Contains(Programs, name) {
		return nil, fmt.Errorf("unknown program %q (want one of %v)", name, Programs)
	}
	if n <= 0 || repeat <= 0 {
		return nil, fmt.Errorf("%s: n %d and repeat %d must be positive", name, n, repeat)
	}
	nn := n * n
	p = &Program{g: g, name: name, n: n, repeat: repeat, shape: fmt.Sprintf("%dx%d", n, n)}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
			p = nil
		}
	}()
	lib := g.lib
	if p.k, err = lib.StreamCreate(cuda.StreamNonBlocking); err != nil {
		return p, err
	}
	if p.l, err = lib.StreamCreate(cuda.StreamNonBlocking); err != nil {
		return p, err
	}
	if p.ev, err = lib.EventCreate(cuda.EventDisableTiming); err != nil {
		return p, err
	}
	host := measure.InputMatrix(n, seed)
	p.bufs = make([]cuda.DevicePtr, 0, 1+2*max(repeat, 3))
	if name == "chain99" {
		for i := range host {
			host[i] += 1
		}
	}
	for range cap(p.bufs) {
		b, err := lib.MemAlloc(uint64(4 * nn))
		if err != nil {
			return p, err
		}
		p.bufs = append(p.bufs, b)
	}
	bufs, x := p.bufs, p.bufs[0]
	if err := lib.MemcpyHtoD(x, unsafe.Pointer(&host[0]), uint64(4*nn)); err != nil {
		return p, err
	}
	if err := lib.StreamSynchronize(0); err != nil { // the pageable copy's DMA
		return p, err
	}
	if err := g.blas.SetStream(g.h, p.l); err != nil {
		return p, err
	}

	hx := reference.Widen(host)
	k, l := p.k, p.l
	switch name {
	case "matmul":
		p.final, p.result, p.ops = l, bufs[3], 3
		p.body = func() error {
			if err := g.matmul(bufs[1], x, x, n); err != nil {
				return err
			}
			if err := g.matmul(bufs[2], x, bufs[1], n); err != nil {
				return err
			}
			return g.matmul(bufs[3], x, bufs[2], n)
		}
		p.ref = func() []float64 { return reference.MatMul(hx, reference.MatMul(hx, reference.MatMul(hx, hx, n), n), n) }
	case "chain99":
		// y in bufs[0]; the products alternate between bufs[1] and bufs[2].
		p.final, p.result, p.ops = k, bufs[1+(chainLength-1)%2], chainLength
		p.body = func() error {
			prev := x
			for i := 0; i < chainLength; i++ {
				out := bufs[1+i%2]
				if err := g.launchMul(k, out, x, prev, nn); err != nil {
					return err
				}
				prev = out
			}
			return nil
		}
		p.ref = func() []float64 {
			r := reference.Mul(hx, hx)
			for i := 1; i < chainLength; i++ {
				r = reference.Mul(hx, r)
			}
			return r
		}
	case "elementwise":
		p.final, p.result = k, bufs[3]
		p.body = func() error {
			if err := g.launchMul(k, bufs[1], x, x, nn); err != nil {
				return err
			}
			if err := g.launchMul(k, bufs[2], x, bufs[1], nn); err != nil {
				return err
			}
			return g.launchMul(k, bufs[3], x, bufs[2], nn)
		}
		p.ref = func() []float64 { return reference.Mul(hx, reference.Mul(hx, reference.Mul(hx, hx))) }
		p.ops = 3
	default: // the mixed shapes
		p.shape = fmt.Sprintf("%dx%d, repeat %d", n, n, repeat)
		ks := k
		if name == "mixed/one-stream" {
			ks = l
		}
		p.final, p.result, p.ops = l, bufs[2*repeat], 2*repeat
		if name == "mixed/host-wait" {
			p.hostWaits = float64(repeat)
		}
		ev := p.ev
		p.body = func() error {
			for i := 0; i < repeat; i++ {
				sq, out := bufs[1+2*i], bufs[2+2*i]
				if err := g.launchMul(ks, sq, x, x, nn); err != nil {
					return err
				}
				switch name {
				case "mixed/event":
					if err := g.record(ev, k); err != nil {
						return err
					}
					if err := g.wait(l, ev); err != nil {
						return err
					}
				case "mixed/host-wait":
					if err := g.record(ev, k); err != nil {
						return err
					}
					if err := g.eventSync(ev); err != nil {
						return err
					}
				}
				if err := g.matmul(out, sq, x, n); err != nil {
					return err
				}
			}
			return nil
		}
		p.ref = func() []float64 { return reference.MatMul(reference.Mul(hx, hx), hx, n) }
	}
	return p, nil
}

// Name is the program's name.
func (p *Program) Name() string { return p.name }

// Shape describes its sizes, in bench's words.
func (p *Program) Shape() string { return p.shape }

// HostWaitsPerIter is how many host waits one iteration makes before its
// final synchronization (repeat for mixed/host-wait, else 0).
func (p *Program) HostWaitsPerIter() float64 { return p.hostWaits }

// Iterate runs one iteration: submit the program (dispatch), then
// synchronize its final stream (total is both).
func (p *Program) Iterate() (dispatch, total time.Duration, err error) {
	t0 := time.Now()
	if err := p.body(); err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	if err := p.g.streamSync(p.final); err != nil {
		return 0, 0, err
	}
	t2 := time.Now()
	return t1.Sub(t0), t2.Sub(t0), nil
}

// Verify reads the result back and compares it with a float64 CPU
// reference; it fails when the largest error, relative to the largest
// reference value, is over 1e-4.
func (p *Program) Verify() (checksum, maxRelErr float64, err error) {
	nn := p.n * p.n
	got := make([]float32, nn)
	if err := p.g.lib.MemcpyDtoH(unsafe.Pointer(&got[0]), p.result, uint64(4*nn)); err != nil {
		return 0, 0, err
	}
	checksum = measure.Checksum(got)
	want := p.ref()
	scale := 0.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range want {
		maxRelErr = math.Max(maxRelErr, math.Abs(want[i]-float64(got[i]))/scale)
	}
	if maxRelErr > 1e-4 {
		return checksum, maxRelErr, fmt.Errorf("%s: wrong result: max relative error %g", p.name, maxRelErr)
	}
	return checksum, maxRelErr, nil
}

// Ops is the number of kernel launches and gemms one iteration submits.
func (p *Program) Ops() int { return p.ops }

// Graphable reports whether the program runs on one stream, which one
// stream capture records whole.
func (p *Program) Graphable() bool {
	switch p.name {
	case "matmul", "elementwise", "chain99", "mixed/one-stream":
		return true
	}
	return false
}

// Capture records one iteration of the program into a CUDA graph on its
// stream and instantiates it, for Replay. It runs nothing.
func (p *Program) Capture() error {
	if !p.Graphable() {
		return fmt.Errorf("%s: runs on two streams; only single-stream programs are captured", p.name)
	}
	if p.exec != 0 {
		return nil
	}
	g := p.g
	begin, end, inst := g.lib.BeginCapture, g.lib.EndCapture, g.lib.GraphInstantiate
	if g.perCall {
		begin, end, inst = g.ctx.BeginCapture, g.ctx.EndCapture, g.ctx.GraphInstantiate
	}
	if err := begin(p.final, cuda.CaptureModeThreadLocal); err != nil {
		return err
	}
	bodyErr := p.body()
	graph, err := end(p.final)
	if err != nil || bodyErr != nil {
		if graph != 0 {
			_ = g.lib.GraphDestroy(graph)
		}
		return errors.Join(bodyErr, err)
	}
	p.graph = graph
	if p.exec, err = inst(graph); err != nil {
		return err
	}
	return nil
}

// Replay runs the captured graph once: cuGraphLaunch (launch is its host
// cost), then the final synchronization (total is both).
func (p *Program) Replay() (launch, total time.Duration, err error) {
	if p.exec == 0 {
		return 0, 0, fmt.Errorf("%s: not captured", p.name)
	}
	t0 := time.Now()
	if p.g.perCall {
		err = p.g.ctx.GraphLaunch(p.exec, p.final)
	} else {
		err = p.g.lib.GraphLaunch(p.exec, p.final)
	}
	if err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	if err := p.g.streamSync(p.final); err != nil {
		return 0, 0, err
	}
	t2 := time.Now()
	return t1.Sub(t0), t2.Sub(t0), nil
}

// Close frees the buffers and destroys the graph, the streams and the
// event.
func (p *Program) Close() error {
	lib := p.g.lib
	var errs []error
	if p.exec != 0 {
		errs = append(errs, lib.GraphExecDestroy(p.exec))
		p.exec = 0
	}
	if p.graph != 0 {
		errs = append(errs, lib.GraphDestroy(p.graph))
		p.graph = 0
	}
	for _, b := range p.bufs {
		errs = append(errs, lib.MemFree(b))
	}
	p.bufs = nil
	if p.ev != 0 {
		errs = append(errs, lib.EventDestroy(p.ev))
		p.ev = 0
	}
	for _, s := range []*cuda.Stream{&p.k, &p.l} {
		if *s != 0 {
			errs = append(errs, lib.StreamDestroy(*s))
			*s = 0
		}
	}
	return errors.Join(errs...)
}

func (g *GPU) runProgram(cfg Config, name string) (Result, error) {
	r := Result{Program: name, Policy: "raw", Backend: "cuda-raw", N: cfg.N, Iterations: cfg.Iters, Warmup: cfg.Warmup}
	p, err := g.Prepare(name, cfg.N, cfg.Repeat, cfg.Seed)
	if err != nil {
		return r, err
	}
	r.Shape, r.HostWaitsPerIter, r.Ops = p.Shape(), p.HostWaitsPerIter(), p.Ops()
	dispatch := make([]float64, 0, cfg.Iters)
	totals := make([]float64, 0, cfg.Iters)
	graphed := false
	var launches, graphTotals []float64
	if cfg.Graph && p.Graphable() {
		// Capture after one eager iteration (cuBLAS sets up its workspace
		// outside the capture).
		if _, _, err := p.Iterate(); err != nil {
			return r, errors.Join(err, p.Close())
		}
		t := time.Now()
		if err := p.Capture(); err != nil {
			r.GraphUnavailableCause = err.Error()
		} else {
			graphed = true
			r.GraphInstantiateMS = ms(time.Since(t))
			launches, graphTotals = make([]float64, 0, cfg.Iters), make([]float64, 0, cfg.Iters)
		}
	}
	var before, after, gBefore, gAfter runtime.MemStats
	var graphMallocs uint64
	for i := 0; i < cfg.Warmup+cfg.Iters; i++ {
		if i == cfg.Warmup {
			runtime.ReadMemStats(&before)
		}
		d, t, err := p.Iterate()
		if err != nil {
			return r, errors.Join(err, p.Close())
		}
		if i >= cfg.Warmup {
			dispatch = append(dispatch, measure.Micros(d))
			totals = append(totals, measure.Micros(t))
		}
		if !graphed {
			continue
		}
		if i >= cfg.Warmup {
			runtime.ReadMemStats(&gBefore)
		}
		l, t, err := p.Replay()
		if err != nil {
			return r, errors.Join(err, p.Close())
		}
		if i >= cfg.Warmup {
			runtime.ReadMemStats(&gAfter)
			graphMallocs += gAfter.Mallocs - gBefore.Mallocs
			launches = append(launches, measure.Micros(l))
			graphTotals = append(graphTotals, measure.Micros(t))
		}
	}
	runtime.ReadMemStats(&after)
	r.MallocsPerIter = float64(after.Mallocs-before.Mallocs-graphMallocs) / float64(cfg.Iters)
	if graphed {
		r.GraphLaunchMedianUS, r.GraphLaunchP90US = measure.Quantile(launches, 0.5), measure.Quantile(launches, 0.9)
		r.GraphTotalMedianUS, r.GraphTotalP90US = measure.Quantile(graphTotals, 0.5), measure.Quantile(graphTotals, 0.9)
		r.GraphMallocsPerIter = float64(graphMallocs) / float64(cfg.Iters)
		// The result the last replay left.
		if r.GraphChecksum, _, err = p.Verify(); err != nil {
			return r, errors.Join(fmt.Errorf("graph replay: %w", err), p.Close())
		}
	}
	r.GCs = after.NumGC - before.NumGC
	r.DispatchMedianUS, r.DispatchP90US = measure.Quantile(dispatch, 0.5), measure.Quantile(dispatch, 0.9)
	r.TotalMedianUS, r.TotalP90US = measure.Quantile(totals, 0.5), measure.Quantile(totals, 0.9)
	r.TotalMinUS = slices.Min(totals)
	for _, v := range totals {
		r.TotalMeanUS += v / float64(len(totals))
	}
	if graphed {
		// The eager result, checked after an eager iteration of its own.
		if _, _, err := p.Iterate(); err != nil {
			return r, errors.Join(err, p.Close())
		}
		r.GraphOverEager = r.GraphTotalMedianUS / r.TotalMedianUS
	}
	r.Checksum, r.MaxRelErr, err = p.Verify()
	return r, errors.Join(err, p.Close())
}
