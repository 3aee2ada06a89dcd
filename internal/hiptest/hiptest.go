// Package hiptest builds the HIP test kernels of launch.hip with clang-22
// (-x hip, against the HIP headers Debian's libamdhip64-dev installs) in
// code objects v4, v5 and v6, and holds their Go references: what the
// emulator and the simulated driver's executor run in their place.
//
// The kernels read blockDim and gridDim the way HIP code does. Debian ships
// no ROCm-Device-Libs, so launch.hip defines the four ockl work-item
// functions the HIP headers call, computing as ockl's workitem.cl does:
// from the dispatch packet in code object v4, from the hidden arguments
// (hidden_block_count, hidden_group_size, hidden_remainder) in v5 and
// later. In v5 and v6 every one of them therefore reserves the 256-byte
// implicit-argument area after its explicit arguments.
package hiptest

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

//go:embed launch.hip
var source []byte

// GeomStride is the distance, in elements, between the first work-items of
// two workgroups in geom's output.
const GeomStride = 1024

// ErrNoToolchain is returned by Build where clang-22, ld.lld-22 or the HIP
// headers are missing; tests skip with its message.
var ErrNoToolchain = errors.New("hiptest: clang-22, ld.lld-22 or the HIP headers (/usr/include/hip) are missing")

type key struct {
	gfx string
	v   kernels.CodeObjectVersion
}

var (
	mu    sync.Mutex
	built = map[key][]byte{}
)

// Build compiles launch.hip for gfx as code object v and returns the code
// object; the result is cached for the process.
func Build(gfx string, v kernels.CodeObjectVersion) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	if co, ok := built[key{gfx, v}]; ok {
		return co, nil
	}
	clang, err1 := exec.LookPath("clang-22")
	lld, err2 := exec.LookPath("ld.lld-22")
	_, err3 := os.Stat("/usr/include/hip/hip_runtime.h")
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, ErrNoToolchain
	}
	dir, err := os.MkdirTemp("", "hiptest")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "launch.hip")
	if err := os.WriteFile(src, source, 0o600); err != nil {
		return nil, err
	}
	cov := strconv.Itoa(int(v))
	wave := "64"
	if kernels.Wavefront(gfx) == 32 {
		wave = "32"
	}
	bc, obj, co := filepath.Join(dir, "k.bc"), filepath.Join(dir, "k.o"), filepath.Join(dir, "k.hsaco")
	// The device part to bitcode, then code generation and linking as
	// kernels/build.sh does (clang's own device link wants a bare "lld",
	// which Debian names ld.lld-22). clang-22 no longer defines
	// __AMDGCN_WAVEFRONT_SIZE, which HIP 5.2's headers read.
	steps := [][]string{
		{clang, "-x", "hip", "--offload-arch=" + gfx, "--cuda-device-only", "-nogpulib", "-O3", "-Wall", "-Werror",
			"-D__AMDGCN_WAVEFRONT_SIZE=" + wave, "-DROCSYNC_COV=" + cov, "-mcode-object-version=" + cov,
			"-emit-llvm", "-c", src, "-o", bc},
		{clang, "--target=amdgcn-amd-amdhsa", "-mcpu=" + gfx, "-nogpulib", "-O3", "-mcode-object-version=" + cov, "-c", bc, "-o", obj},
		{lld, "-shared", "--build-id=none", obj, "-o", co},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("hiptest: %s: %w\n%s", filepath.Base(s[0]), err, out)
		}
	}
	b, err := os.ReadFile(co)
	if err != nil {
		return nil, err
	}
	built[key{gfx, v}] = b
	return b, nil
}

// localSize and numGroups are ockl's __ockl_get_local_size and
// __ockl_get_num_groups in dimension 0, for the geometry the kernel reads:
// the last, partial workgroup of a grid that is not a whole number of
// workgroups has the remainder's size.
func localSize(g userkernel.Geometry, group uint32) uint32 {
	return min(g.Workgroup[0], g.Grid[0]-group*g.Workgroup[0])
}

func numGroups(g userkernel.Geometry) uint32 {
	return (g.Grid[0] + g.Workgroup[0] - 1) / g.Workgroup[0]
}

// Scale is scale's reference: x[i] = 2*x[i] + gridDim.x for i < n, with
// i = blockIdx.x*blockDim.x + threadIdx.x over the one-dimensional grid.
func Scale(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
	n := uint64(uint32(args[1].Uint64()))
	if int32(n) <= 0 {
		return nil
	}
	x, err := mem.Bytes(args[0].Ptr(), 4*n, true)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	groups := numGroups(g)
	for b := range groups {
		ls := localSize(g, b)
		for t := range ls {
			if i := uint64(b*ls + t); i < n {
				le.PutUint32(x[4*i:], f32bits(2*f32(le.Uint32(x[4*i:]))+float32(groups)))
			}
		}
	}
	return nil
}

// Geom is geom's reference: out[b*GeomStride + t] = blockDim.x | gridDim.x<<16
// for every work-item t of every workgroup b.
func Geom(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
	groups := numGroups(g)
	out, err := mem.Bytes(args[0].Ptr(), 4*uint64(groups)*GeomStride, true)
	if err != nil {
		return err
	}
	for b := range groups {
		ls := localSize(g, b)
		for t := range ls {
			binary.LittleEndian.PutUint32(out[4*(b*GeomStride+t):], ls|groups<<16)
		}
	}
	return nil
}

// Offs is offs's reference: out[b*64 + t] = the global offset (0: the
// reference runs only when the hidden global offsets are 0) + b*64 + t.
func Offs(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
	groups := numGroups(g)
	out, err := mem.Bytes(args[0].Ptr(), 8*64*uint64(groups), true)
	if err != nil {
		return err
	}
	for b := range groups {
		for t := range localSize(g, b) {
			i := b*64 + t
			binary.LittleEndian.PutUint64(out[8*i:], uint64(i))
		}
	}
	return nil
}

// NoArgs returns noargs's reference, which reports the geometry it ran
// with to seen.
func NoArgs(seen func(userkernel.Geometry)) userkernel.ReferenceFunc {
	return func(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
		seen(g)
		return nil
	}
}

// Register registers scale, geom and offs in refs, and noargs reporting to
// seen.
func Register(refs *userkernel.References, seen func(userkernel.Geometry)) error {
	return errors.Join(refs.Register("scale", Scale), refs.Register("geom", Geom),
		refs.Register("offs", Offs), refs.Register("noargs", NoArgs(seen)))
}

func f32(b uint32) float32     { return math.Float32frombits(b) }
func f32bits(f float32) uint32 { return math.Float32bits(f) }
