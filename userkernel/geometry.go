package userkernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
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
func (k *Signature) checkGeometry(g *Geometry) error {
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

// ErrHiddenArgs is matched (errors.Is) by every *HiddenArgError.
var ErrHiddenArgs = errors.New("userkernel: hidden kernel arguments do not describe the dispatch")

// HiddenArgError is a hidden argument in a kernel's argument block that
// does not describe the dispatch it came with.
type HiddenArgError struct {
	Kernel    string
	ValueKind string // the metadata's .value_kind, e.g. "hidden_group_size_x"
	Offset    uint32
	Got, Want uint64
}

func (e *HiddenArgError) Error() string {
	return fmt.Sprintf("userkernel: kernel %s: %s (kernarg offset %d) is %d, the dispatch implies %d",
		e.Kernel, e.ValueKind, e.Offset, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrHiddenArgs) true.
func (e *HiddenArgError) Is(target error) bool { return target == ErrHiddenArgs }

// ObservedGeometry returns a dispatch's geometry as the kernel itself reads
// it, for a CPU model of a GPU that runs the kernel through its reference.
// A kernel reads its workgroup and grid sizes from the dispatch packet
// (code object v4 and earlier, through the dispatch pointer) or, from code
// object v5, from the hidden arguments after its explicit ones (LLVM
// AMDGPUUsage, "Code Object V5 Metadata" and "Implicit Kernel Arguments":
// hidden_block_count_x/y/z, hidden_group_size_x/y/z, hidden_remainder_x/y/z,
// hidden_grid_dims; ROCm-Device-Libs' ockl computes blockDim and gridDim
// from them). So every hidden argument the metadata lists is read from
// block: the sizes from those the kernel has, the packet for the rest.
//
// A GPU runs the packet's work-items whatever the hidden arguments say, and
// a kernel that reads wrong ones computes wrong indices; a model cannot run
// that, so a listed argument that does not describe the dispatch is an
// error matching ErrHiddenArgs instead: a block count, group size or
// remainder other than the packet's (clr fills grid/workgroup, workgroup
// and grid%workgroup per dimension, VirtualGPU::submitKernelInternal in
// rocclr/device/rocm/rocvirtual.cpp), grid dimensions beyond which the
// packet is not 1, or a global offset other than 0 (hipModuleLaunchKernel's
// NDRange has none, nor has any rocsync launch). packet is normalized as a
// launch is; block must hold ArgsSize bytes.
func (k *Signature) ObservedGeometry(packet Geometry, block []byte) (Geometry, error) {
	if err := k.checkGeometry(&packet); err != nil {
		return packet, err
	}
	if uint64(len(block)) < uint64(k.ArgsSize) {
		return packet, k.argError(nil, ArgBlock, strconv.Itoa(int(k.ArgsSize))+" bytes", strconv.Itoa(len(block))+" bytes")
	}
	g := packet
	le := binary.LittleEndian
	for _, h := range k.hidden {
		var v uint64
		switch h.size {
		case 2:
			v = uint64(le.Uint16(block[h.offset:]))
		case 4:
			v = uint64(le.Uint32(block[h.offset:]))
		default:
			v = le.Uint64(block[h.offset:])
		}
		d := h.dim
		var want uint64
		switch h.fill {
		case hiddenZero:
			continue
		case hiddenGlobalOffset:
			want = 0
		case hiddenBlockCount:
			want = uint64(packet.Grid[d] / packet.Workgroup[d])
		case hiddenGroupSize:
			want = uint64(packet.Workgroup[d])
			g.Workgroup[d] = uint32(v)
		case hiddenRemainder:
			want = uint64(packet.Grid[d] % packet.Workgroup[d])
		case hiddenGridDims:
			if v < 1 || v > 3 {
				return packet, &HiddenArgError{Kernel: k.Name, ValueKind: h.kind, Offset: h.offset, Got: v, Want: uint64(packet.Dims)}
			}
			for i := int(v); i < 3; i++ {
				if packet.Grid[i] != 1 || packet.Workgroup[i] != 1 {
					return packet, &HiddenArgError{Kernel: k.Name, ValueKind: h.kind, Offset: h.offset, Got: v, Want: uint64(i + 1)}
				}
			}
			g.Dims = int(v)
			continue
		}
		if v != want {
			return packet, &HiddenArgError{Kernel: k.Name, ValueKind: h.kind, Offset: h.offset, Got: v, Want: want}
		}
	}
	return g, nil
}
