// Package collective adapts an NCCL-shaped library (NCCL, RCCL, the
// emulator's model of RCCL) to driver.Collectives, and loads the real
// libraries once per process. The ROCm and CUDA drivers build their
// collectives from it; it refuses to know which family a device is of,
// which its callers say through Ordinal and InitRank.
package collective

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/nccl"
)

// Lib is a driver.Collectives over an NCCL-shaped library.
type Lib struct {
	// LibName names the library in messages.
	LibName string
	C       nccl.Collectives
	// UniqueID makes a new communicator's id.
	UniqueID func() (nccl.UniqueID, error)
	// Ordinal is the library's index of a device (HIP's, CUDA's).
	Ordinal func(d driver.Device) int
	// InitRank joins one rank on d (ncclCommInitRank with d current).
	InitRank func(d driver.Device, nranks int, id nccl.UniqueID, rank int) (nccl.Comm, error)
	// OnDevice runs fn on a locked OS thread with d current on it (CUDA:
	// its primary context; HIP: hipSetDevice); nil: on a locked thread,
	// with no device made current (a library that needs none).
	OnDevice func(d driver.Device, fn func() error) error
}

var _ driver.Collectives = (*Lib)(nil)

// Name implements driver.Collectives.
func (l *Lib) Name() string { return l.LibName }

// NewUniqueID implements driver.Collectives.
func (l *Lib) NewUniqueID() (driver.UniqueID, error) { return l.UniqueID() }

// CommInitAll implements driver.Collectives.
func (l *Lib) CommInitAll(devs []driver.Device) ([]driver.Comm, error) {
	ords := make([]int, len(devs))
	for i, d := range devs {
		ords[i] = l.Ordinal(d)
	}
	comms, err := l.C.CommInitAll(ords)
	if err != nil {
		return nil, err
	}
	out := make([]driver.Comm, len(comms))
	for i, c := range comms {
		out[i] = driver.Comm(c)
	}
	return out, nil
}

// CommInitRank implements driver.Collectives.
func (l *Lib) CommInitRank(d driver.Device, nranks int, id driver.UniqueID, rank int) (driver.Comm, error) {
	c, err := l.InitRank(d, nranks, id, rank)
	return driver.Comm(c), err
}

// CommDestroy implements driver.Collectives.
func (l *Lib) CommDestroy(c driver.Comm) error { return l.C.CommDestroy(nccl.Comm(c)) }

// CommAbort implements driver.Collectives.
func (l *Lib) CommAbort(c driver.Comm) error { return l.C.CommAbort(nccl.Comm(c)) }

// Group implements driver.Collectives. NCCL keeps its group state per
// thread, so the thread is locked from ncclGroupStart to ncclGroupEnd.
// Making dev current first is all NCCL asks of a thread that drives
// several devices: "there is no need to set the CUDA device before every
// NCCL communication call within a group" (NCCL's Group Calls), and
// ncclGroupEnd launches each communicator's work on its own device,
// restoring the thread's current device after. RCCL keeps these
// semantics (rccl.h, "Group semantics": ncclGroupEnd "only guarantees
// that the operations are enqueued on the streams"; "operations on the
// HIP stream depending on the RCCL operations need to be called after
// ncclGroupEnd").
// With dev current, what it restores is a device of this communicator,
// not device 0, whose context the process may not have made.
func (l *Lib) Group(dev driver.Device, body func() error) error {
	group := func() error {
		if err := l.C.GroupStart(); err != nil {
			return err
		}
		err := body()
		return errors.Join(err, l.C.GroupEnd())
	}
	if l.OnDevice != nil {
		return l.OnDevice(dev, group)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return group()
}

// AllReduce implements driver.Collectives.
func (l *Lib) AllReduce(send, recv driver.DevicePtr, count int, dt kernels.DType, op driver.ReduceOp, c driver.Comm, stream uintptr) error {
	t, err := dataType(dt)
	if err != nil {
		return err
	}
	return l.C.AllReduce(uintptr(send), uintptr(recv), count, t, nccl.RedOp(op), nccl.Comm(c), stream)
}

// AllGather implements driver.Collectives.
func (l *Lib) AllGather(send, recv driver.DevicePtr, sendCount int, dt kernels.DType, c driver.Comm, stream uintptr) error {
	t, err := dataType(dt)
	if err != nil {
		return err
	}
	return l.C.AllGather(uintptr(send), uintptr(recv), sendCount, t, nccl.Comm(c), stream)
}

// Broadcast implements driver.Collectives.
func (l *Lib) Broadcast(send, recv driver.DevicePtr, count int, dt kernels.DType, root int, c driver.Comm, stream uintptr) error {
	t, err := dataType(dt)
	if err != nil {
		return err
	}
	return l.C.Broadcast(uintptr(send), uintptr(recv), count, t, root, nccl.Comm(c), stream)
}

// dataType is ncclDataType_t of the element types collectives take.
func dataType(dt kernels.DType) (nccl.DataType, error) {
	switch dt {
	case kernels.F32:
		return nccl.Float32, nil
	case kernels.F64:
		return nccl.Float64, nil
	}
	return 0, fmt.Errorf("collective: element type %v: collectives take float32 and float64", dt)
}

// The real libraries, each loaded at its first use and kept.
var libs struct {
	mu         sync.Mutex
	nccl, rccl *nccl.Lib
}

// Load returns the process's NCCL or RCCL, loading it at its first use.
func Load(flavor nccl.Flavor) (*nccl.Lib, error) {
	libs.mu.Lock()
	defer libs.mu.Unlock()
	p, open := &libs.nccl, nccl.OpenNCCL
	if flavor == nccl.RCCL {
		p, open = &libs.rccl, nccl.OpenRCCL
	}
	if *p != nil {
		return *p, nil
	}
	l, err := open() // after DisableNVLS: NCCL_NVLS_ENABLE=0, or a refusal
	if err != nil {
		return nil, err // not kept: a library installed later is found
	}
	*p = l
	return l, nil
}
