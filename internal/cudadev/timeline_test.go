package cudadev

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/internal/reference"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

func emuDevice(t *testing.T, p syncstate.Policy) (*Device, *emuBackend) {
	t.Helper()
	return backendKinds[0].open(t, driver.DeviceConfig{Policy: p})
}

func newTask(t *testing.T, d *Device, sinks syncstate.Sinks) *Task {
	t.Helper()
	tk, err := d.NewTask(sinks)
	if err != nil {
		t.Fatal(err)
	}
	return tk.(*Task)
}

func launchN(t *testing.T, tk *Task, n int, p driver.DevicePtr) uint64 {
	t.Helper()
	var last uint64
	for i := 0; i < n; i++ {
		var err error
		if last, err = tk.Launch(kernels.Fill, kernels.F32, kernels.Args{Out: uint64(p), Alpha: float64(i), N: 64}); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// A run of ops on one stream records no event; an event is recorded only
// when the host (or another stream) asks, and the pool reuses it.
func TestEventsAreLazyAndPooled(t *testing.T) {
	d, e := emuDevice(t, syncstate.DeviceSide)
	var st syncstate.Stats
	tk := newTask(t, d, syncstate.Sinks{&st})
	defer func() {
		if err := errors.Join(tk.Close(), d.Close()); err != nil {
			t.Fatal(err)
		}
	}()
	p, _ := d.Malloc(256)
	defer d.Free(p)
	k := tk.Kernel()
	last := launchN(t, tk, 100, p)
	if last != 100 || k.LastTicket() != 100 {
		t.Fatalf("tickets: last %d, LastTicket %d", last, k.LastTicket())
	}
	if e.records != 0 || d.EventsCreated() != 0 || st.Snapshot().EventsRecorded != 0 {
		t.Fatalf("events recorded on a single-stream run: %d", e.records)
	}
	if c := k.Completed(); c != 0 {
		t.Fatalf("Completed = %d on a busy device with no events", c)
	}
	if err := k.WaitHost(50); err != nil {
		t.Fatal(err)
	}
	// The event covers everything submitted so far, so the whole run is
	// known complete.
	if c := k.Completed(); c != 100 || e.records != 1 || e.pending() != 0 {
		t.Fatalf("after WaitHost(50): Completed %d, records %d, pending %d", c, e.records, e.pending())
	}
	// Waiting for a complete ticket costs nothing.
	if err := k.WaitHost(100); err != nil || e.records != 1 || e.eventSyncs != 1 {
		t.Fatalf("WaitHost of a complete ticket: %v, records %d, syncs %d", err, e.records, e.eventSyncs)
	}
	// Waiting for the newest op synchronizes the stream: no event.
	for i := 0; i < 20; i++ {
		launchN(t, tk, 3, p)
		if err := k.Drain(); err != nil {
			t.Fatal(err)
		}
		if k.Completed() != k.LastTicket() {
			t.Fatal("Drain did not complete the stream")
		}
	}
	if e.streamSyncs != 20 || e.records != 1 || st.Snapshot().EventsRecorded != 1 {
		t.Fatalf("20 drains: %d stream syncs, %d records", e.streamSyncs, e.records)
	}
	// Waiting for an older op needs an event, and the pool reuses it.
	for i := 0; i < 20; i++ {
		launchN(t, tk, 3, p)
		if err := k.WaitHost(k.LastTicket() - 1); err != nil {
			t.Fatal(err)
		}
	}
	if d.EventsCreated() != 1 {
		t.Fatalf("the pool created %d events for 21 sequential waits", d.EventsCreated())
	}
	if got := st.Snapshot().EventsRecorded; got != 21 {
		t.Fatalf("EventsRecorded = %d, want 21", got)
	}
	if err := k.Drain(); err != nil {
		t.Fatal(err)
	}
	// Poll asks the stream itself.
	launchN(t, tk, 2, p)
	if got := k.Poll(); got != 220 {
		t.Fatalf("Poll on a busy stream = %d, want 220", got)
	}
	if err := k.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := k.Poll(); got != k.LastTicket() {
		t.Fatalf("Poll after Drain = %d, want %d", got, k.LastTicket())
	}
}

// One event serves every consumer of the same ticket while it is in
// flight.
func TestEventReuseAcrossConsumers(t *testing.T) {
	d, e := emuDevice(t, syncstate.DeviceSide)
	a, b, c := newTask(t, d, syncstate.Sinks{}), newTask(t, d, syncstate.Sinks{}), newTask(t, d, syncstate.Sinks{})
	defer func() {
		if err := errors.Join(a.Close(), b.Close(), c.Close(), d.Close()); err != nil {
			t.Fatal(err)
		}
	}()
	p, _ := d.Malloc(256)
	defer d.Free(p)
	tk := launchN(t, a, 1, p)
	f := []syncstate.Fence{{TL: a.Kernel(), Ticket: tk}}
	if err := b.Kernel().WaitDevice(f); err != nil {
		t.Fatal(err)
	}
	if err := c.Kernel().WaitDevice(f); err != nil {
		t.Fatal(err)
	}
	if e.records != 1 || e.waits != 2 {
		t.Fatalf("records %d, waits %d; want 1 and 2", e.records, e.waits)
	}
}

// A run of crossings between two streams (the mixed program under
// DeviceBridge, without host waits) records one event per stream again and
// again: no new events, and (but for one, when x gains its second reader
// stream) no cuEventQuery, which would cost as much as the crossing.
func TestCrossingsReuseOneEvent(t *testing.T) {
	h := newHarness(t, backendKinds[0], syncstate.DeviceBridge)
	tk := h.task()
	x := h.upload(randVals(1, 64))
	tmp := []*harr{h.alloc(64, kernels.F32), h.alloc(64, kernels.F32)}
	for i := 0; i < 50; i++ {
		tk.mul(tmp[0], x, x)
		tk.matmul(tmp[1], tmp[0], x)
	}
	// Each gemm waits for the kernel stream; each later kernel, which
	// overwrites what the previous gemm read, waits for the cuBLAS stream.
	st := h.stats.Snapshot()
	if st.DeviceWaits != 99 || st.HostWaitsTotal() != 0 {
		t.Fatalf("%v", st)
	}
	if h.d.EventsCreated() != 2 || h.emu.records != 99 || h.emu.queries > 1 {
		t.Fatalf("99 crossings: %d events created, %d records, %d queries", h.d.EventsCreated(), h.emu.records, h.emu.queries)
	}
	if got, want := h.read(tmp[1]), reference.MatMul(reference.Mul(reference.Widen(randVals(1, 64)), reference.Widen(randVals(1, 64))), reference.Widen(randVals(1, 64)), 8); closeTo(want, got, 1e-5) >= 0 {
		t.Fatal("wrong result")
	}
	// The kernel stream's event was re-recorded after its newest op, so
	// one query proves the stream complete.
	if k := tk.tk.Kernel(); k.Completed() != k.LastTicket() {
		t.Fatalf("kernel stream: Completed %d, LastTicket %d", k.Completed(), k.LastTicket())
	}
}

// When an event follows the newest op, Completed asks the driver whether
// it is reached, and learns that the whole stream is done.
func TestCompletedQueriesTheNewestEvent(t *testing.T) {
	d, e := emuDevice(t, syncstate.DeviceSide)
	a, b := newTask(t, d, syncstate.Sinks{}), newTask(t, d, syncstate.Sinks{})
	defer func() { _ = errors.Join(a.Close(), b.Close(), d.Close()) }()
	p, _ := d.Malloc(256)
	defer d.Free(p)
	last := launchN(t, a, 3, p)
	if err := b.Kernel().WaitDevice([]syncstate.Fence{{TL: a.Kernel(), Ticket: last}}); err != nil {
		t.Fatal(err)
	}
	if c := a.Kernel().Completed(); c != 0 || e.queries != 1 {
		t.Fatalf("busy device: Completed %d after %d queries", c, e.queries)
	}
	launchN(t, b, 1, p)
	if err := b.Kernel().Drain(); err != nil { // runs a's work, which b waits for
		t.Fatal(err)
	}
	if c := a.Kernel().Completed(); c != last {
		t.Fatalf("Completed = %d, want %d", c, last)
	}
	launchN(t, a, 1, p)
	q := e.queries
	if c := a.Kernel().Completed(); c != last || e.queries != q {
		t.Fatalf("no event after the newest op: Completed %d, %d new queries", c, e.queries-q)
	}
}

func TestCanWaitDevice(t *testing.T) {
	for _, p := range syncstate.Policies {
		d, _ := emuDevice(t, p)
		tk := newTask(t, d, syncstate.Sinks{})
		k, l := tk.Kernel(), tk.Library()
		if p == syncstate.Unified {
			if k != l || l.Domain() != syncstate.DomainLibrary {
				t.Fatalf("Unified: two streams or the wrong domain")
			}
		} else if k.Domain() != syncstate.DomainKernel || l.Domain() != syncstate.DomainLibrary {
			t.Fatalf("%v: domains %v %v", p, k.Domain(), l.Domain())
		}
		cross := p == syncstate.DeviceBridge
		if !k.CanWaitDevice(k.Domain()) || !l.CanWaitDevice(l.Domain()) ||
			(p != syncstate.Unified && (k.CanWaitDevice(syncstate.DomainLibrary) != cross || l.CanWaitDevice(syncstate.DomainKernel) != cross)) {
			t.Fatalf("%v: CanWaitDevice wrong", p)
		}
		if p == syncstate.DeviceSide {
			// WaitDevice refuses a crossing the policy keeps on the host.
			err := l.WaitDevice([]syncstate.Fence{{TL: k, Ticket: 1}})
			if err == nil || !strings.Contains(err.Error(), "cannot wait on the device") {
				t.Fatalf("DeviceSide WaitDevice across domains: %v", err)
			}
		}
		if err := errors.Join(tk.Close(), d.Close()); err != nil {
			t.Fatal(err)
		}
	}
}

// A timeline of another family cannot be waited for on the device.
func TestWaitDeviceForeignTimeline(t *testing.T) {
	d, _ := emuDevice(t, syncstate.DeviceBridge)
	tk := newTask(t, d, syncstate.Sinks{})
	defer func() { _ = errors.Join(tk.Close(), d.Close()) }()
	err := tk.Kernel().WaitDevice([]syncstate.Fence{{TL: foreign{}, Ticket: 1}})
	if err == nil || !strings.Contains(err.Error(), "cannot wait on the device for hsa-q0") {
		t.Fatalf("got %v", err)
	}
}

type foreign struct{}

func (foreign) Domain() syncstate.Domain                  { return syncstate.DomainKernel }
func (foreign) Name() string                              { return "hsa-q0" }
func (foreign) Completed() uint64                         { return 0 }
func (foreign) LastTicket() uint64                        { return 1 }
func (foreign) WaitHost(uint64) error                     { return nil }
func (foreign) Failed(uint64) error                       { return nil }
func (foreign) CanWaitDevice(syncstate.Domain) bool       { return false }
func (foreign) WaitDevice(fences []syncstate.Fence) error { return nil }

func TestLaunchGrid(t *testing.T) {
	d, e := emuDevice(t, syncstate.DeviceSide)
	tk := newTask(t, d, syncstate.Sinks{})
	defer func() { _ = errors.Join(tk.Close(), d.Close()) }()
	if _, err := tk.Launch(kernels.Op(200), kernels.F32, kernels.Args{}); err == nil {
		t.Fatal("an invalid op launched")
	}
	if _, err := tk.Launch(kernels.Fill, kernels.DType(9), kernels.Args{}); err == nil {
		t.Fatal("an invalid dtype launched")
	}
	_ = e
	if d.JITTime() <= 0 {
		t.Fatal("no JIT time after the first launch")
	}
}

func TestOpenWithoutDriver(t *testing.T) {
	t.Setenv(cuda.EnvLibCUDA, "/nonexistent/libcuda.so.1")
	_, err := Open(driver.DeviceConfig{})
	if !errors.Is(err, cuda.ErrNoDriver) || !errors.Is(err, dl.ErrNotFound) {
		t.Fatalf("want cuda.ErrNoDriver, got %v", err)
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("unclear error: %v", err)
	}
	t.Log(err)
}

// On this machine (no NVIDIA driver) the default search fails the same way.
func TestOpenDefaultWithoutDriver(t *testing.T) {
	if gpuEnabled() {
		t.Skip("a GPU is expected here")
	}
	t.Setenv(cuda.EnvLibCUDA, "")
	_, err := Open(driver.DeviceConfig{})
	if err == nil {
		t.Skip("an NVIDIA driver is installed here")
	}
	if !errors.Is(err, cuda.ErrNoDriver) {
		t.Fatalf("want cuda.ErrNoDriver, got %v", err)
	}
}

// cfakeEnv builds the fake libcuda and libcublas and points the bindings
// at them for the test, or skips without gcc.
func cfakeEnv(t testing.TB) fakelib.Paths {
	t.Helper()
	p, err := fakelib.Build()
	if errors.Is(err, fakelib.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(cuda.EnvLibCUDA, p.CUDA)
	t.Setenv(cublas.EnvLibCUBLAS, p.CUBLAS)
	return p
}

func TestOpenNoDevice(t *testing.T) {
	cfakeEnv(t)
	t.Setenv("FAKECUDA_NODEVICE", "1")
	if _, err := Open(driver.DeviceConfig{}); !errors.Is(err, cuda.ErrNoDevice) {
		t.Fatalf("want cuda.ErrNoDevice, got %v", err)
	}
}

// Without cuBLAS, kernels work and Gemm says why it cannot.
func TestOpenWithoutCUBLAS(t *testing.T) {
	cfakeEnv(t)
	t.Setenv(cublas.EnvLibCUBLAS, "/nonexistent/libcublas.so.13")
	devs, err := Open(driver.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Target() != "sm_90" || devs[1].Target() != "sm_80" {
		t.Fatalf("devices: %d, targets %s", len(devs), devs[0].Target())
	}
	d := devs[0].(*Device)
	defer func() {
		for _, x := range devs {
			_ = x.Close()
		}
	}()
	if d.PTXArch() != "sm_90" || d.Name() != "Fake NVIDIA GPU 0" || d.SignalsCreated() != 0 {
		t.Fatalf("device: %s %s", d.PTXArch(), d.Name())
	}
	tk := newTask(t, d, syncstate.Sinks{})
	defer tk.Close()
	p, err := d.Malloc(256)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	if _, err := tk.Launch(kernels.Fill, kernels.F32, kernels.Args{Out: uint64(p), Alpha: 2, N: 64}); err != nil {
		t.Fatal(err)
	}
	_, err = tk.Gemm(kernels.F32, false, false, 4, 4, 4, 1, p, 4, p, 4, 0, p, 4)
	if !errors.Is(err, ErrNoBLAS) || !errors.Is(err, cublas.ErrNotFound) {
		t.Fatalf("Gemm without cuBLAS: %v", err)
	}
}

// Tasks on many goroutines at once, each running the mixed program and
// reading its result back: contexts, streams, events and pools are shared
// through locks only where they must be. Run with -race.
func TestConcurrentTasks(t *testing.T) {
	for _, kind := range backendKinds {
		for _, p := range []syncstate.Policy{syncstate.DeviceSide, syncstate.DeviceBridge, syncstate.Unified} {
			t.Run(kind.name+"/"+p.String(), func(t *testing.T) {
				h := newHarness(t, kind, p)
				const workers, rounds, n = 8, 10, 32
				host := randVals(3, n*n)
				x := h.upload(host)
				want := reference.MatMul(reference.Mul(reference.Widen(host), reference.Widen(host)), reference.Widen(host), n)
				tasks := make([]*htask, workers)
				outs := make([][2]*harr, workers)
				for i := range tasks {
					tasks[i] = h.task()
					outs[i] = [2]*harr{h.alloc(n*n, kernels.F32), h.alloc(n*n, kernels.F32)}
				}
				var wg sync.WaitGroup
				errs := make(chan string, workers)
				for i := range tasks {
					wg.Add(1)
					go func(tk *htask, t1, t2 *harr) {
						defer wg.Done()
						for r := 0; r < rounds; r++ {
							tk.mul(t1, x, x)
							tk.matmul(t2, t1, x)
							got := h.read(t2)
							if j := closeTo(want, got, 1e-4); j >= 0 {
								errs <- "wrong result"
								return
							}
						}
					}(tasks[i], outs[i][0], outs[i][1])
				}
				wg.Wait()
				close(errs)
				for e := range errs {
					t.Fatal(e)
				}
			})
		}
	}
}

// An op on the stream of the op before it costs the driver one call, the
// launch: no event query (the ops-in-flight cap asks the runtime only once
// the count it knows reaches the cap) and no event record beyond the
// cap's periodic marks (one per MaxInFlight/4 ops). The old Submit asked
// Completed before every op, which queried the newest mark's event after
// each one.
func TestSameStreamOpCostsOneDriverCall(t *testing.T) {
	const maxInFlight, n = 64, 1000
	d, e := backendKinds[0].open(t, driver.DeviceConfig{Policy: syncstate.DeviceSide, MaxInFlight: maxInFlight})
	tk := newTask(t, d, syncstate.Sinks{})
	defer func() {
		if err := errors.Join(tk.Close(), d.Close()); err != nil {
			t.Fatal(err)
		}
	}()
	p, _ := d.Malloc(256)
	defer d.Free(p)
	// The emulated device runs nothing until the host waits, so the cap
	// would throttle: keep the stream under it by draining.
	for done := 0; done < n; done += maxInFlight / 2 {
		launches, queries, records := e.launches, e.queries, e.records
		launchN(t, tk, maxInFlight/2, p)
		if got := e.launches - launches; got != maxInFlight/2 {
			t.Fatalf("%d launches for %d ops", got, maxInFlight/2)
		}
		if got := e.queries - queries; got != 0 {
			t.Fatalf("%d event queries for %d same-stream ops", got, maxInFlight/2)
		}
		if got := e.records - records; got > 2 {
			t.Fatalf("%d event records for %d same-stream ops, want at most 2 (the cap's marks, one per %d ops)", got, maxInFlight/2, maxInFlight/4)
		}
		if err := tk.Kernel().Drain(); err != nil {
			t.Fatal(err)
		}
	}
}

// openFakeCounts reads the call counters of the fake libcuda at path.
func openFakeCounts(t *testing.T, path string) fakelib.Counts {
	t.Helper()
	c, err := fakelib.OpenCounts(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The same through the real bindings, counted by the fake libcuda: per
// same-stream op exactly one cuLaunchKernel and one cuCtxGetCurrent (the
// check that the task's context is current on the calling thread, which a
// C program that set it once does not make), and no cuEventQuery or
// cuEventRecord beyond what the ops-in-flight cap needs (a mark per
// MaxInFlight/4 ops, a query when the count it knows reaches the cap).
func TestSameStreamOpDriverCallsOnFakeLibrary(t *testing.T) {
	p := cfakeEnv(t)
	const maxInFlight, n = 64, 1024
	d := openFirst(t, driver.DeviceConfig{Policy: syncstate.DeviceSide, MaxInFlight: maxInFlight})
	tk := newTask(t, d, syncstate.Sinks{})
	defer func() {
		if err := errors.Join(tk.Close(), d.Close()); err != nil {
			t.Fatal(err)
		}
	}()
	dp, err := d.Malloc(256)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(dp)
	c := openFakeCounts(t, p.CUDA)
	launchN(t, tk, 8, dp) // the parameter block, the first context check
	events := d.EventsCreated()
	var before [12]int64
	for i := range before {
		before[i] = c.Get(i)
	}
	launchN(t, tk, n, dp)
	delta := func(i int) int64 { return c.Get(i) - before[i] }
	if got := delta(fakelib.CountLaunch); got != n {
		t.Fatalf("%d cuLaunchKernel for %d ops", got, n)
	}
	// The fake completes everything at once, so the cap learns progress
	// from its newest mark whenever the count it knows reaches the cap:
	// one query per MaxInFlight/2 ops at most (the old Submit asked after
	// every mark, one per MaxInFlight/4).
	if got, most := delta(fakelib.CountQuery), int64(n/(maxInFlight/2)); got > most {
		t.Fatalf("%d cuEventQuery/cuStreamQuery for %d same-stream ops, want at most %d", got, n, most)
	}
	if got, marks := delta(fakelib.CountRecord), int64(n/(maxInFlight/4)); got > marks {
		t.Fatalf("%d cuEventRecord for %d same-stream ops, want at most %d (the cap's marks)", got, n, marks)
	}
	if got := delta(fakelib.CountWait); got != 0 {
		t.Fatalf("%d cuStreamWaitEvent for same-stream ops", got)
	}
	// One context check per driver call: launches, the marks (and the
	// events the pool creates for them) and the queries.
	if got, calls := delta(fakelib.CountGetCurrent), delta(fakelib.CountLaunch)+delta(fakelib.CountRecord)+delta(fakelib.CountQuery)+delta(fakelib.CountSync)+int64(d.EventsCreated()-events); got != calls {
		t.Fatalf("%d cuCtxGetCurrent for %d driver calls (%d ops), want one per call", got, calls, n)
	}
	// Only when the goroutine moved to another OS thread (rare; the bound
	// leaves room for a loaded machine), not once per call.
	if got := delta(fakelib.CountSetCurrent); got > n/8 {
		t.Fatalf("%d cuCtxSetCurrent for %d ops: the context should stay current on the thread", got, n)
	}
}

// A crossing under DeviceBridge costs the driver what the raw
// mixed/event shape pays: one cuEventRecord on the producer's stream and
// one cuStreamWaitEvent on the consumer's, no query; under Unified none.
// (The Go emulation's device runs nothing until the host waits, so no
// producer is found complete early.)
func TestCrossingDriverCalls(t *testing.T) {
	for _, c := range []struct {
		p              syncstate.Policy
		records, waits int
	}{{syncstate.DeviceBridge, 1, 1}, {syncstate.Unified, 0, 0}} {
		t.Run(c.p.String(), func(t *testing.T) {
			h := newHarness(t, backendKinds[0], c.p)
			tk := h.task()
			x := h.upload(randVals(1, side*side))
			sq, out := h.alloc(side*side, kernels.F32), h.alloc(side*side, kernels.F32)
			for it := 0; it < 10; it++ {
				e := h.emu
				records, waits, queries, launches, gemms := e.records, e.waits, e.queries, e.launches, e.gemms
				tk.mul(sq, x, x)
				tk.matmul(out, sq, x)
				if e.launches-launches != 1 || e.gemms-gemms != 1 {
					t.Fatalf("iteration %d: %d launches, %d gemms", it, e.launches-launches, e.gemms-gemms)
				}
				if got := e.records - records; got != c.records {
					t.Fatalf("iteration %d: %d event records per crossing, want %d", it, got, c.records)
				}
				if got := e.waits - waits; got != c.waits {
					t.Fatalf("iteration %d: %d stream waits per crossing, want %d", it, got, c.waits)
				}
				// The first iteration records x's first reader on the
				// library stream, which drops the readers known complete
				// (one query); later ones update it in place.
				if got := e.queries - queries; got != 0 && it > 0 {
					t.Fatalf("iteration %d: %d event queries per crossing", it, got)
				}
				if err := tk.tk.Library().Drain(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
