package emu

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/hiptest"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// The emulated HIP takes a launch's explicit arguments and fills the hidden
// ones itself, as clr does: a v5 kernel without parameters launches with
// no argument bytes and its reference sees the geometry from the hidden
// arguments HIP wrote; argument bytes for it are hipErrorLaunchOutOfResources
// and none for a kernel with parameters hipErrorInvalidValue (clr
// hip_module.cpp, ihipLaunchKernelCommand).
func TestEmulatedHIPFillsHiddenArgs(t *testing.T) {
	co, err := hiptest.Build("gfx90a", kernels.CodeObjectV5)
	if errors.Is(err, hiptest.ErrNoToolchain) {
		t.Skip(err)
	}
	require.NoError(t, err)
	var seen []userkernel.Geometry
	refs := &userkernel.References{}
	require.NoError(t, refs.Register("noargs", hiptest.NoArgs(func(g userkernel.Geometry) { seen = append(seen, g) })))
	m := New(Options{References: refs})
	h := m.HIP()
	mod, err := h.ModuleLoadData(0, co)
	require.NoError(t, err)
	noargs, err := h.ModuleGetFunction(mod, "noargs")
	require.NoError(t, err)
	scale, err := h.ModuleGetFunction(mod, "scale")
	require.NoError(t, err)
	s, err := h.StreamCreate(0, 0)
	require.NoError(t, err)

	grid, block := [3]uint32{3, 1, 1}, [3]uint32{64, 1, 1}
	err = h.ModuleLaunchKernel(noargs, grid, block, 0, s, make([]byte, 256))
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorLaunchOutOfResources})
	err = h.ModuleLaunchKernel(scale, grid, block, 0, s, nil)
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidValue})
	require.NoError(t, h.ModuleLaunchKernel(noargs, grid, block, 0, s, nil))
	require.NoError(t, h.StreamSynchronize(s))
	require.Equal(t, []userkernel.Geometry{{Dims: 3, Grid: [3]uint32{192, 1, 1}, Workgroup: [3]uint32{64, 1, 1}}}, seen)
}
