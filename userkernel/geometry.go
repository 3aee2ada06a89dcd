package userkernel

import (
	"errors"
	"fmt"
)

// Geometry is a launch's shape in work-items, as in OpenCL's NDRange and an
// AQL dispatch packet: Grid is the global size per dimension, Workgroup the
// local size. Dimensions beyond Dims must be 0 or 1 (taken as 1).
type Geometry struct {
	Dims      int
	Grid      [3]uint32
	Workgroup [3]uint32
}

// Grid1D returns a one-dimensional geometry of n work-items in workgroups
// of wg.
func Grid1D(n, wg uint32) Geometry {
	return Geometry{Dims: 1, Grid: [3]uint32{n, 1, 1}, Workgroup: [3]uint32{wg, 1, 1}}
}

// Grid2D returns a two-dimensional geometry.
func Grid2D(nx, ny, wgx, wgy uint32) Geometry {
	return Geometry{Dims: 2, Grid: [3]uint32{nx, ny, 1}, Workgroup: [3]uint32{wgx, wgy, 1}}
}

// Grid3D returns a three-dimensional geometry.
func Grid3D(grid, wg [3]uint32) Geometry { return Geometry{Dims: 3, Grid: grid, Workgroup: wg} }

// ErrGeometry is matched (errors.Is) by every *GeometryError.
var ErrGeometry = errors.New("userkernel: launch geometry does not suit the kernel")

// GeometryError is a launch geometry the kernel or the GPU cannot run.
type GeometryError struct {
	Kernel   string
	Geometry Geometry
	Reason   string
}

func (e *GeometryError) Error() string {
	g := e.Geometry
	return fmt.Sprintf("userkernel: kernel %s: launch geometry (dims %d, grid %v, workgroup %v): %s",
		e.Kernel, g.Dims, g.Grid, g.Workgroup, e.Reason)
}

// Is makes errors.Is(err, ErrGeometry) true.
func (e *GeometryError) Is(target error) bool { return target == ErrGeometry }

// cudaMaxGridYZ is CUDA's limit on blocks in the y and z dimensions.
const cudaMaxGridYZ = 65535

// checkGeometry validates g and normalizes its unused dimensions to 1.
func (k *Kernel) checkGeometry(g *Geometry) error {
	fail := func(format string, args ...any) error {
		return &GeometryError{Kernel: k.Name, Geometry: *g, Reason: fmt.Sprintf(format, args...)}
	}
	if g.Dims < 1 || g.Dims > 3 {
		return fail("dims must be 1, 2 or 3")
	}
	items := uint64(1)
	for i := range 3 {
		if i >= g.Dims {
			if g.Grid[i] > 1 || g.Workgroup[i] > 1 {
				return fail("dimension %d is beyond dims but not 1", i)
			}
			g.Grid[i], g.Workgroup[i] = 1, 1
		}
		if g.Grid[i] == 0 || g.Workgroup[i] == 0 {
			return fail("dimension %d is empty", i)
		}
		items *= uint64(g.Workgroup[i])
	}
	if items > uint64(k.MaxWorkgroupSize) {
		return fail("a workgroup of %d work-items exceeds the kernel's maximum of %d", items, k.MaxWorkgroupSize)
	}
	if k.ReqdWorkgroupSize != [3]uint32{} && g.Workgroup != k.ReqdWorkgroupSize {
		return fail("the kernel requires workgroup %v", k.ReqdWorkgroupSize)
	}
	if k.Target.Family == NVIDIA {
		for i := range 3 {
			if g.Grid[i]%g.Workgroup[i] != 0 {
				return fail("CUDA runs whole blocks: grid dimension %d (%d) is not a multiple of the workgroup (%d)", i, g.Grid[i], g.Workgroup[i])
			}
		}
		if g.Grid[1]/g.Workgroup[1] > cudaMaxGridYZ || g.Grid[2]/g.Workgroup[2] > cudaMaxGridYZ {
			return fail("CUDA allows at most %d blocks in y and z", cudaMaxGridYZ)
		}
	}
	return nil
}
