package nccl

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/internal/errcache"
)

// Indexes into Lib.sym; BoundSymbols lists the names in the same order.
const (
	symGetVersion = iota
	symGetUniqueID
	symCommInitRank
	symCommInitAll
	symCommDestroy
	symCommAbort
	symCommCount
	symCommCuDevice
	symCommUserRank
	symCommGetAsyncError
	symGetErrorString
	symGroupStart
	symGroupEnd
	symAllReduce
	symAllGather
	symBroadcast
	symReduceScatter
	numSyms
)

// BoundSymbols are the functions Open requires; NCCL 2.x and RCCL export
// them all. None of them is a multicast function, and none may be added.
var BoundSymbols = []string{
	symGetVersion:        "ncclGetVersion",
	symGetUniqueID:       "ncclGetUniqueId",
	symCommInitRank:      "ncclCommInitRank",
	symCommInitAll:       "ncclCommInitAll",
	symCommDestroy:       "ncclCommDestroy",
	symCommAbort:         "ncclCommAbort",
	symCommCount:         "ncclCommCount",
	symCommCuDevice:      "ncclCommCuDevice",
	symCommUserRank:      "ncclCommUserRank",
	symCommGetAsyncError: "ncclCommGetAsyncError",
	symGetErrorString:    "ncclGetErrorString",
	symGroupStart:        "ncclGroupStart",
	symGroupEnd:          "ncclGroupEnd",
	symAllReduce:         "ncclAllReduce",
	symAllGather:         "ncclAllGather",
	symBroadcast:         "ncclBroadcast",
	symReduceScatter:     "ncclReduceScatter",
}

// Flavor says which library a Lib is.
type Flavor int

const (
	NCCL Flavor = iota // NVIDIA's, for CUDA
	RCCL               // AMD's, for ROCm
)

func (f Flavor) String() string {
	if f == RCCL {
		return "RCCL"
	}
	return "NCCL"
}

// The variables that, when set, are the only path Open tries.
const (
	EnvLibNCCL = "ROCSYNC_LIBNCCL"
	EnvLibRCCL = "ROCSYNC_LIBRCCL"
)

// Sonames of the two libraries.
const (
	SonameNCCL = "libnccl.so.2"
	SonameRCCL = "librccl.so.1"
)

// SearchDirsNCCL returns the directories OpenNCCL looks in before the
// loader's own search (LD_LIBRARY_PATH, the ld.so cache, where Debian's
// libnccl2 lives): PyTorch's pip wheels (nvidia-nccl-cu13 and -cu12 put
// the library in nvidia/nccl/lib; the CUDA 13 wheels keep the toolkit's
// libraries in nvidia/cu13/lib), then the CUDA toolkits under /usr/local,
// newest first.
func SearchDirsNCCL() []string {
	const site = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia"
	return append([]string{site + "/nccl/lib", site + "/cu13/lib"}, dl.CUDAToolkitDirs()...)
}

// SearchDirsRCCL returns the directories OpenRCCL looks in before the
// loader's own search: $ROCM_PATH/lib (when set), then /opt/rocm/lib.
func SearchDirsRCCL() []string { return dl.SearchDirs() }

// Lib is the purego binding to libnccl or librccl. It is safe for use by
// many goroutines (but see the package comment on threads and groups).
type Lib struct {
	flavor Flavor
	path   string
	handle uintptr
	sym    [numSyms]uintptr

	errs errcache.Cache[Error] // one immutable *Error per (function, result)
}

// OpenNCCL loads libnccl.so.2 ($ROCSYNC_LIBNCCL when set, else
// SearchDirsNCCL, else the loader's search), after DisableNVLS. It makes no
// communicator and needs no GPU.
func OpenNCCL() (*Lib, error) {
	return open(NCCL, SonameNCCL, EnvLibNCCL, SearchDirsNCCL)
}

// OpenRCCL loads librccl.so.1 ($ROCSYNC_LIBRCCL when set, else
// SearchDirsRCCL, else the loader's search), after DisableNVLS (RCCL reads
// NCCL's variables; AMD GPUs have no NVLink, and the guard costs nothing).
func OpenRCCL() (*Lib, error) {
	return open(RCCL, SonameRCCL, EnvLibRCCL, SearchDirsRCCL)
}

func open(flavor Flavor, soname, envVar string, dirs func() []string) (*Lib, error) {
	// Before the library is in the process: nothing of it may run (its
	// constructors included) with multicast possible.
	if err := DisableNVLS(); err != nil {
		return nil, err
	}
	var lib *dl.Library
	var err error
	override := os.Getenv(envVar)
	if override != "" {
		lib, err = dl.Open(soname, []string{override}, nil)
	} else {
		lib, err = dl.Open(soname, []string{soname}, dirs())
	}
	if err != nil {
		if nf, ok := err.(*dl.NotFoundError); ok {
			return nil, &notFoundError{nf: nf, soname: soname, envVar: envVar, override: override}
		}
		return nil, err
	}
	addrs, err := lib.Symbols(BoundSymbols)
	if err != nil {
		return nil, fmt.Errorf("nccl: %s is not a usable %s: %w", lib.Path, flavor, err)
	}
	l := &Lib{flavor: flavor, path: lib.Path, handle: lib.Handle}
	copy(l.sym[:], addrs)
	return l, nil
}

// Flavor is NCCL or RCCL.
func (l *Lib) Flavor() Flavor { return l.flavor }

// Path is the path or soname that opened.
func (l *Lib) Path() string { return l.path }

// ErrorString is ncclGetErrorString.
func (l *Lib) ErrorString(r Result) string {
	b := blocks.Get()
	defer blocks.Put(b)
	return cmem.GoString(b.Call(l.sym[symGetErrorString], uintptr(r)))
}

// check turns an ncclResult_t into nil or the cached *Error. The result is
// a 32-bit enum: the upper half of RAX is not defined by the ABI.
func (l *Lib) check(fn int, r uintptr) error {
	res := Result(uint32(r))
	if res == Success {
		return nil
	}
	return l.errs.Get(fn, uint32(res), func() *Error {
		return &Error{Func: BoundSymbols[fn], Result: res, Text: l.ErrorString(res)}
	})
}

// argError is an error the binding finds before calling the library.
func argError(fn int, format string, a ...any) error {
	return &Error{Func: BoundSymbols[fn], Result: InvalidArgument, Text: fmt.Sprintf(format, a...)}
}

// Version is a decoded NCCL_VERSION_CODE.
type Version struct {
	Code                int // as ncclGetVersion returns it
	Major, Minor, Patch int
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// DecodeVersion splits an NCCL_VERSION_CODE: X*1000+Y*100+Z up to 2.8,
// X*10000+Y*100+Z from 2.9 on (nccl.h's NCCL_VERSION macro).
func DecodeVersion(code int) Version {
	v := Version{Code: code, Patch: code % 100}
	if code < 10000 {
		v.Major, v.Minor = code/1000, code%1000/100
	} else {
		v.Major, v.Minor = code/10000, code%10000/100
	}
	return v
}

// Version is ncclGetVersion, decoded.
func (l *Lib) Version() (Version, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	if err := l.check(symGetVersion, b.Call(l.sym[symGetVersion], b.Word(0))); err != nil {
		return Version{}, err
	}
	return DecodeVersion(int(int32(*b.U64(0)))), nil
}

// GetUniqueID is ncclGetUniqueId: the id that the ranks of one
// communicator pass to CommInitRank. Call it once, in one process, and
// hand the id to the others (UniqueID.MarshalText gives a text form). On
// NCCL it also starts the bootstrap listener of this process.
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	b := blocks.Get()
	defer blocks.Put(b)
	p := unsafe.Slice((*byte)(b.Ptr()), len(id))
	clear(p)
	if err := l.check(symGetUniqueID, b.Call(l.sym[symGetUniqueID], uintptr(b.Ptr()))); err != nil {
		return id, err
	}
	copy(id[:], p)
	return id, nil
}

// CommInitRank is ncclCommInitRank: this process's (or thread's) rank of
// an nranks-rank communicator identified by id, on the device current on
// the calling OS thread. NCCL returns once every rank has joined, so the
// ranks must call it concurrently (different processes or threads), or
// inside one group.
func (l *Lib) CommInitRank(nranks int, id UniqueID, rank int) (Comm, error) {
	if nranks < 1 || nranks > 1<<30 || rank < 0 || rank >= nranks {
		return 0, argError(symCommInitRank, "rank %d of %d ranks", rank, nranks)
	}
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	r, err := callInitRank(l.sym[symCommInitRank], b.Word(0), int32(nranks), &id, int32(rank))
	if err != nil {
		return 0, err
	}
	if err := l.check(symCommInitRank, r); err != nil {
		return 0, err
	}
	return Comm(*b.U64(0)), nil
}

// CommInitAll is ncclCommInitAll: one communicator per listed device of
// this process, rank i on devices[i].
func (l *Lib) CommInitAll(devices []int) ([]Comm, error) {
	n := len(devices)
	if n == 0 || n > 1<<20 {
		return nil, argError(symCommInitAll, "%d devices", n)
	}
	comms := cmem.Alloc(uintptr(8 * n))
	devs := cmem.Alloc(uintptr(4 * n))
	if comms == nil || devs == nil {
		cmem.Free(comms)
		cmem.Free(devs)
		return nil, fmt.Errorf("nccl: cannot allocate C memory for %d communicators", n)
	}
	defer cmem.Free(comms)
	defer cmem.Free(devs)
	for i, d := range devices {
		if d < 0 || d > 1<<30 {
			return nil, argError(symCommInitAll, "device %d", d)
		}
		*(*int32)(unsafe.Add(devs, 4*i)) = int32(d)
	}
	if err := l.check(symCommInitAll, cmem.Call(l.sym[symCommInitAll], uintptr(comms), uintptr(n), uintptr(devs))); err != nil {
		return nil, err
	}
	out := make([]Comm, n)
	for i := range out {
		out[i] = Comm(*(*uintptr)(unsafe.Add(comms, 8*i)))
	}
	return out, nil
}

// CommDestroy is ncclCommDestroy: it waits for the communicator's
// outstanding work, then frees it.
func (l *Lib) CommDestroy(c Comm) error {
	b := blocks.Get()
	defer blocks.Put(b)
	return l.check(symCommDestroy, b.Call(l.sym[symCommDestroy], uintptr(c)))
}

// CommAbort is ncclCommAbort: it stops the communicator's outstanding work
// and frees it. Use it after an error, when peers may never answer.
func (l *Lib) CommAbort(c Comm) error {
	b := blocks.Get()
	defer blocks.Put(b)
	return l.check(symCommAbort, b.Call(l.sym[symCommAbort], uintptr(c)))
}

func (l *Lib) commInt(fn int, c Comm) (int, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	if err := l.check(fn, b.Call(l.sym[fn], uintptr(c), b.Word(0))); err != nil {
		return 0, err
	}
	return int(int32(*b.U64(0))), nil
}

// CommCount is ncclCommCount: the number of ranks.
func (l *Lib) CommCount(c Comm) (int, error) { return l.commInt(symCommCount, c) }

// CommCuDevice is ncclCommCuDevice: the CUDA (or, on RCCL, HIP) device
// index of the communicator.
func (l *Lib) CommCuDevice(c Comm) (int, error) { return l.commInt(symCommCuDevice, c) }

// CommUserRank is ncclCommUserRank: the communicator's rank.
func (l *Lib) CommUserRank(c Comm) (int, error) { return l.commInt(symCommUserRank, c) }

// CommGetAsyncError is ncclCommGetAsyncError: the communicator's
// asynchronous state (Success, InProgress for a non-blocking communicator
// still working, or the error that broke it), and an error when the query
// itself failed. It allocates nothing, so it can be polled.
func (l *Lib) CommGetAsyncError(c Comm) (Result, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	if err := l.check(symCommGetAsyncError, b.Call(l.sym[symCommGetAsyncError], uintptr(c), b.Word(0))); err != nil {
		return 0, err
	}
	return Result(uint32(*b.U64(0))), nil
}

// AsyncFunc is the Func of the errors AsyncError returns for a
// communicator's asynchronous failure.
const AsyncFunc = "ncclCommGetAsyncError (asynchronous)"

// AsyncError is CommGetAsyncError as one error: nil while the
// communicator is healthy (or InProgress), the query's own error if it
// failed, else the cached *Error for the asynchronous result, whose Func
// is AsyncFunc.
func (l *Lib) AsyncError(c Comm) error {
	r, err := l.CommGetAsyncError(c)
	if err != nil || r == Success || r == InProgress {
		return err
	}
	return l.errs.Get(numSyms, uint32(r), func() *Error {
		return &Error{Func: AsyncFunc, Result: r, Text: l.ErrorString(r)}
	})
}

// GroupStart is ncclGroupStart. Calls until the matching GroupEnd are
// queued on this OS thread, so lock the goroutine to it.
func (l *Lib) GroupStart() error {
	b := blocks.Get()
	defer blocks.Put(b)
	return l.check(symGroupStart, b.Call(l.sym[symGroupStart]))
}

// GroupEnd is ncclGroupEnd: the outermost one launches the group's calls.
func (l *Lib) GroupEnd() error {
	b := blocks.Get()
	defer blocks.Put(b)
	return l.check(symGroupEnd, b.Call(l.sym[symGroupEnd]))
}

// AllReduce is ncclAllReduce: recv = op over all ranks of send, count
// elements, enqueued on stream. In place when send == recv.
func (l *Lib) AllReduce(send, recv uintptr, count int, dt DataType, op RedOp, c Comm, stream uintptr) error {
	if count < 0 {
		return argError(symAllReduce, "count %d", count)
	}
	b := blocks.Get()
	r := b.Call(l.sym[symAllReduce], send, recv, uintptr(count), uintptr(uint32(dt)), uintptr(uint32(op)), uintptr(c), stream)
	blocks.Put(b)
	return l.check(symAllReduce, r)
}

// AllGather is ncclAllGather: recv holds nranks·sendCount elements, rank
// i's send at offset i·sendCount. In place when send == recv + rank·sendCount.
func (l *Lib) AllGather(send, recv uintptr, sendCount int, dt DataType, c Comm, stream uintptr) error {
	if sendCount < 0 {
		return argError(symAllGather, "count %d", sendCount)
	}
	b := blocks.Get()
	r := b.Call(l.sym[symAllGather], send, recv, uintptr(sendCount), uintptr(uint32(dt)), uintptr(c), stream)
	blocks.Put(b)
	return l.check(symAllGather, r)
}

// Broadcast is ncclBroadcast: every rank's recv gets root's send (send is
// read on root only and may be 0 elsewhere). In place when send == recv.
func (l *Lib) Broadcast(send, recv uintptr, count int, dt DataType, root int, c Comm, stream uintptr) error {
	if count < 0 || root < 0 || root > 1<<30 {
		return argError(symBroadcast, "count %d, root %d", count, root)
	}
	b := blocks.Get()
	r := b.Call(l.sym[symBroadcast], send, recv, uintptr(count), uintptr(uint32(dt)), uintptr(root), uintptr(c), stream)
	blocks.Put(b)
	return l.check(symBroadcast, r)
}

// ReduceScatter is ncclReduceScatter: send holds nranks·recvCount
// elements; rank i's recv gets block i of op over all ranks.
func (l *Lib) ReduceScatter(send, recv uintptr, recvCount int, dt DataType, op RedOp, c Comm, stream uintptr) error {
	if recvCount < 0 {
		return argError(symReduceScatter, "count %d", recvCount)
	}
	b := blocks.Get()
	r := b.Call(l.sym[symReduceScatter], send, recv, uintptr(recvCount), uintptr(uint32(dt)), uintptr(uint32(op)), uintptr(c), stream)
	blocks.Put(b)
	return l.check(symReduceScatter, r)
}
