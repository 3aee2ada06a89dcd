package emu

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/nccl"
)

// collRig is n GPUs, a stream on each, and a communicator over them.
type collRig struct {
	m       *Machine
	c       *Collectives
	comms   []nccl.Comm
	streams []hip.Stream
}

func newCollRig(t *testing.T, n int, timeout time.Duration) *collRig {
	t.Helper()
	m := New(Options{Devices: n, Hazards: true, MaxDelay: 20 * time.Microsecond, Seed: 1})
	r := &collRig{m: m, c: m.Collectives(timeout)}
	devs := make([]int, n)
	for d := range n {
		devs[d] = d
		s, err := m.HIP().StreamCreate(d, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.streams = append(r.streams, s)
	}
	var err error
	if r.comms, err = r.c.CommInitAll(devs); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *collRig) upload(t *testing.T, d int, b []byte) uintptr {
	t.Helper()
	p, err := r.m.HIP().Malloc(d, uint64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.m.HIP().MemcpyHtoD(d, p, unsafe.Pointer(&b[0]), uint64(len(b))); err != nil {
		t.Fatal(err)
	}
	return uintptr(p)
}

func (r *collRig) download(t *testing.T, d int, p uintptr, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	if err := r.m.HIP().MemcpyDtoH(d, unsafe.Pointer(&out[0]), hip.DevicePtr(p), uint64(n)); err != nil {
		t.Fatal(err)
	}
	return out
}

func f64b(v ...float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

func i32b(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// Every reduction, two element types, out of place; reduce-scatter.
func TestEmulatedReductions(t *testing.T) {
	r := newCollRig(t, 3, 5*time.Second)
	for _, tc := range []struct {
		op   nccl.RedOp
		want []byte
	}{{nccl.Sum, f64b(6, -1)}, {nccl.Prod, f64b(6, math.Copysign(0, -1))}, {nccl.Max, f64b(3, 1)}, {nccl.Min, f64b(1, -2)}} {
		var recv [3]uintptr
		for d := range 3 {
			send := r.upload(t, d, f64b(float64(d+1), []float64{1, -2, 0}[d]))
			recv[d] = r.upload(t, d, f64b(0, 0))
			if err := r.c.AllReduce(send, recv[d], 2, nccl.Float64, tc.op, r.comms[d], uintptr(r.streams[d])); err != nil {
				t.Fatal(err)
			}
		}
		for d := range 3 {
			if err := r.m.HIP().StreamSynchronize(r.streams[d]); err != nil {
				t.Fatal(err)
			}
			if got := r.download(t, d, recv[d], 16); string(got) != string(tc.want) {
				t.Fatalf("%v rank %d: % x", tc.op, d, got)
			}
		}
	}
	var recv [3]uintptr
	for d := range 3 {
		send := r.upload(t, d, i32b(1, 2, 3, 4, 5, 6))
		recv[d] = r.upload(t, d, i32b(0, 0))
		if err := r.c.ReduceScatter(send, recv[d], 2, nccl.Int32, nccl.Sum, r.comms[d], uintptr(r.streams[d])); err != nil {
			t.Fatal(err)
		}
	}
	for d := range 3 {
		_ = r.m.HIP().StreamSynchronize(r.streams[d])
		want := i32b(3*int32(2*d+1), 3*int32(2*d+2))
		if got := r.download(t, d, recv[d], 8); string(got) != string(want) {
			t.Fatalf("reduce-scatter rank %d: % x", d, got)
		}
	}
	if hs := r.m.Hazards(); len(hs) != 0 {
		t.Fatal(hs)
	}
}

// Ranks that disagree on a call fail every rank's stream, naming both
// calls, and break the communicator.
func TestEmulatedCollectiveMismatchFails(t *testing.T) {
	r := newCollRig(t, 2, 5*time.Second)
	a := r.upload(t, 0, f64b(1, 2))
	b := r.upload(t, 1, f64b(1, 2))
	g := r.upload(t, 1, f64b(0, 0, 0, 0))
	if err := r.c.AllReduce(a, a, 2, nccl.Float64, nccl.Sum, r.comms[0], uintptr(r.streams[0])); err != nil {
		t.Fatal(err)
	}
	if err := r.c.AllGather(b, g, 2, nccl.Float64, r.comms[1], uintptr(r.streams[1])); err != nil {
		t.Fatal(err)
	}
	for d := range 2 {
		err := r.m.HIP().StreamSynchronize(r.streams[d])
		if err == nil || !strings.Contains(err.Error(), "every rank must make the same collective calls") ||
			!strings.Contains(err.Error(), "ncclAllGather(count 2") {
			t.Fatalf("rank %d: %v", d, err)
		}
	}
	if err := r.c.AsyncError(r.comms[0]); !errors.Is(err, &nccl.Error{Result: nccl.RemoteError}) {
		t.Fatalf("async error: %v", err)
	}
}

// A rank that never calls: the other's stream fails after the timeout
// (it does not hang), naming the missing rank; an abort fails a pending
// part at once.
func TestEmulatedCollectiveTimeoutAndAbort(t *testing.T) {
	r := newCollRig(t, 2, 200*time.Millisecond)
	a := r.upload(t, 0, f64b(1))
	if err := r.c.AllReduce(a, a, 1, nccl.Float64, nccl.Sum, r.comms[0], uintptr(r.streams[0])); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := r.m.HIP().StreamSynchronize(r.streams[0])
	if err == nil || !strings.Contains(err.Error(), "ranks [1]") || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}

	r = newCollRig(t, 2, time.Hour)
	a = r.upload(t, 0, f64b(1))
	if err := r.c.Broadcast(a, a, 1, nccl.Float64, 1, r.comms[0], uintptr(r.streams[0])); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := r.c.CommAbort(r.comms[1]); err != nil {
		t.Fatal(err)
	}
	if err := r.m.HIP().StreamSynchronize(r.streams[0]); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("after abort: %v", err)
	}
}

// Misuse is refused when the call is made: a stream of another GPU, an
// unknown communicator, a type or operation not emulated, duplicate ranks.
func TestEmulatedCollectiveMisuse(t *testing.T) {
	r := newCollRig(t, 2, time.Second)
	a := r.upload(t, 0, f64b(1))
	inv := func(err error, res nccl.Result) {
		t.Helper()
		if !errors.Is(err, &nccl.Error{Result: res}) {
			t.Fatalf("%v, want %v", err, res)
		}
	}
	inv(r.c.AllReduce(a, a, 1, nccl.Float64, nccl.Sum, r.comms[0], uintptr(r.streams[1])), nccl.InvalidUsage)
	inv(r.c.AllReduce(a, a, 1, nccl.Float64, nccl.Sum, 999, uintptr(r.streams[0])), nccl.InvalidArgument)
	inv(r.c.AllReduce(a, a, 1, nccl.Float16, nccl.Sum, r.comms[0], uintptr(r.streams[0])), nccl.InvalidArgument)
	inv(r.c.AllReduce(a, a, 1, nccl.Float64, nccl.Avg, r.comms[0], uintptr(r.streams[0])), nccl.InvalidArgument)
	inv(r.c.Broadcast(a, a, 1, nccl.Float64, 2, r.comms[0], uintptr(r.streams[0])), nccl.InvalidArgument)
	_, err := r.c.CommInitAll([]int{0, 0})
	inv(err, nccl.InvalidUsage)
	_, err = r.c.CommInitAll([]int{5})
	inv(err, nccl.InvalidArgument)
	id, _ := r.c.GetUniqueID()
	done := make(chan error, 1)
	go func() { _, err := r.c.CommInitRank(0, 2, id, 0); done <- err }()
	time.Sleep(20 * time.Millisecond)
	_, err = r.c.CommInitRank(1, 2, id, 0)
	inv(err, nccl.InvalidUsage) // rank 0 twice
	_, err = r.c.CommInitRank(1, 3, id, 1)
	inv(err, nccl.InvalidUsage) // another rank count
	if err := <-done; !errors.Is(err, ErrCollectiveTimeout) {
		t.Fatalf("lone rank: %v", err)
	}
}

// reduceInto reads and writes every element type NCCL's reductions take
// with its own width and signedness: -3 is the minimum of -3 and 2 for a
// signed type, 2 for an unsigned one (where -3 wraps to a large value).
func TestReduceIntoEveryDataType(t *testing.T) {
	le := binary.LittleEndian
	enc := func(dt nccl.DataType, vs ...float64) []byte {
		b := make([]byte, dt.Size()*len(vs))
		for i, v := range vs {
			p := b[i*dt.Size():]
			switch dt {
			case nccl.Int8, nccl.Uint8:
				p[0] = byte(int8(v))
			case nccl.Int32, nccl.Uint32:
				le.PutUint32(p, uint32(int32(v)))
			case nccl.Int64, nccl.Uint64:
				le.PutUint64(p, uint64(int64(v)))
			case nccl.Float32:
				le.PutUint32(p, math.Float32bits(float32(v)))
			case nccl.Float64:
				le.PutUint64(p, math.Float64bits(v))
			}
		}
		return b
	}
	signed := map[nccl.DataType]bool{nccl.Int8: true, nccl.Int32: true, nccl.Int64: true, nccl.Float32: true, nccl.Float64: true}
	for _, dt := range []nccl.DataType{nccl.Int8, nccl.Uint8, nccl.Int32, nccl.Uint32, nccl.Int64, nccl.Uint64, nccl.Float32, nccl.Float64} {
		// Three ranks; element 0 of the output is the ranks' element 1
		// (off skips element 0), element 1 their element 2.
		data := [][]byte{enc(dt, 9, 2, -3), enc(dt, 9, 5, 2), enc(dt, 9, 1, 1)}
		minWant := enc(dt, 1, -3)
		maxWant := enc(dt, 5, 2)
		if !signed[dt] {
			minWant, maxWant = enc(dt, 1, 1), enc(dt, 5, -3)
		}
		for _, tc := range []struct {
			op   nccl.RedOp
			want []byte
		}{{nccl.Sum, enc(dt, 8, 0)}, {nccl.Prod, enc(dt, 10, -6)}, {nccl.Max, maxWant}, {nccl.Min, minWant}} {
			out := make([]byte, 2*dt.Size())
			reduceInto(out, data, dt.Size(), dt, tc.op)
			if string(out) != string(tc.want) {
				t.Errorf("%v %v: % x, want % x", dt, tc.op, out, tc.want)
			}
		}
	}
}

// Group calls as NCCL's: inside a group a collective is checked but not
// on its stream; work the program puts on the stream before
// ncclGroupEnd (an event here) runs before it; the outermost
// ncclGroupEnd launches the group, in order; group state is the thread's.
func TestEmulatedCollectiveGroupDefersLaunch(t *testing.T) {
	r := newCollRig(t, 2, 5*time.Second)
	h := r.m.HIP()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a := [2]uintptr{r.upload(t, 0, f64b(1, 2)), r.upload(t, 1, f64b(10, 20))}
	ev, err := h.EventCreate(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.c.GroupStart(); err != nil {
		t.Fatal(err)
	}
	if err := r.c.GroupStart(); err != nil { // nested
		t.Fatal(err)
	}
	for d := range 2 {
		if err := r.c.AllReduce(a[d], a[d], 2, nccl.Float64, nccl.Sum, r.comms[d], uintptr(r.streams[d])); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.c.GroupEnd(); err != nil { // the inner end launches nothing
		t.Fatal(err)
	}
	// Another thread has no group to end.
	other := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		other <- r.c.GroupEnd()
	}()
	if err := <-other; !errors.Is(err, &nccl.Error{Func: "ncclGroupEnd", Result: nccl.InvalidUsage}) {
		t.Fatalf("ncclGroupEnd on a thread without a group: %v", err)
	}
	// An event recorded now is ahead of the collective: it completes
	// with the collective not yet run (outside a group rank 0's part
	// would be on the stream, and the event behind it).
	if err := h.EventRecord(ev, r.streams[0]); err != nil {
		t.Fatal(err)
	}
	if err := h.EventSynchronize(ev); err != nil {
		t.Fatal(err)
	}
	if got := r.download(t, 0, a[0], 16); string(got) != string(f64b(1, 2)) {
		t.Fatalf("rank 0 before ncclGroupEnd: % x", got)
	}
	if err := r.c.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	for d := range 2 {
		if err := h.StreamSynchronize(r.streams[d]); err != nil {
			t.Fatal(err)
		}
		if got := r.download(t, d, a[d], 16); string(got) != string(f64b(11, 22)) {
			t.Fatalf("rank %d after ncclGroupEnd: % x", d, got)
		}
	}
	if err := r.c.GroupEnd(); !errors.Is(err, &nccl.Error{Func: "ncclGroupEnd", Result: nccl.InvalidUsage}) {
		t.Fatalf("ncclGroupEnd without ncclGroupStart: %v", err)
	}

	// A call that fails inside a group fails ncclGroupEnd, which launches
	// nothing: no part waits for a peer that never comes.
	if err := r.c.GroupStart(); err != nil {
		t.Fatal(err)
	}
	if err := r.c.AllReduce(a[0], a[0], 2, nccl.Float64, nccl.Sum, r.comms[0], uintptr(r.streams[1])); !errors.Is(err, &nccl.Error{Result: nccl.InvalidUsage}) {
		t.Fatalf("a stream of another GPU: %v", err)
	}
	if err := r.c.AllReduce(a[1], a[1], 2, nccl.Float64, nccl.Sum, r.comms[1], uintptr(r.streams[1])); err != nil {
		t.Fatal(err)
	}
	if err := r.c.GroupEnd(); !errors.Is(err, &nccl.Error{Func: "ncclGroupEnd", Result: nccl.InvalidUsage}) {
		t.Fatalf("ncclGroupEnd of a failed group: %v", err)
	}
	for d := range 2 {
		if err := h.StreamSynchronize(r.streams[d]); err != nil {
			t.Fatalf("rank %d: %v", d, err)
		}
	}
	if got := r.download(t, 1, a[1], 16); string(got) != string(f64b(11, 22)) {
		t.Fatalf("rank 1 after a failed group: % x", got)
	}
	// The failed group numbered nothing: the next collective pairs up.
	for d := range 2 {
		if err := r.c.AllReduce(a[d], a[d], 2, nccl.Float64, nccl.Max, r.comms[d], uintptr(r.streams[d])); err != nil {
			t.Fatal(err)
		}
	}
	for d := range 2 {
		if err := h.StreamSynchronize(r.streams[d]); err != nil {
			t.Fatalf("rank %d: %v", d, err)
		}
	}
	if hs := r.m.Hazards(); len(hs) != 0 {
		t.Fatal(hs)
	}
}
