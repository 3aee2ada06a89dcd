//go:build linux && (amd64 || arm64)

package kfdsim_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/hiptest"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// HIP kernels built by clang-22 in code objects v4 and v5 run over Debian's
// real ROCr 5.2.3 on the simulated driver: ROCr's loader takes both (and
// refuses v6, whose loader support came in ROCm 6.2), the kernarg segment
// is packed by userkernel.Pack (a v5 kernel's hidden block count, group
// size and remainder included) and the executor runs the kernel's
// reference with the geometry the kernel reads from them. A grid of 1000
// work-items in workgroups of 64 leaves a last workgroup of 40, whose
// blockDim is the remainder. A v5 dispatch whose hidden group size does not
// match the packet is refused (the queue faults) instead of computed.
func TestExecHIPHiddenArgsOverRealROCr(t *testing.T) {
	objects := map[kernels.CodeObjectVersion][]byte{}
	for _, v := range []kernels.CodeObjectVersion{kernels.CodeObjectV4, kernels.CodeObjectV5, kernels.CodeObjectV6} {
		co, err := hiptest.Build("gfx90a", v)
		if errors.Is(err, hiptest.ErrNoToolchain) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		objects[v] = co
	}
	if !runInChild(t, twoGPUs) {
		return
	}
	e := registerExecutor(t)
	refs := &userkernel.References{}
	if err := hiptest.Register(refs, func(userkernel.Geometry) {}); err != nil {
		t.Fatal(err)
	}
	e.UseReferences(refs)
	r := initRuntime(t)
	gpu := r.gpus[0] // gfx90a

	load := func(co []byte) (hsa.Executable, error) {
		rd, err := r.lib.CodeObjectReaderCreateFromMemory(co)
		if err != nil {
			t.Fatal(err)
		}
		exe, err := r.lib.ExecutableCreateAlt(hsa.ProfileFull, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.lib.ExecutableLoadAgentCodeObject(exe, gpu, rd); err != nil {
			return 0, err
		}
		return exe, r.lib.ExecutableFreeze(exe)
	}
	if _, err := load(objects[kernels.CodeObjectV6]); !errors.Is(err, &hsa.Error{Status: hsa.StatusErrorInvalidCodeObject}) {
		t.Errorf("ROCr 5.2.3 loading code object v6: %v, want HSA_STATUS_ERROR_INVALID_CODE_OBJECT", err)
	}

	const n, wg, groups = 1000, 64, 16
	fine := r.pool(r.cpu, hsa.GlobalFlagFineGrained)
	out := r.alloc(fine, 4*groups*hiptest.GeomStride)
	karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 512)
	for _, p := range []unsafe.Pointer{out, karg} {
		if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu}, p); err != nil {
			t.Fatal(err)
		}
	}
	ov := unsafe.Slice((*byte)(out), 4*groups*hiptest.GeomStride)
	kv := unsafe.Slice((*byte)(karg), 512)
	geomPacket := func(ko uint64, done hsa.Signal) packet {
		var p packet
		p.put16(0, hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
		p.put16(2, 1)
		p.put16(4, wg)
		p.put16(6, 1)
		p.put16(8, 1)
		p.put32(12, n)
		p.put32(16, 1)
		p.put32(20, 1)
		p.put64(32, ko)
		p.put64(40, uint64(uintptr(karg)))
		p.put64(56, uint64(done))
		return p
	}
	for _, v := range []kernels.CodeObjectVersion{kernels.CodeObjectV4, kernels.CodeObjectV5} {
		exe, err := load(objects[v])
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		sym, err := r.lib.ExecutableSymbolByName(exe, "geom.kd", gpu)
		if err != nil {
			t.Fatal(err)
		}
		ko, err := r.lib.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject)
		if err != nil {
			t.Fatal(err)
		}
		size, err := r.lib.SymbolInfoUint32(sym, hsa.SymbolInfoKernargSegmentSize)
		if err != nil {
			t.Fatal(err)
		}
		img, err := userkernel.ReadCodeObject(objects[v])
		if err != nil {
			t.Fatal(err)
		}
		k, err := img.Kernel("geom")
		if err != nil {
			t.Fatal(err)
		}
		if size != k.ArgsSize {
			t.Fatalf("%s: ROCr says a %d-byte kernarg segment, the metadata %d", v, size, k.ArgsSize)
		}
		if err := k.Pack(kv, userkernel.Grid1D(n, wg), []userkernel.Arg{userkernel.Buffer(uint64(uintptr(out)), userkernel.Write)}); err != nil {
			t.Fatal(err)
		}
		for i := range ov {
			ov[i] = 0xff
		}
		q, qe := r.queue(gpu)
		done := r.signal(1)
		r.submit(q, geomPacket(ko, done))
		if ok, st, bad := r.waitOrError(done, qe, 20*time.Second); !ok {
			t.Fatalf("%s: dispatch did not complete (queue error %v %#x; refusal %v)", v, bad, st, e.LastRefusal())
		}
		for b := range groups {
			size := wg
			if b == groups-1 {
				size = n - (groups-1)*wg
			}
			for tid := range hiptest.GeomStride {
				want := uint32(0xffffffff)
				if tid < size {
					want = uint32(size) | groups<<16
				}
				if got := binary.LittleEndian.Uint32(ov[4*(b*hiptest.GeomStride+tid):]); got != want {
					t.Fatalf("%s: workgroup %d work-item %d saw %#x, want %#x", v, b, tid, got, want)
				}
			}
		}
		if v < kernels.CodeObjectV5 {
			continue
		}
		// The hidden group size says 32 while the packet says 64.
		meta, err := kernels.ReadMetadata(objects[v])
		if err != nil {
			t.Fatal(err)
		}
		km, _ := meta.Kernel("geom")
		for _, a := range km.Args {
			if a.ValueKind == "hidden_group_size_x" {
				binary.LittleEndian.PutUint16(kv[a.Offset:], 32)
			}
		}
		before := e.Stats().Refused
		q2, qe2 := r.queue(gpu)
		done2 := r.signal(1)
		r.submit(q2, geomPacket(ko, done2))
		if ok, _, bad := r.waitOrError(done2, qe2, 20*time.Second); ok || !bad {
			t.Fatalf("%s: a dispatch with a wrong hidden group size completed=%v queue error=%v", v, ok, bad)
		}
		if e.Stats().Refused != before+1 || !errors.Is(e.LastRefusal(), userkernel.ErrHiddenArgs) {
			t.Errorf("%s: refusals %d (before %d), last %v; want one for the hidden arguments", v, e.Stats().Refused, before, e.LastRefusal())
		}
	}
}
