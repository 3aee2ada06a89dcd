package nccl

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rocsync/rocsync/internal/dl"
)

// The Go constants are the values of nccl.h (testdata/nccl.h, written from
// NVIDIA/nccl and ROCm/rccl src/nccl.h.in): the fake, compiled against the
// header, exports them in order.
func TestEnumsMatchHeader(t *testing.T) {
	l := fakeLib(t)
	results := []Result{Success, UnhandledCudaError, SystemError, InternalError, InvalidArgument,
		InvalidUsage, RemoteError, InProgress, Timeout}
	for i, v := range fakeInts(t, l, "fakenccl_results", len(results)) {
		if Result(v) != results[i] {
			t.Errorf("%s = %d, header says %d", results[i], results[i], v)
		}
	}
	ops := []RedOp{Sum, Prod, Max, Min, Avg}
	for i, v := range fakeInts(t, l, "fakenccl_redops", len(ops)) {
		if RedOp(v) != ops[i] {
			t.Errorf("%s = %d, header says %d", ops[i], ops[i], v)
		}
	}
	types := []DataType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16, Float8e4m3, Float8e5m2}
	for i, v := range fakeInts(t, l, "fakenccl_datatypes", len(types)) {
		if DataType(v) != types[i] {
			t.Errorf("%s = %d, header says %d", types[i], types[i], v)
		}
	}
	if n := fakeInts(t, l, "fakenccl_unique_id_bytes", 1)[0]; n != UniqueIDBytes {
		t.Errorf("sizeof(ncclUniqueId) = %d, UniqueIDBytes = %d", n, UniqueIDBytes)
	}
	sizes := map[DataType]int{Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8, Float16: 2,
		Float32: 4, Float64: 8, Bfloat16: 2, Float8e4m3: 1, Float8e5m2: 1, DataType(12): 0, DataType(-1): 0}
	for dt, want := range sizes {
		if dt.Size() != want {
			t.Errorf("%s.Size() = %d, want %d", dt, dt.Size(), want)
		}
	}
	if Float32.String() != "ncclFloat32" || Avg.String() != "ncclAvg" || InvalidUsage.String() != "ncclInvalidUsage" ||
		Result(42).String() != "ncclResult(42)" {
		t.Error("names")
	}
}

func TestOpenMissing(t *testing.T) {
	t.Setenv(EnvLibNCCL, "/nonexistent/libnccl.so.2")
	_, err := OpenNCCL()
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, dl.ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
	if !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") || !strings.Contains(err.Error(), EnvLibNCCL) {
		t.Fatalf("error does not name the path and the variable: %v", err)
	}
	var nf *dl.NotFoundError
	if !errors.As(err, &nf) || len(nf.Tried) != 1 {
		t.Fatalf("errors.As *dl.NotFoundError: %v", err)
	}

	// The default search lists every directory it tried, then the bare
	// soname for the loader.
	t.Setenv(EnvLibNCCL, "")
	if l, err := OpenNCCL(); err == nil {
		t.Logf("NCCL is installed here: %s", l.Path())
	} else {
		if !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		for _, d := range SearchDirsNCCL() {
			if !strings.Contains(err.Error(), filepath.Join(d, SonameNCCL)) {
				t.Errorf("error does not list %s: %v", d, err)
			}
		}
		if !strings.Contains(err.Error(), ", "+SonameNCCL) {
			t.Errorf("error does not list the loader's search: %v", err)
		}
	}

	// RCCL: $ROCM_PATH/lib first, /opt/rocm/lib next.
	root := t.TempDir()
	t.Setenv("ROCM_PATH", root)
	t.Setenv(EnvLibRCCL, "")
	if l, err := OpenRCCL(); err == nil {
		t.Logf("RCCL is installed here: %s", l.Path())
	} else if !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), filepath.Join(root, "lib", SonameRCCL)) ||
		!strings.Contains(err.Error(), "/opt/rocm/lib/"+SonameRCCL) {
		t.Fatalf("RCCL search: %v", err)
	}
	t.Setenv(EnvLibRCCL, "/nonexistent/librccl.so.1")
	if _, err := OpenRCCL(); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), EnvLibRCCL+"=/nonexistent/librccl.so.1") {
		t.Fatalf("RCCL override: %v", err)
	}
}

// A library that loads but is not NCCL names the missing symbols.
func TestOpenNotNCCL(t *testing.T) {
	t.Setenv(EnvLibNCCL, "libm.so.6")
	_, err := OpenNCCL()
	var ms *dl.MissingSymbolsError
	if !errors.As(err, &ms) || len(ms.Missing) != len(BoundSymbols) || errors.Is(err, ErrNotFound) {
		t.Fatalf("libm as NCCL: %v", err)
	}
}

func TestSymbolsAndFlavor(t *testing.T) {
	l := fakeLib(t)
	for i, a := range l.sym {
		if a == 0 {
			t.Errorf("%s not resolved", BoundSymbols[i])
		}
	}
	if len(BoundSymbols) != numSyms {
		t.Fatalf("%d names for %d symbols", len(BoundSymbols), numSyms)
	}
	for _, s := range BoundSymbols {
		if ls := strings.ToLower(s); strings.Contains(ls, "multicast") || strings.Contains(ls, "nvls") || strings.Contains(ls, "multimem") {
			t.Errorf("%s is a multicast function", s)
		}
	}
	if l.Flavor() != NCCL || l.Path() != fake.path {
		t.Fatalf("flavor %s, path %s", l.Flavor(), l.Path())
	}
	// The same fake as librccl.so.1 through $ROCM_PATH.
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "lib"), 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fake.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "lib", SonameRCCL), data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ROCM_PATH", root)
	t.Setenv(EnvLibRCCL, "")
	r, err := OpenRCCL()
	if err != nil {
		t.Fatal(err)
	}
	if r.Flavor() != RCCL || r.Path() != filepath.Join(root, "lib", SonameRCCL) || RCCL.String() != "RCCL" {
		t.Fatalf("RCCL: %s at %s", r.Flavor(), r.Path())
	}
	if v, err := r.Version(); err != nil || v.String() != "2.28.3" {
		t.Fatalf("RCCL version %v, %v", v, err)
	}
}

func TestVersion(t *testing.T) {
	l := fakeLib(t)
	v, err := l.Version()
	if err != nil || v != (Version{Code: 22803, Major: 2, Minor: 28, Patch: 3}) {
		t.Fatalf("Version = %+v, %v", v, err)
	}
	for code, want := range map[int]string{2708: "2.7.8", 2804: "2.8.4", 20903: "2.9.3", 21903: "2.19.3", 22105: "2.21.5"} {
		if got := DecodeVersion(code).String(); got != want {
			t.Errorf("DecodeVersion(%d) = %s, want %s", code, got, want)
		}
	}
}

func TestUniqueIDText(t *testing.T) {
	l := fakeLib(t)
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if string(id[:8]) != "FAKENCCL" {
		t.Fatalf("id %x", id[:16])
	}
	id2, _ := l.GetUniqueID()
	if id2 == id {
		t.Fatal("two ids are equal")
	}
	text, _ := id.MarshalText()
	if len(text) != 256 || strings.ToLower(string(text)) != string(text) {
		t.Fatalf("text form %q", text)
	}
	back, err := ParseUniqueID(string(text))
	if err != nil || back != id || back.String() != string(text) {
		t.Fatalf("round trip: %v", err)
	}
	keep := back
	for _, bad := range []string{"", "00", strings.Repeat("zz", 128), string(text) + "0"} {
		if err := back.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
		if back != keep {
			t.Fatalf("a failed UnmarshalText changed the id")
		}
	}
}

// ranks holds per-rank C buffers.
type ranks[T any] struct{ send, recv [][]T }

func newRanks[T any](t *testing.T, n, sendLen, recvLen int) ranks[T] {
	r := ranks[T]{send: make([][]T, n), recv: make([][]T, n)}
	for i := range n {
		r.send[i], r.recv[i] = cbuf[T](t, sendLen), cbuf[T](t, recvLen)
	}
	return r
}

// group runs f for every rank between GroupStart and GroupEnd, as one
// thread drives every device of a process.
func group(t *testing.T, l *Lib, n int, f func(rank int) error) {
	t.Helper()
	if err := l.GroupStart(); err != nil {
		t.Fatal(err)
	}
	for r := range n {
		if err := f(r); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := l.GroupEnd(); err != nil {
		t.Fatal(err)
	}
}

func TestInitAllCollectives(t *testing.T) {
	l := fakeLib(t)
	lockThread(t)
	devices := []int{3, 1, 0, 2}
	n := len(devices)
	comms, err := l.CommInitAll(devices)
	if err != nil {
		t.Fatal(err)
	}
	defer destroyAll(t, l, comms)
	for i, c := range comms {
		cnt, err1 := l.CommCount(c)
		rank, err2 := l.CommUserRank(c)
		dev, err3 := l.CommCuDevice(c)
		if err := errors.Join(err1, err2, err3); err != nil || cnt != n || rank != i || dev != devices[i] {
			t.Fatalf("comm %d: count %d rank %d device %d, %v", i, cnt, rank, dev, err)
		}
		if r, err := l.CommGetAsyncError(c); err != nil || r != Success || l.AsyncError(c) != nil {
			t.Fatalf("async state %s, %v", r, err)
		}
	}
	stream := func(rank int) uintptr { return 0x5000 + uintptr(rank) }
	lastStream := (*uintptr)(fakeVar(t, l, "fakenccl_last_stream"))

	// all-reduce, float32, every op.
	const count = 1000
	f := newRanks[float32](t, n, count, count)
	for r := range n {
		for i := range count {
			f.send[r][i] = float32((i*7+r*13)%29) - 11.5
		}
	}
	for _, op := range []RedOp{Sum, Prod, Max, Min, Avg} {
		group(t, l, n, func(r int) error {
			return l.AllReduce(addr(f.send[r]), addr(f.recv[r]), count, Float32, op, comms[r], stream(r))
		})
		for i := range count {
			want := f.send[0][i]
			for r := 1; r < n; r++ {
				v := f.send[r][i]
				switch op {
				case Sum, Avg:
					want += v
				case Prod:
					want *= v
				case Max:
					want = max(want, v)
				case Min:
					want = min(want, v)
				}
			}
			if op == Avg {
				want /= float32(n)
			}
			for r := range n {
				if f.recv[r][i] != want {
					t.Fatalf("%s: rank %d element %d = %g, want %g", op, r, i, f.recv[r][i], want)
				}
			}
		}
	}
	if *lastStream != stream(n-1) {
		t.Fatalf("last call ran on stream %#x, want %#x", *lastStream, stream(n-1))
	}

	// In place, float64 and int32.
	d := newRanks[float64](t, n, count, 0)
	for r := range n {
		for i := range count {
			d.send[r][i] = float64(r+1) * math.Pi * float64(i)
		}
	}
	group(t, l, n, func(r int) error {
		return l.AllReduce(addr(d.send[r]), addr(d.send[r]), count, Float64, Sum, comms[r], stream(r))
	})
	for r := range n {
		for i := range count {
			want := 0.0
			for k := range n {
				want += float64(k+1) * math.Pi * float64(i)
			}
			if d.send[r][i] != want {
				t.Fatalf("in place: rank %d element %d = %g, want %g", r, i, d.send[r][i], want)
			}
		}
	}
	ints := newRanks[int32](t, n, 3, 3)
	for r := range n {
		ints.send[r][0], ints.send[r][1], ints.send[r][2] = int32(r), -int32(r), 1<<20
	}
	group(t, l, n, func(r int) error {
		return l.AllReduce(addr(ints.send[r]), addr(ints.recv[r]), 3, Int32, Max, comms[r], stream(r))
	})
	if got := ints.recv[2]; got[0] != int32(n-1) || got[1] != 0 || got[2] != 1<<20 {
		t.Fatalf("int32 max: %v", got)
	}

	// all-gather: rank r's block at offset r·count.
	g := newRanks[float32](t, n, count, n*count)
	for r := range n {
		for i := range count {
			g.send[r][i] = float32(r*100000 + i)
		}
	}
	group(t, l, n, func(r int) error {
		return l.AllGather(addr(g.send[r]), addr(g.recv[r]), count, Float32, comms[r], stream(r))
	})
	for r := range n {
		for k := range n {
			for i := range count {
				if g.recv[r][k*count+i] != float32(k*100000+i) {
					t.Fatalf("all-gather: rank %d block %d element %d = %g", r, k, i, g.recv[r][k*count+i])
				}
			}
		}
	}

	// broadcast from rank 2; the others pass no send buffer.
	b := newRanks[int64](t, n, count, count)
	for i := range count {
		b.send[2][i] = int64(i) * -3
	}
	group(t, l, n, func(r int) error {
		send := uintptr(0)
		if r == 2 {
			send = addr(b.send[r])
		}
		return l.Broadcast(send, addr(b.recv[r]), count, Int64, 2, comms[r], stream(r))
	})
	for r := range n {
		for i := range count {
			if b.recv[r][i] != int64(i)*-3 {
				t.Fatalf("broadcast: rank %d element %d = %d", r, i, b.recv[r][i])
			}
		}
	}

	// reduce-scatter: rank r gets block r of the sum.
	const block = 50
	rs := newRanks[float64](t, n, n*block, block)
	for r := range n {
		for i := range n * block {
			rs.send[r][i] = float64(r*1000 + i)
		}
	}
	group(t, l, n, func(r int) error {
		return l.ReduceScatter(addr(rs.send[r]), addr(rs.recv[r]), block, Float64, Sum, comms[r], stream(r))
	})
	for r := range n {
		for i := range block {
			want := 0.0
			for k := range n {
				want += float64(k*1000 + r*block + i)
			}
			if rs.recv[r][i] != want {
				t.Fatalf("reduce-scatter: rank %d element %d = %g, want %g", r, i, rs.recv[r][i], want)
			}
		}
	}

	// Two collectives per communicator in one group run in order.
	two := newRanks[float32](t, n, 4, 4)
	for r := range n {
		for i := range 4 {
			two.send[r][i] = 1
		}
	}
	group(t, l, n, func(r int) error {
		err1 := l.AllReduce(addr(two.send[r]), addr(two.recv[r]), 4, Float32, Sum, comms[r], stream(r))
		err2 := l.AllReduce(addr(two.recv[r]), addr(two.recv[r]), 4, Float32, Sum, comms[r], stream(r))
		return errors.Join(err1, err2)
	})
	if two.recv[1][3] != float32(n*n) {
		t.Fatalf("two in a group: %g, want %d", two.recv[1][3], n*n)
	}
}

// Without a group, each rank's call comes from its own thread.
func TestThreadPerRank(t *testing.T) {
	l := fakeLib(t)
	const n, count = 3, 257
	comms, err := l.CommInitAll([]int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer destroyAll(t, l, comms)
	buf := newRanks[uint64](t, n, count, count)
	for r := range n {
		for i := range count {
			buf.send[r][i] = uint64(r+1) << (8 * r)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Go(func() {
			for range 20 {
				if errs[r] = l.AllReduce(addr(buf.send[r]), addr(buf.recv[r]), count, Uint64, Sum, comms[r], 0); errs[r] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range n {
		if buf.recv[r][count-1] != 1+2<<8+3<<16 {
			t.Fatalf("rank %d: %#x", r, buf.recv[r][count-1])
		}
	}
}

func TestErrors(t *testing.T) {
	l := fakeLib(t)
	lockThread(t)
	isResult := func(err error, fn string, r Result) bool {
		var e *Error
		return errors.As(err, &e) && e.Result == r && e.Func == fn &&
			errors.Is(err, &Error{Result: r}) && errors.Is(err, &Error{Func: fn, Result: r}) &&
			!errors.Is(err, &Error{Func: "ncclOther", Result: r})
	}

	// Communicator creation.
	if _, err := l.CommInitAll([]int{0, 0}); !isResult(err, "ncclCommInitAll", InvalidUsage) ||
		!strings.Contains(err.Error(), "ncclInvalidUsage: invalid usage") {
		t.Errorf("duplicate device: %v", err)
	}
	if _, err := l.CommInitAll([]int{0, 99}); !isResult(err, "ncclCommInitAll", UnhandledCudaError) {
		t.Errorf("device 99: %v", err)
	}
	if _, err := l.CommInitAll(nil); !isResult(err, "ncclCommInitAll", InvalidArgument) {
		t.Errorf("no devices: %v", err)
	}
	if _, err := l.CommInitAll([]int{-1}); !isResult(err, "ncclCommInitAll", InvalidArgument) {
		t.Errorf("device -1: %v", err)
	}
	var zero UniqueID
	if _, err := l.CommInitRank(2, zero, 0); !isResult(err, "ncclCommInitRank", InvalidArgument) ||
		!strings.Contains(err.Error(), "invalid argument (run with NCCL_DEBUG=WARN") {
		t.Errorf("unknown id: %v", err)
	}
	for _, c := range [][2]int{{2, 2}, {2, -1}, {0, 0}} {
		if _, err := l.CommInitRank(c[0], zero, c[1]); !isResult(err, "ncclCommInitRank", InvalidArgument) {
			t.Errorf("rank %d of %d: %v", c[1], c[0], err)
		}
	}
	if err := l.GroupEnd(); !isResult(err, "ncclGroupEnd", InvalidUsage) {
		t.Errorf("GroupEnd without GroupStart: %v", err)
	}

	comms, err := l.CommInitAll([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	defer destroyAll(t, l, comms)
	buf := cbuf[float32](t, 8)
	p := addr(buf)
	for name, call := range map[string]func() error{
		"ncclAllReduce/type":     func() error { return l.AllReduce(p, p, 8, DataType(99), Sum, comms[0], 0) },
		"ncclAllReduce/op":       func() error { return l.AllReduce(p, p, 8, Float32, RedOp(17), comms[0], 0) },
		"ncclAllReduce/recv":     func() error { return l.AllReduce(p, 0, 8, Float32, Sum, comms[0], 0) },
		"ncclAllReduce/comm":     func() error { return l.AllReduce(p, p, 8, Float32, Sum, 0, 0) },
		"ncclAllReduce/count":    func() error { return l.AllReduce(p, p, -1, Float32, Sum, comms[0], 0) },
		"ncclBroadcast/root":     func() error { return l.Broadcast(p, p, 8, Float32, 2, comms[0], 0) },
		"ncclBroadcast/count":    func() error { return l.Broadcast(p, p, -8, Float32, 0, comms[0], 0) },
		"ncclAllGather/send":     func() error { return l.AllGather(0, p, 4, Float32, comms[0], 0) },
		"ncclAllGather/count":    func() error { return l.AllGather(p, p, -4, Float32, comms[0], 0) },
		"ncclReduceScatter/op":   func() error { return l.ReduceScatter(p, p, 4, Float32, RedOp(-1), comms[0], 0) },
		"ncclReduceScatter/cnt":  func() error { return l.ReduceScatter(p, p, -4, Float32, Sum, comms[0], 0) },
		"ncclCommCount/comm":     func() error { _, err := l.CommCount(0); return err },
		"ncclCommUserRank/comm":  func() error { _, err := l.CommUserRank(0); return err },
		"ncclCommCuDevice/comm":  func() error { _, err := l.CommCuDevice(0); return err },
		"ncclCommGetAsyncError/": func() error { _, err := l.CommGetAsyncError(0); return err },
		"ncclCommDestroy/comm":   func() error { return l.CommDestroy(0) },
		"ncclCommAbort/comm":     func() error { return l.CommAbort(0) },
	} {
		fn, _, _ := strings.Cut(name, "/")
		if err := call(); !isResult(err, fn, InvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Errors from the library are cached: one value per (function, result).
	e1 := l.AllReduce(p, p, 8, DataType(99), Sum, comms[0], 0)
	e2 := l.AllReduce(p, p, 8, DataType(98), Sum, comms[0], 0)
	if e1 != e2 {
		t.Error("errors are not cached")
	}
	if errors.Is(e1, ErrNotFound) || errors.Is(e1, ErrNVLSEnabled) {
		t.Error("a call error matches a load error")
	}

	// Ranks that disagree: the group fails and the communicators report it.
	group := func() error {
		if err := l.GroupStart(); err != nil {
			return err
		}
		err1 := l.AllReduce(p, p, 8, Float32, Sum, comms[0], 0)
		err2 := l.AllReduce(p, p, 4, Float32, Sum, comms[1], 0)
		return errors.Join(err1, err2, l.GroupEnd())
	}
	if err := group(); !isResult(err, "ncclGroupEnd", InvalidUsage) {
		t.Fatalf("mismatched counts: %v", err)
	}
	for _, c := range comms {
		r, err := l.CommGetAsyncError(c)
		aerr := l.AsyncError(c)
		if err != nil || r != InvalidUsage || !isResult(aerr, AsyncFunc, InvalidUsage) || !strings.Contains(aerr.Error(), "invalid usage") {
			t.Fatalf("async error %s, %v, %v", r, err, aerr)
		}
	}

	// A destroyed communicator is refused.
	one, err := l.CommInitAll([]int{5})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CommDestroy(one[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CommCount(one[0]); !isResult(err, "ncclCommCount", InvalidArgument) {
		t.Errorf("destroyed comm: %v", err)
	}
}

// A rank whose peers never call is an error in the fake (NCCL would
// hang), and the communicator then reports it; CommAbort frees it.
func TestMissingPeer(t *testing.T) {
	l := fakeLib(t)
	setFakeTimeout(t, l, 100)
	comms, err := l.CommInitAll([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	buf := cbuf[float32](t, 4)
	start := time.Now()
	err = l.AllReduce(addr(buf), addr(buf), 4, Float32, Sum, comms[0], 0)
	if !errors.Is(err, &Error{Func: "ncclAllReduce", Result: InvalidUsage}) || time.Since(start) < 90*time.Millisecond {
		t.Fatalf("lone rank: %v after %v", err, time.Since(start))
	}
	if err := l.AsyncError(comms[0]); !errors.Is(err, &Error{Result: InvalidUsage}) {
		t.Fatalf("async: %v", err)
	}
	for _, c := range comms {
		if err := l.CommAbort(c); err != nil {
			t.Fatal(err)
		}
	}
}

// ncclCommInitRank within one process: an id, two ranks in one group,
// each on the device current on the thread.
func TestInitRankOneProcess(t *testing.T) {
	l := fakeLib(t)
	lockThread(t)
	t.Setenv("TMPDIR", t.TempDir())
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]Comm, 2)
	group(t, l, 2, func(r int) error {
		setFakeDevice(t, l, 6-r)
		var err error
		comms[r], err = l.CommInitRank(2, id, r)
		return err
	})
	defer destroyAll(t, l, comms)
	for r, c := range comms {
		rank, _ := l.CommUserRank(c)
		dev, _ := l.CommCuDevice(c)
		cnt, _ := l.CommCount(c)
		if rank != r || dev != 6-r || cnt != 2 {
			t.Fatalf("rank %d: rank %d device %d count %d", r, rank, dev, cnt)
		}
	}
	// A rank number taken twice, and a different size for the same id.
	if _, err := l.CommInitRank(2, id, 1); !errors.Is(err, &Error{Func: "ncclCommInitRank", Result: InvalidUsage}) {
		t.Errorf("rank 1 twice: %v", err)
	}
	if _, err := l.CommInitRank(3, id, 2); !errors.Is(err, &Error{Func: "ncclCommInitRank", Result: InvalidUsage}) {
		t.Errorf("3 ranks on a 2-rank id: %v", err)
	}
	buf := newRanks[int32](t, 2, 5, 10)
	for r := range 2 {
		for i := range 5 {
			buf.send[r][i] = int32(10*r + i)
		}
	}
	group(t, l, 2, func(r int) error {
		return l.AllGather(addr(buf.send[r]), addr(buf.recv[r]), 5, Int32, comms[r], 0)
	})
	for r := range 2 {
		for i := range 10 {
			if buf.recv[r][i] != int32(10*(i/5)+i%5) {
				t.Fatalf("rank %d: %v", r, buf.recv[r])
			}
		}
	}
	// The clique's file lives in $TMPDIR while the communicators do.
	if m, _ := filepath.Glob(filepath.Join(os.Getenv("TMPDIR"), "fakenccl-*")); len(m) != 1 {
		t.Fatalf("rendezvous files: %v", m)
	}
}

func TestCollectivesDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l := fakeLib(t)
	lockThread(t)
	comms, err := l.CommInitAll([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	defer destroyAll(t, l, comms)
	c := comms[0]
	buf := cbuf[float32](t, 64)
	p := addr(buf)
	f := func() {
		err := errors.Join(
			l.GroupStart(),
			l.AllReduce(p, p, 16, Float32, Sum, c, 1),
			l.AllGather(p, p, 16, Float32, c, 1),
			l.Broadcast(p, p, 16, Float32, 0, c, 1),
			l.ReduceScatter(p, p, 16, Float32, Sum, c, 1),
			l.GroupEnd(),
			l.AllReduce(p, p, 16, Float32, Sum, c, 1),
			l.AsyncError(c),
		)
		if err != nil {
			t.Fatal(err)
		}
	}
	f()
	if n := testing.AllocsPerRun(200, f); n != 0 {
		t.Fatalf("%v allocations per round of collectives", n)
	}
	// The error path of a polled query allocates nothing either.
	g := func() { _ = l.AllReduce(p, p, 16, DataType(77), Sum, c, 1) }
	g()
	if n := testing.AllocsPerRun(200, g); n != 0 {
		t.Fatalf("%v allocations per failing call", n)
	}
}
