package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Launching a reduction (the contract for the op path):
//
//   - Look the kernel up by Reduction.Symbol(dt) in the executable that
//     holds the elementwise kernels (the same code object; the same PTX
//     module, by Reduction.KernelName, on CUDA).
//   - Shape, err := r.Shape(rows, cols); the workspace needs
//     shape.WorkspaceSize(dt) bytes (0: pass Workspace 0; the kernel never
//     touches it). Allocate it once per device (or per queue), zero it once,
//     and reuse it for every later reduction: no memset per launch. A larger
//     shape needs a larger workspace; grow it (a new zeroed allocation) and
//     keep reusing.
//   - One dispatch: ReduceArgs{Out, In, Workspace, Rows, Cols}.Encode into
//     ReduceKernargSize bytes of kernarg memory; workgroup size
//     ReduceWorkgroupSize x 1 x 1; grid shape.Workgroups() *
//     ReduceWorkgroupSize work-items (any whole number of workgroups gives
//     the same bits); group_segment_size at least the kernel's metadata
//     .group_segment_fixed_size (ReduceGroupSegmentSize(dt)). On CUDA,
//     cuLaunchKernel with shape.Workgroups() blocks of ReduceWorkgroupSize
//     threads and a parameter block over ReduceLayout's offsets.
//   - Declared accesses: In read; Out written; the workspace READ AND
//     WRITTEN. The workspace is tracked like an array with its own sync
//     state: every reduction is its writer, so two reductions on one queue
//     follow queue order (barrier bit), and a reduction on another queue (or
//     HIP stream) must wait for the last one that used it, like any
//     write-after-write; it is never handed to another queue without that
//     dependency. A debug option may read it back before a launch and call
//     CheckZeroed (nvFuser's checkZeroed); the emulator and the simulated
//     driver refuse a dirty workspace themselves (ReduceBytes).
//
// Reduction is a sum reduction of a row-major rows x cols matrix, computed
// by the multi-workgroup kernels of src/reduce.cl. They combine per-slice
// partials through a workspace that must be zero when a launch starts and
// that they leave zero when it ends (nvFuser #1829: a zeroed arena reused
// without a memset per launch).
type Reduction uint8

const (
	SumAll  Reduction = iota // out[0] = sum of all rows*cols elements
	SumRows                  // out[i] = sum_j in[i][j]: rows outputs
	SumCols                  // out[j] = sum_i in[i][j]: cols outputs

	numReductions
)

var reductionNames = [numReductions]string{SumAll: "sum_all", SumRows: "sum_rows", SumCols: "sum_cols"}

// AllReductions returns every Reduction, in order.
func AllReductions() []Reduction { return []Reduction{SumAll, SumRows, SumCols} }

// Valid reports whether r is one of the defined reductions.
func (r Reduction) Valid() bool { return r < numReductions }

// String returns the name used in kernel names, e.g. "sum_rows".
func (r Reduction) String() string {
	if r.Valid() {
		return reductionNames[r]
	}
	return "Reduction(" + strconv.Itoa(int(r)) + ")"
}

// KernelName returns the kernel's function name (also the PTX entry), e.g.
// "rocsync_sum_rows_f32".
func (r Reduction) KernelName(dt DType) string {
	return kernelPrefix + r.String() + "_" + dt.Suffix()
}

// Symbol returns the kernel descriptor symbol, e.g. "rocsync_sum_rows_f32.kd".
func (r Reduction) Symbol(dt DType) string { return r.KernelName(dt) + descriptorSuffix }

// ParseReductionSymbol is the inverse of Symbol and KernelName.
func ParseReductionSymbol(sym string) (Reduction, DType, bool) {
	redName, dt, ok := splitSymbol(sym)
	if !ok {
		return 0, 0, false
	}
	for r, name := range reductionNames {
		if name == redName {
			return Reduction(r), dt, true
		}
	}
	return 0, 0, false
}

// The kernarg layout of every reduction kernel,
//
//	kernel void rocsync_sum_<all|rows|cols>_<dt>(global T* out,
//	    global const T* in, global uint* workspace, ulong rows, ulong cols)
//
// checked against the metadata of every embedded code object and against
// the PTX parameters by the tests.
const (
	ReduceOffsetOut       = 0  // global T*: the outputs (Reduction.Outputs of them)
	ReduceOffsetIn        = 8  // global const T*: the rows x cols input, row-major
	ReduceOffsetWorkspace = 16 // global uint*: the zeroed workspace (0 when ReduceWorkspaceSize is 0)
	ReduceOffsetRows      = 24 // ulong
	ReduceOffsetCols      = 32 // ulong

	// ReduceKernargSize is the kernarg segment size; no hidden arguments.
	ReduceKernargSize = 40

	// ReduceWorkgroupSize is the only workgroup size the kernels run with
	// (reqd_work_group_size in the source, .reqd_workgroup_size in the
	// metadata); the grid must be a whole number of such workgroups.
	ReduceWorkgroupSize = 256

	// ReduceChunk and ReduceMaxSlices fix how an output's K elements are
	// split into slices: S = clamp(ceil(K/ReduceChunk), 1, ReduceMaxSlices).
	// They are RS_CHUNK and RS_MAX_SLICES in src/reduce.cl.
	ReduceChunk     = 4096
	ReduceMaxSlices = 256

	// ReduceMaxWorkgroups bounds ReduceWorkgroups: enough to fill any GPU
	// built today; the kernels loop over the units beyond it.
	ReduceMaxWorkgroups = 4096
)

// ReduceLayout lists the reduction kernels' arguments in order. No argument
// is DTypeSized.
var ReduceLayout = []ArgSpec{
	{Name: "out", Offset: ReduceOffsetOut, Kind: KindGlobalBuffer},
	{Name: "in", Offset: ReduceOffsetIn, Kind: KindGlobalBuffer},
	{Name: "workspace", Offset: ReduceOffsetWorkspace, Kind: KindGlobalBuffer},
	{Name: "rows", Offset: ReduceOffsetRows, Kind: KindByValue},
	{Name: "cols", Offset: ReduceOffsetCols, Kind: KindByValue},
}

// ReduceGroupSegmentSize is the static LDS of a reduction kernel of element
// type dt, as the metadata records it (.group_segment_fixed_size): 256
// lane sums and a 4-byte flag, which the compiler pads to the element's
// alignment. A dispatch packet's group_segment_size must be at least this
// (the emulator refuses less; the hardware would overrun the allocation).
func ReduceGroupSegmentSize(dt DType) uint32 {
	return uint32(ReduceWorkgroupSize*dt.Size() + max(4, dt.Size()))
}

// ReduceArgs are the arguments of one reduction launch; Out, In and
// Workspace are device addresses.
type ReduceArgs struct {
	Out, In, Workspace uint64
	Rows, Cols         uint64
}

// Encode writes the kernarg segment into dst[:ReduceKernargSize]. It panics
// if dst is short. It does not allocate.
func (a *ReduceArgs) Encode(dst []byte) {
	dst = dst[:ReduceKernargSize:ReduceKernargSize]
	le := binary.LittleEndian
	le.PutUint64(dst[ReduceOffsetOut:], a.Out)
	le.PutUint64(dst[ReduceOffsetIn:], a.In)
	le.PutUint64(dst[ReduceOffsetWorkspace:], a.Workspace)
	le.PutUint64(dst[ReduceOffsetRows:], a.Rows)
	le.PutUint64(dst[ReduceOffsetCols:], a.Cols)
}

// DecodeReduceArgs reads a kernarg segment written by Encode. It panics if
// src is short.
func DecodeReduceArgs(src []byte) ReduceArgs {
	src = src[:ReduceKernargSize:ReduceKernargSize]
	le := binary.LittleEndian
	return ReduceArgs{
		Out: le.Uint64(src[ReduceOffsetOut:]), In: le.Uint64(src[ReduceOffsetIn:]),
		Workspace: le.Uint64(src[ReduceOffsetWorkspace:]),
		Rows:      le.Uint64(src[ReduceOffsetRows:]), Cols: le.Uint64(src[ReduceOffsetCols:]),
	}
}

// ReduceShape is how a reduction of a rows x cols matrix is split: Outputs
// outputs, each the sum of Length elements, cut into Slices slices of
// SliceLen elements (the last may be shorter).
type ReduceShape struct {
	Outputs, Length, Slices, SliceLen uint64
}

// ErrReduceShape is matched (errors.Is) by the error of a shape the kernels
// cannot index: rows*cols, or a byte size, overflowing 64 bits.
var ErrReduceShape = errors.New("kernels: reduction shape too large")

// Shape computes the split of a rows x cols reduction, exactly as the
// kernels do.
func (r Reduction) Shape(rows, cols uint64) (ReduceShape, error) {
	if !r.Valid() {
		return ReduceShape{}, fmt.Errorf("kernels: invalid %v", r)
	}
	if cols != 0 && rows > math.MaxUint64/cols/8 {
		return ReduceShape{}, fmt.Errorf("%w: %d x %d", ErrReduceShape, rows, cols)
	}
	var s ReduceShape
	switch r {
	case SumAll:
		s.Outputs, s.Length = 1, rows*cols
	case SumRows:
		s.Outputs, s.Length = rows, cols
	case SumCols:
		s.Outputs, s.Length = cols, rows
	}
	s.Slices = min(max((s.Length+ReduceChunk-1)/ReduceChunk, 1), ReduceMaxSlices)
	s.SliceLen = (s.Length + s.Slices - 1) / s.Slices
	return s, nil
}

// Units is the number of (output, slice) work units.
func (s ReduceShape) Units() uint64 { return s.Outputs * s.Slices }

// semaphoreBytes is the size of the semaphore block, padded so that the
// partials after it are 8-byte aligned.
func (s ReduceShape) semaphoreBytes() uint64 { return (4*s.Outputs + 7) &^ 7 }

// WorkspaceSize is the bytes of zeroed workspace a launch needs: none when
// every output is a single slice; otherwise a uint32 semaphore per output,
// padded to 8 bytes, then Outputs*Slices partials of dt.
func (s ReduceShape) WorkspaceSize(dt DType) uint64 {
	if s.Slices <= 1 || s.Outputs == 0 {
		return 0
	}
	return s.semaphoreBytes() + s.Outputs*s.Slices*uint64(dt.Size())
}

// ReduceWorkspaceSize is Shape(rows, cols).WorkspaceSize(dt).
func ReduceWorkspaceSize(r Reduction, dt DType, rows, cols uint64) (uint64, error) {
	s, err := r.Shape(rows, cols)
	if err != nil {
		return 0, err
	}
	return s.WorkspaceSize(dt), nil
}

// ReduceWorkgroups is the number of workgroups to launch (grid =
// ReduceWorkgroups * ReduceWorkgroupSize work-items): one per unit, at
// least one, at most ReduceMaxWorkgroups. The result does not depend on it.
func (s ReduceShape) Workgroups() uint32 {
	return uint32(min(max(s.Units(), 1), ReduceMaxWorkgroups))
}

// ErrWorkspaceNotZero is matched (errors.Is) by *WorkspaceNotZeroError.
var ErrWorkspaceNotZero = errors.New("kernels: reduction workspace is not zero")

// WorkspaceNotZeroError reports a workspace that held a non-zero byte
// where a reduction needed zero: a launch left it dirty, or two launches
// used it without being ordered (nvFuser's checkZeroed).
type WorkspaceNotZeroError struct {
	Offset uint64 // the first non-zero byte
	Value  byte
	Size   uint64 // the bytes checked
}

func (e *WorkspaceNotZeroError) Error() string {
	return fmt.Sprintf("kernels: reduction workspace is not zero: byte %d of %d is %#x (left dirty, or used by two unordered reductions)",
		e.Offset, e.Size, e.Value)
}

// Is makes errors.Is(err, ErrWorkspaceNotZero) true.
func (e *WorkspaceNotZeroError) Is(target error) bool { return target == ErrWorkspaceNotZero }

// CheckZeroed returns a *WorkspaceNotZeroError naming the first non-zero
// byte of ws, or nil. It is the core of the debug option that checks a
// reduction workspace before each use (read back the workspace, then call
// it). It does not allocate unless it fails.
func CheckZeroed(ws []byte) error {
	i := 0
	// Eight bytes at a time; the tail byte by byte.
	for ; i+8 <= len(ws); i += 8 {
		if binary.LittleEndian.Uint64(ws[i:]) != 0 {
			break
		}
	}
	for ; i < len(ws); i++ {
		if ws[i] != 0 {
			return &WorkspaceNotZeroError{Offset: uint64(i), Value: ws[i], Size: uint64(len(ws))}
		}
	}
	return nil
}

// ErrReduceBuffer is matched (errors.Is) by the error of a buffer too short
// for the shape.
var ErrReduceBuffer = errors.New("kernels: reduction buffer too short")

// ReduceBytes computes reduction r of the rows x cols row-major matrix in
// (little-endian dt) into out, with the kernels' workspace protocol and
// their combination order, so its bits are the GPU's. It first checks that
// the workspace's ReduceWorkspaceSize bytes are zero (a
// *WorkspaceNotZeroError otherwise, with out untouched), then runs the
// protocol in ws (partials stored, semaphores counted up, the last arrival
// combining and clearing), and leaves the workspace zero. in must hold
// rows*cols elements, out Outputs elements, ws WorkspaceSize bytes (an
// error matching ErrReduceBuffer otherwise). It does not allocate unless it
// fails.
func ReduceBytes(r Reduction, dt DType, out, in, ws []byte, rows, cols uint64) error {
	s, err := r.Shape(rows, cols)
	if err != nil {
		return err
	}
	size := uint64(dt.Size())
	if size == 0 {
		return fmt.Errorf("kernels: ReduceBytes: invalid %v", dt)
	}
	wsSize := s.WorkspaceSize(dt)
	switch {
	case uint64(len(in)) < rows*cols*size:
		return fmt.Errorf("%w: in has %d bytes, %d x %d %v need %d", ErrReduceBuffer, len(in), rows, cols, dt, rows*cols*size)
	case uint64(len(out)) < s.Outputs*size:
		return fmt.Errorf("%w: out has %d bytes, %d outputs need %d", ErrReduceBuffer, len(out), s.Outputs, s.Outputs*size)
	case uint64(len(ws)) < wsSize:
		return fmt.Errorf("%w: workspace has %d bytes, %v of %d x %d needs %d", ErrReduceBuffer, len(ws), r, rows, cols, wsSize)
	}
	ws = ws[:wsSize]
	if err := CheckZeroed(ws); err != nil {
		return err
	}
	in = in[:rows*cols*size]
	// Aligned input on a little-endian host is read in place (see
	// RefBytes); otherwise element by element.
	fast := hostLittleEndian && aligned(in, uintptr(size))
	if dt == F32 {
		var view []float32
		if fast {
			view = asF32(in)
		}
		reduceBytes(r, s, out, in, view, ws, cols, loadF32, storeF32)
	} else {
		var view []float64
		if fast {
			view = asF64(in)
		}
		reduceBytes(r, s, out, in, view, ws, cols, loadF64, storeF64)
	}
	return nil
}

func loadF32(b []byte, i uint64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}
func storeF32(b []byte, i uint64, v float32) {
	binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
}
func loadF64(b []byte, i uint64) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
}
func storeF64(b []byte, i uint64, v float64) {
	binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
}

// reduceBytes runs the units in order; the order the GPU runs them in does
// not change any value, since each partial has its own slot and the
// combination is in index order.
func reduceBytes[T float32 | float64](r Reduction, s ReduceShape, out, in []byte, view []T, ws []byte, cols uint64,
	load func([]byte, uint64) T, store func([]byte, uint64, T)) {
	var outer, inner uint64 // element t of output j is in[j*outer + t*inner]
	switch r {
	case SumAll:
		outer, inner = 0, 1
	case SumRows:
		outer, inner = cols, 1
	case SumCols:
		outer, inner = 1, cols
	}
	le := binary.LittleEndian
	partials := ws
	if len(ws) > 0 {
		partials = ws[s.semaphoreBytes():]
	}
	var lanes [ReduceWorkgroupSize]T
	for j := uint64(0); j < s.Outputs; j++ {
		base := j * outer
		for sl := uint64(0); sl < s.Slices; sl++ {
			lo := sl * s.SliceLen
			hi := min(lo+s.SliceLen, s.Length)
			active := int(min(hi-lo, ReduceWorkgroupSize))
			for l := range active {
				var acc T
				if view != nil {
					for t := lo + uint64(l); t < hi; t += ReduceWorkgroupSize {
						acc = acc + view[base+t*inner]
					}
				} else {
					for t := lo + uint64(l); t < hi; t += ReduceWorkgroupSize {
						acc = acc + load(in, base+t*inner)
					}
				}
				lanes[l] = acc
			}
			v := laneTree(&lanes, active)
			if s.Slices == 1 {
				store(out, j, v)
				continue
			}
			// Store the partial, then arrive at the semaphore.
			store(partials, j*s.Slices+sl, v)
			sem := le.Uint32(ws[4*j:]) + 1
			le.PutUint32(ws[4*j:], sem)
			if uint64(sem) != s.Slices {
				continue
			}
			// The last arrival: combine the partials in index order and
			// clear what it used.
			for l := range s.Slices {
				lanes[l] = load(partials, j*s.Slices+l)
				store(partials, j*s.Slices+l, 0)
			}
			store(out, j, laneTree(&lanes, int(s.Slices)))
			le.PutUint32(ws[4*j:], 0)
		}
	}
}

// laneTree combines the 256 lane values as the kernels' RS_TREE does,
// given that only the first active lanes can be non-zero: the kernels'
// other lanes hold +0, and adding +0 changes no value here (no lane sum is
// -0, since each starts from +0, and a sum of two values that are not -0
// is not -0; NaN payloads aside), so the steps whose upper operand is
// such a lane are skipped. Only v[:active] is read. TestLaneTreeSkip
// checks this against the full tree.
func laneTree[T float32 | float64](v *[ReduceWorkgroupSize]T, active int) T {
	if active <= 0 {
		return 0
	}
	for st := ReduceWorkgroupSize / 2; st > 0; st >>= 1 {
		for l := 0; l < st && l+st < active; l++ {
			v[l] = v[l] + v[l+st]
		}
		active = min(active, st)
	}
	return v[0]
}

// laneTreeFull is RS_TREE step for step, over all 256 lanes.
func laneTreeFull[T float32 | float64](v *[ReduceWorkgroupSize]T) T {
	for st := ReduceWorkgroupSize / 2; st > 0; st >>= 1 {
		for l := 0; l < st; l++ {
			v[l] = v[l] + v[l+st]
		}
	}
	return v[0]
}

// RefReduceF32 computes reduction r of a rows x cols float32 matrix into
// out (Outputs elements) in the kernels' order, without a workspace. It is
// the reference for tests. It panics if a slice is short.
func RefReduceF32(r Reduction, out, in []float32, rows, cols uint64) {
	refReduce(r, out, in, rows, cols)
}

// RefReduceF64 is RefReduceF32 for float64.
func RefReduceF64(r Reduction, out, in []float64, rows, cols uint64) {
	refReduce(r, out, in, rows, cols)
}

func refReduce[T float32 | float64](r Reduction, out, in []T, rows, cols uint64) {
	s, err := r.Shape(rows, cols)
	if err != nil {
		panic(err)
	}
	in = in[:rows*cols]
	out = out[:s.Outputs]
	var outer, inner uint64
	switch r {
	case SumAll:
		outer, inner = 0, 1
	case SumRows:
		outer, inner = cols, 1
	case SumCols:
		outer, inner = 1, cols
	}
	var lanes, parts [ReduceWorkgroupSize]T
	for j := range out {
		base := uint64(j) * outer
		for sl := uint64(0); sl < s.Slices; sl++ {
			lo := sl * s.SliceLen
			hi := min(lo+s.SliceLen, s.Length)
			active := int(min(hi-lo, ReduceWorkgroupSize))
			for l := range active {
				var acc T
				for t := lo + uint64(l); t < hi; t += ReduceWorkgroupSize {
					acc = acc + in[base+t*inner]
				}
				lanes[l] = acc
			}
			parts[sl] = laneTree(&lanes, active)
		}
		if s.Slices == 1 {
			out[j] = parts[0]
			continue
		}
		out[j] = laneTree(&parts, int(s.Slices))
	}
}
