// Package simblas is a test-only librocblas for the simulated GPU
// (hsa/kfdsim): Debian ships no rocBLAS, so rocsync's rocblas binding is
// tested over the real HIP 5.2.3 with this library in rocBLAS's place.
//
// The library (csrc/simblas.c) exports the functions the rocblas binding resolves
// (rocblas.BoundSymbols), checks gemm arguments the way rocBLAS does, and
// enqueues real work on the handle's HIP stream: hipModuleLoadData of the
// gemm code object for the device's gcnArchName and hipModuleLaunchKernel of
// the kernels in gemm.cl. On the simulated GPU the Go executor runs those
// kernels by name with GemmBytes.
//
// Build compiles it at test time (gcc, and clang-22 with ld.lld-22 for the
// code objects: v4, which HIP 5.2.3 requires) into a content-addressed
// cache; nothing built is committed, so it cannot go stale.
package simblas

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
	"github.com/rocsync/rocsync/internal/diskcache"
)

//go:embed csrc/simblas.c
var librarySource []byte

//go:embed gemm.cl
var gemmSource []byte

// Soname is the soname of the library Build makes: the one rocsync's
// rocblas binding looks for next to HIP 5 (rocBLAS 2.x, ROCm 5.5 and older).
const Soname = "librocblas.so.0"

// SonameFor is the soname of the library BuildFor makes for the HIP of
// soname major hipMajor: rocBLAS's soname for that ROCm line, the one
// rocsync's rocblas binding pairs with it (librocblas.so.0 for HIP 5,
// librocblas.so.4 for HIP 6, librocblas.so.5 for HIP 7), or "" for another
// major.
func SonameFor(hipMajor int) string {
	switch hipMajor {
	case 5:
		return Soname
	case 6:
		return "librocblas.so.4"
	case 7:
		return "librocblas.so.5"
	}
	return ""
}

// Targets are the GPUs the gemm code objects are built for.
var Targets = []string{"gfx908", "gfx90a", "gfx1030"}

// Tools, overridable through the environment as in kernels/build.sh.
func tool(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// ErrToolMissing is matched by errors.Is when a compiler Build needs is not
// installed.
var ErrToolMissing = errors.New("simblas: build tool not installed")

// The flags of the code objects: those of kernels/build.sh, but code object
// v4 (HIP 5.2.3 rejects v5).
var gemmFlags = []string{"-x", "cl", "-cl-std=CL2.0", "-O3", "-Wall", "-Werror", "-cl-kernel-arg-info",
	"--target=amdgcn-amd-amdhsa", "-nogpulib", "-mcode-object-version=4"}

var libFlags = []string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
	"-fvisibility=hidden"}

const manifestName = "manifest"

var buildMu sync.Mutex

// Build returns a directory root with root/lib/librocblas.so.0, so that
// ROCM_PATH=root makes the rocblas binding load it, and root/co/<gfx>.hsaco,
// the gemm code objects inside it (for tests). The result is cached under
// cacheDir (os.UserCacheDir()/rocsync/simblas when empty) in a directory
// named by the hash of the sources, flags and tool versions; the directory
// is created atomically (built under a temporary name, then renamed), with
// mode 0700, and its manifest of file hashes is verified on every use: a
// corrupt entry is rebuilt, never loaded.
func Build(cacheDir string) (string, error) { return BuildFor(cacheDir, 5) }

// BuildFor is Build for the HIP of soname major hipMajor (5, 6 or 7): the
// library is root/lib/SonameFor(hipMajor), linked against
// libamdhip64.so.<hipMajor>, so that it loads next to that HIP, inside a
// release's root (hsa/kfdsim/rocmroot) as well. It links against a stub of
// that soname, not the installed HIP: the host has HIP 5 only. The tools
// run with rocmroot.HostEnv's environment, so that a program running
// inside a root can build.
func BuildFor(cacheDir string, hipMajor int) (string, error) {
	soname := SonameFor(hipMajor)
	if soname == "" {
		return "", fmt.Errorf("simblas: no rocBLAS soname for HIP %d", hipMajor)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	cc, clang, lld := tool("CC", "gcc"), tool("CLANG", "clang-22"), tool("LLD", "ld.lld-22")
	var versions []string
	for _, t := range []string{cc, clang, lld} {
		if _, err := exec.LookPath(t); err != nil {
			return "", fmt.Errorf("%w: %s: %v", ErrToolMissing, t, err)
		}
		cmd := exec.Command(t, "--version")
		cmd.Env = rocmroot.HostEnv(os.Environ())
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("simblas: %s --version: %v", t, err)
		}
		versions = append(versions, string(out))
	}
	if cacheDir == "" {
		d, err := diskcache.UserDir("simblas")
		if err != nil {
			return "", fmt.Errorf("simblas: no cache directory: %w", err)
		}
		cacheDir = d
	}

	h := sha256.New()
	for _, part := range [][]byte{librarySource, gemmSource,
		[]byte(strings.Join(gemmFlags, " ")), []byte(strings.Join(libFlags, " ")),
		[]byte(strings.Join(Targets, " ")), []byte(strings.Join(versions, "\x00")), []byte(soname)} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return diskcache.Get(cacheDir, hex.EncodeToString(h.Sum(nil))[:32], entryManifest(soname), func(dir string) error {
		return build(dir, cc, clang, lld, hipMajor, soname)
	})
}

// build compiles everything into dir: co/<gfx>.hsaco, lib/<soname>,
// and the manifest.
func build(dir, cc, clang, lld string, hipMajor int, soname string) error {
	work := filepath.Join(dir, "work")
	for _, d := range []string{work, filepath.Join(dir, "co"), filepath.Join(dir, "lib")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("simblas: %w", err)
		}
	}
	cl := filepath.Join(work, "gemm.cl")
	if err := os.WriteFile(cl, gemmSource, 0o600); err != nil {
		return fmt.Errorf("simblas: %w", err)
	}
	var table bytes.Buffer
	table.WriteString("#include <stddef.h>\nstruct simblas_code_object { const char *target; const unsigned char *data; size_t size; };\n")
	for _, gfx := range Targets {
		obj := filepath.Join(work, gfx+".o")
		co := filepath.Join(dir, "co", gfx+".hsaco")
		args := append(append([]string{}, gemmFlags...), "-mcpu="+gfx, "-c", cl, "-o", obj)
		if err := run(clang, args...); err != nil {
			return err
		}
		if err := run(lld, "-shared", "--build-id=none", obj, "-o", co); err != nil {
			return err
		}
		data, err := os.ReadFile(co)
		if err != nil {
			return fmt.Errorf("simblas: %w", err)
		}
		fmt.Fprintf(&table, "static const unsigned char co_%s[] = {", gfx)
		for i, b := range data {
			if i%16 == 0 {
				table.WriteString("\n")
			}
			fmt.Fprintf(&table, "%d,", b)
		}
		table.WriteString("\n};\n")
	}
	table.WriteString("__attribute__((visibility(\"hidden\"))) const struct simblas_code_object simblas_code_objects[] = {\n")
	for _, gfx := range Targets {
		fmt.Fprintf(&table, "\t{ %q, co_%s, sizeof co_%s },\n", gfx, gfx, gfx)
	}
	fmt.Fprintf(&table, "};\n__attribute__((visibility(\"hidden\"))) const unsigned simblas_num_code_objects = %d;\n", len(Targets))
	tablePath := filepath.Join(work, "code_objects.c")
	libPath := filepath.Join(work, "simblas.c")
	if err := os.WriteFile(tablePath, table.Bytes(), 0o600); err != nil {
		return fmt.Errorf("simblas: %w", err)
	}
	if err := os.WriteFile(libPath, librarySource, 0o600); err != nil {
		return fmt.Errorf("simblas: %w", err)
	}
	// The stub gives the library its NEEDED libamdhip64.so.<hipMajor>; the
	// symbols come from the HIP loaded at run time.
	stubSrc := filepath.Join(work, "stub.c")
	if err := os.WriteFile(stubSrc, []byte("void simblas_hip_stub(void) {}\n"), 0o600); err != nil {
		return fmt.Errorf("simblas: %w", err)
	}
	hipSoname := fmt.Sprintf("libamdhip64.so.%d", hipMajor)
	if err := run(cc, "-shared", "-fPIC", "-Wl,-soname,"+hipSoname, "-o", filepath.Join(work, "libamdhip64.so"), stubSrc); err != nil {
		return err
	}
	so := filepath.Join(dir, "lib", soname)
	args := append(append([]string{}, libFlags...), "-Wl,-soname,"+soname, "-o", so, libPath, tablePath,
		"-L"+work, "-Wl,--no-as-needed", "-lamdhip64")
	if err := run(cc, args...); err != nil {
		return err
	}
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("simblas: %w", err)
	}
	return nil
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = rocmroot.HostEnv(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("simblas: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// entryManifest lists the files of a cache entry, relative to its root.
func entryManifest(soname string) diskcache.Manifest {
	files := []string{filepath.Join("lib", soname)}
	for _, gfx := range Targets {
		files = append(files, filepath.Join("co", gfx+".hsaco"))
	}
	return diskcache.Manifest{Name: manifestName, Files: files}
}
