//go:build linux && (amd64 || arm64)

package kfdsim

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/userkernel"
)

// ErrVMFault is what a user kernel's reference gets (errors.Is) from
// Memory.Bytes for a range not mapped to the GPU: the thunk has raised the
// VM fault already, and the dispatch faults its queue.
var ErrVMFault = errors.New("kfdsim: GPU access to memory not mapped to it")

// UseReferences makes the Executor run the kernels it does not know
// (neither rocsync's nor simblas's) through refs, by name, as the emulator
// runs them (EmulatorOptions.KernelReferences): the kernel's signature is
// read from the metadata note of the code object it was loaded from, its
// arguments unpacked from the kernarg segment, and every range the
// reference touches goes through kfdsim_gpu_access first. A kernel
// without a reference faults its queue, as before. nil removes them.
func (e *Executor) UseReferences(refs *userkernel.References) {
	e.refs.Store(refs)
}

// userPlan reads the signature of a kernel the Executor does not know
// from its loaded code object; unknown is returned when the image cannot
// be read or does not hold the kernel (or holds one no launch can run).
func userPlan(img []byte, name string, unknown *kernelPlan) *kernelPlan {
	ui, err := userkernel.ReadCodeObject(elfFromImage(img))
	if err != nil {
		return unknown
	}
	k, err := ui.Kernel(name)
	if err != nil {
		return &kernelPlan{err: err}
	}
	return &kernelPlan{kind: planUser, user: k, kernarg: uint64(k.ArgsSize)}
}

// gpuMemory is the simulated GPU's view of memory for a reference: every
// range is checked with kfdsim_gpu_access before it is handed out.
type gpuMemory struct {
	e    *Executor
	node uint32
}

func (m gpuMemory) Bytes(ptr, size uint64, write bool) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	if ptr+size < ptr || !m.e.access(m.node, ptr, size, write) {
		return nil, fmt.Errorf("%w: %d bytes at %#x", ErrVMFault, size, ptr)
	}
	return bytesAt(ptr, size), nil
}

// runUser runs a user kernel through its registered reference, which
// gets the geometry the kernel reads: from code object v5 on, from the
// hidden arguments its metadata lists in the kernarg segment
// (userkernel.Signature.ObservedGeometry), from the packet before. A missing
// reference is an unknown kernel (the queue faults); a reference that
// touched unmapped memory is a VM fault; any other error (a geometry the
// kernel cannot take, an argument block it refuses, hidden arguments that
// do not describe the dispatch, errors.Is userkernel.ErrHiddenArgs) is a
// refused launch.
func (e *Executor) runUser(d *dispatch, p *kernelPlan) int {
	refs := e.refs.Load()
	if refs == nil {
		e.complain(p.user.Name, "no references registered (Executor.UseReferences)")
		return execUnknownKernel
	}
	if !e.access(d.node, d.kernarg, p.kernarg, false) {
		return execFault
	}
	if d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0 {
		return execOK // an empty dispatch runs no work-item
	}
	g := userkernel.Geometry{Dims: 3}
	for i := range g.Grid {
		g.Grid[i], g.Workgroup[i] = d.grid[i], uint32(max(d.workgroup[i], 1))
	}
	err := refs.Run(p.user, g, bytesAt(d.kernarg, p.kernarg), gpuMemory{e, d.node})
	switch {
	case err == nil:
		return execOK
	case errors.Is(err, ErrVMFault):
		return execFault
	case errors.Is(err, userkernel.ErrNoReference):
		e.complain(p.user.Name, err.Error())
		return execUnknownKernel
	}
	return e.refuse(p.user.Name, err)
}
