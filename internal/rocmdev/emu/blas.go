package emu

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/rocblas"
)

// BLAS is the emulated rocBLAS. It implements rocblas.Library; gemms run
// on the stream the handle is bound to, column-major like the real library.
type BLAS struct {
	m       *Machine
	mu      sync.Mutex
	handles map[rocblas.Handle]*blasHandle
	next    uintptr
}

var _ rocblas.Library = (*BLAS)(nil)

type blasHandle struct {
	dev    int
	hipDev int // the HIP device number it was made on
	stream hip.Stream
	mode   rocblas.PointerMode
	// The workspace: rocBLAS's own (managed: grown by the functions that
	// need more, freeing the old one) unless the user set one
	// (rocblas_set_workspace), which is never grown.
	ws     hip.DevicePtr
	wsSize uint64
	user   bool
}

var _ rocblas.WorkspaceSetter = (*BLAS)(nil)

// SetWorkspace is rocblas_set_workspace: addr and size become the
// handle's workspace (freeing a managed one), or with 0 and 0 the handle
// goes back to a managed workspace.
func (b *BLAS) SetWorkspace(h rocblas.Handle, addr hip.DevicePtr, size uint64) error {
	x, err := b.handle("rocblas_set_workspace", h)
	if err != nil {
		return err
	}
	if (addr == 0) != (size == 0) {
		return b.err("rocblas_set_workspace", rocblas.StatusInvalidPointer)
	}
	b.mu.Lock()
	old, managed := x.ws, !x.user
	x.ws, x.wsSize, x.user = addr, size, addr != 0
	b.mu.Unlock()
	if managed && old != 0 {
		return b.freeManaged(x, old)
	}
	return nil
}

// freeManaged frees a managed workspace: hipFree first synchronizes the
// device's streams (clr hip_memory.cpp, ihipFree), the handle's among
// them, unless it captures (nothing of it runs).
func (b *BLAS) freeManaged(x *blasHandle, ws hip.DevicePtr) error {
	b.mu.Lock()
	stream := x.stream
	b.mu.Unlock()
	if s, err := b.m.hip.stream("hipFree", stream); err == nil {
		s.mu.Lock()
		capturing := s.capture != nil
		s.mu.Unlock()
		if !capturing {
			_ = s.synchronize()
		}
	}
	return b.m.hip.Free(x.hipDev, ws)
}

// gemmWorkspace is the workspace the emulated gemm needs: a split-K
// partial-sum buffer of C's size per split, used when K is at least 8
// times M and N (Tensile's GSU solutions need workspace of this kind);
// none otherwise.
func gemmWorkspace(m, n, k int32, es uint64) uint64 {
	splits := int64(k) / (4 * int64(max(m, n, 1)))
	if splits < 2 {
		return 0
	}
	return uint64(m) * uint64(n) * es * uint64(splits)
}

// workspace returns the handle's workspace for a function needing need
// bytes, growing a managed one as rocBLAS does: the old one is freed and
// a bigger one allocated, after the stream has finished with it (the
// reallocation synchronizes, rocBLAS documentation, "Device memory
// allocation in rocBLAS"), except inside a capture, where nothing runs:
// there the graph keeps the old address, freed. A user's workspace that is
// too small is rocblas_status_memory_error.
func (b *BLAS) workspace(fn string, x *blasHandle, need uint64) (hip.DevicePtr, error) {
	if need == 0 {
		return 0, nil
	}
	b.mu.Lock()
	ws, size, user := x.ws, x.wsSize, x.user
	b.mu.Unlock()
	if size >= need {
		return ws, nil
	}
	if user {
		return 0, b.err(fn, rocblas.StatusMemoryError)
	}
	if ws != 0 {
		if err := b.freeManaged(x, ws); err != nil {
			return 0, b.err(fn, rocblas.StatusMemoryError)
		}
	}
	nw, err := b.m.hip.Malloc(x.hipDev, need)
	b.mu.Lock()
	x.ws, x.wsSize = nw, need
	if err != nil {
		x.ws, x.wsSize = 0, 0
	}
	b.mu.Unlock()
	if err != nil {
		return 0, b.err(fn, rocblas.StatusMemoryError)
	}
	return nw, nil
}

var blasText = map[rocblas.Status]string{
	rocblas.StatusSuccess: "rocblas_status_success", rocblas.StatusInvalidHandle: "rocblas_status_invalid_handle",
	rocblas.StatusNotImplemented: "rocblas_status_not_implemented", rocblas.StatusInvalidPointer: "rocblas_status_invalid_pointer",
	rocblas.StatusInvalidSize: "rocblas_status_invalid_size", rocblas.StatusMemoryError: "rocblas_status_memory_error",
	rocblas.StatusInternalError: "rocblas_status_internal_error", rocblas.StatusInvalidValue: "rocblas_status_invalid_value",
}

func (b *BLAS) StatusString(s rocblas.Status) string {
	if t, ok := blasText[s]; ok {
		return t
	}
	return fmt.Sprintf("rocblas_status(%d)", uint32(s))
}

func (b *BLAS) err(fn string, s rocblas.Status) error {
	return &rocblas.Error{Func: fn, Status: s, Text: b.StatusString(s)}
}

func (b *BLAS) CreateHandle(hd int) (rocblas.Handle, error) {
	d, err := b.m.hip.dev("rocblas_create_handle", hd)
	if err != nil {
		return 0, b.err("rocblas_create_handle", rocblas.StatusInvalidValue)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.handles == nil {
		b.handles = map[rocblas.Handle]*blasHandle{}
	}
	b.next++
	h := rocblas.Handle(b.next)
	b.handles[h] = &blasHandle{dev: d, hipDev: hd}
	return h, nil
}

func (b *BLAS) handle(fn string, h rocblas.Handle) (*blasHandle, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := b.handles[h]
	if x == nil {
		return nil, b.err(fn, rocblas.StatusInvalidHandle)
	}
	return x, nil
}

func (b *BLAS) DestroyHandle(h rocblas.Handle) error {
	x, err := b.handle("rocblas_destroy_handle", h)
	if err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.handles, h)
	ws, managed := x.ws, !x.user
	b.mu.Unlock()
	if managed && ws != 0 {
		return b.freeManaged(x, ws) // rocBLAS frees its workspace
	}
	return nil
}

func (b *BLAS) SetStream(h rocblas.Handle, s hip.Stream) error {
	x, err := b.handle("rocblas_set_stream", h)
	if err != nil {
		return err
	}
	b.mu.Lock()
	x.stream = s
	b.mu.Unlock()
	return nil
}

func (b *BLAS) GetStream(h rocblas.Handle) (hip.Stream, error) {
	x, err := b.handle("rocblas_get_stream", h)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return x.stream, nil
}

func (b *BLAS) SetPointerMode(h rocblas.Handle, m rocblas.PointerMode) error {
	x, err := b.handle("rocblas_set_pointer_mode", h)
	if err != nil {
		return err
	}
	if m != rocblas.PointerModeHost && m != rocblas.PointerModeDevice {
		return b.err("rocblas_set_pointer_mode", rocblas.StatusInvalidValue)
	}
	b.mu.Lock()
	x.mode = m
	b.mu.Unlock()
	return nil
}

func (b *BLAS) Sgemm(h rocblas.Handle, ta, tb rocblas.Operation, m, n, k int32, alpha float32,
	a hip.DevicePtr, lda int32, bm hip.DevicePtr, ldb int32, beta float32, c hip.DevicePtr, ldc int32) error {
	return b.gemm("rocblas_sgemm", 4, h, ta, tb, m, n, k, float64(alpha), a, lda, bm, ldb, float64(beta), c, ldc)
}

func (b *BLAS) Dgemm(h rocblas.Handle, ta, tb rocblas.Operation, m, n, k int32, alpha float64,
	a hip.DevicePtr, lda int32, bm hip.DevicePtr, ldb int32, beta float64, c hip.DevicePtr, ldc int32) error {
	return b.gemm("rocblas_dgemm", 8, h, ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc)
}

func validOp(o rocblas.Operation) bool {
	return o == rocblas.OperationNone || o == rocblas.OperationTranspose || o == rocblas.OperationConjTrans
}

// gemm checks arguments the way rocBLAS does, then enqueues
// C = alpha*op(A)*op(B) + beta*C on the handle's stream.
func (b *BLAS) gemm(fn string, es uint64, h rocblas.Handle, ta, tb rocblas.Operation, m, n, k int32, alpha float64,
	a hip.DevicePtr, lda int32, bm hip.DevicePtr, ldb int32, beta float64, c hip.DevicePtr, ldc int32) error {
	x, err := b.handle(fn, h)
	if err != nil {
		return err
	}
	if !validOp(ta) || !validOp(tb) {
		return b.err(fn, rocblas.StatusInvalidValue)
	}
	rowsA, rowsB := m, k
	if ta != rocblas.OperationNone {
		rowsA = k
	}
	if tb != rocblas.OperationNone {
		rowsB = n
	}
	if m < 0 || n < 0 || k < 0 || lda < max(1, rowsA) || ldb < max(1, rowsB) || ldc < max(1, m) {
		return b.err(fn, rocblas.StatusInvalidSize)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if c == 0 || (k > 0 && alpha != 0 && (a == 0 || bm == 0)) {
		return b.err(fn, rocblas.StatusInvalidPointer)
	}
	b.mu.Lock()
	stream := x.stream
	b.mu.Unlock()
	s, err := b.m.hip.stream(fn, stream)
	if err != nil {
		return b.err(fn, rocblas.StatusInvalidHandle)
	}
	need := gemmWorkspace(m, n, k, es)
	ws, err := b.workspace(fn, x, need)
	if err != nil {
		return err
	}
	return s.enqueue(cmd{kind: cmdGemm, what: fn, g: gemmArgs{es: es, ta: ta != rocblas.OperationNone, tb: tb != rocblas.OperationNone,
		m: m, n: n, k: k, alpha: alpha, a: uint64(a), lda: lda, b: uint64(bm), ldb: ldb, beta: beta, c: uint64(c), ldc: ldc,
		ws: uint64(ws), wsSize: need}})
}

// gemmArgs is a gemm queued on a stream, carried by value so that
// enqueueing it allocates nothing.
type gemmArgs struct {
	es            uint64
	ta, tb        bool
	m, n, k       int32
	alpha, beta   float64
	a, b, c       uint64
	lda, ldb, ldc int32
	ws, wsSize    uint64 // the workspace it writes its partial sums to
}

// extent is the bytes a column-major rows×cols operand touches: the last
// column starts at (cols-1)*ld.
func extent(rows, cols, ld int32, es uint64) uint64 {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (uint64(cols-1)*uint64(ld) + uint64(rows)) * es
}

func (m *Machine) runGemm(dev int, g *gemmArgs, act *actor) error {
	rowsA, colsA := g.m, g.k
	if g.ta {
		rowsA, colsA = g.k, g.m
	}
	rowsB, colsB := g.k, g.n
	if g.tb {
		rowsB, colsB = g.n, g.k
	}
	var A, B []byte
	var err error
	if g.k > 0 && g.alpha != 0 {
		if A, err = m.gpuSpan(dev, g.a, extent(rowsA, colsA, g.lda, g.es), false, act); err != nil {
			return err
		}
		if B, err = m.gpuSpan(dev, g.b, extent(rowsB, colsB, g.ldb, g.es), false, act); err != nil {
			return err
		}
	}
	C, err := m.gpuSpan(dev, g.c, extent(g.m, g.n, g.ldc, g.es), true, act)
	if err != nil {
		return err
	}
	if g.wsSize > 0 {
		// The partial sums go through the workspace: a captured gemm
		// whose workspace was freed since faults here.
		W, err := m.gpuSpan(dev, g.ws, g.wsSize, true, act)
		if err != nil {
			return err
		}
		clear(W)
	}
	if g.es == 4 {
		gemmCol(g.ta, g.tb, int(g.m), int(g.n), int(g.k), float32(g.alpha),
			f32s(A), int(g.lda), f32s(B), int(g.ldb), float32(g.beta), f32s(C), int(g.ldc))
	} else {
		gemmCol(g.ta, g.tb, int(g.m), int(g.n), int(g.k), g.alpha,
			f64s(A), int(g.lda), f64s(B), int(g.ldb), g.beta, f64s(C), int(g.ldc))
	}
	return nil
}

func f32s(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func f64s(b []byte) []float64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// gemmCol computes C = alpha·op(A)·op(B) + beta·C, column-major, in T's
// precision (sgemm accumulates in float32, as rocBLAS does). Without a
// transpose of A it runs column by column (C[:,j] += A[:,l]·b), which walks
// memory in order.
func gemmCol[T float32 | float64](ta, tb bool, m, n, k int, alpha T, A []T, lda int, B []T, ldb int, beta T, C []T, ldc int) {
	for j := 0; j < n; j++ {
		col := C[j*ldc : j*ldc+m]
		for i := range col {
			if beta == 0 {
				col[i] = 0
			} else {
				col[i] *= beta
			}
		}
		if alpha == 0 {
			continue
		}
		for l := 0; l < k; l++ {
			var bv T
			if tb {
				bv = B[j+l*ldb]
			} else {
				bv = B[l+j*ldb]
			}
			bv *= alpha
			if !ta {
				a := A[l*lda : l*lda+m]
				for i, av := range a {
					col[i] += av * bv
				}
				continue
			}
			for i := range col {
				col[i] += A[l+i*lda] * bv
			}
		}
	}
}
