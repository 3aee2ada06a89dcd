package userkernel

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrCompile is matched (errors.Is) by every *CompileError.
var ErrCompile = errors.New("userkernel: compiling the kernel source failed")

// ErrNoCompiler is matched (errors.Is) when no clang (or ld.lld) is found.
var ErrNoCompiler = errors.New("userkernel: no compiler found")

// CompileError is a failed compile or link, with the tool's diagnostics.
type CompileError struct {
	Target Target
	Tool   string // the command that failed
	Output string // its standard error (and output), trimmed
	Err    error  // the exec error, or the reason found after it ran
}

func (e *CompileError) Error() string {
	msg := fmt.Sprintf("userkernel: compiling for %s: %s: %v", e.Target, filepath.Base(e.Tool), e.Err)
	if e.Output != "" {
		msg += "\n" + e.Output
	}
	return msg
}

// Is makes errors.Is(err, ErrCompile) true.
func (e *CompileError) Is(target error) bool { return target == ErrCompile }

func (e *CompileError) Unwrap() error { return e.Err }

// clangNames and lldNames are searched in PATH, in order, after the
// environment variables ROCSYNC_CLANG and ROCSYNC_LLD.
var (
	clangNames = []string{"clang-22", "clang"}
	lldNames   = []string{"ld.lld-22", "ld.lld"}
)

// findClang returns the compiler: opt, else $ROCSYNC_CLANG, else the first
// of clangNames in PATH.
func findClang(opt string) (string, error) {
	return findTool(opt, "ROCSYNC_CLANG", clangNames, "")
}

// findLLD returns the linker: opt, else $ROCSYNC_LLD, else ld.lld next to
// clang's real executable (the linker of the same LLVM), else PATH.
func findLLD(opt, clang string) (string, error) {
	beside := ""
	if real, err := filepath.EvalSymlinks(clang); err == nil {
		beside = filepath.Join(filepath.Dir(real), "ld.lld")
	}
	return findTool(opt, "ROCSYNC_LLD", lldNames, beside)
}

func findTool(opt, env string, names []string, beside string) (string, error) {
	for _, p := range []string{opt, os.Getenv(env)} {
		if p != "" {
			path, err := exec.LookPath(p)
			if err != nil {
				return "", fmt.Errorf("%w: %s (from %s): %w", ErrNoCompiler, p, env, err)
			}
			return path, nil
		}
	}
	if beside != "" {
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return beside, nil
		}
	}
	for _, n := range names {
		if path, err := exec.LookPath(n); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%w: none of %s in PATH, and %s is not set", ErrNoCompiler, strings.Join(names, ", "), env)
}

// toolEnv is the environment the tools run in: variables that would add
// include paths or change diagnostics are left out, so the output depends
// only on what the cache key covers.
func toolEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "CCC_OVERRIDE_OPTIONS",
			"CLANG_CONFIG_FILE_SYSTEM_DIR", "CLANG_CONFIG_FILE_USER_DIR", "LC_ALL", "LANG":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// workItemPrelude defines OpenCL's work-item functions from compiler
// builtins, because the kernels are compiled without device libraries
// (-nogpulib), which would otherwise provide them. On AMD the sizes come
// from the dispatch packet (hsa_kernel_dispatch_packet_t: setup at byte 2,
// workgroup_size_x/y/z at 4/6/8, grid_size_x/y/z at 12/16/20).
// get_work_dim exists on AMD only (PTX does not record the launch's
// dimensions; a call is a compile error there). get_local_size gives the
// enqueued size, also for a partial last workgroup. Its text is part of
// every OpenCL cache key.
const workItemPrelude = `#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define RS_WI static inline __attribute__((overloadable, always_inline))
#if defined(__AMDGCN__)
static inline __constant ushort* rs_packet16(void) { return (__constant ushort*)__builtin_amdgcn_dispatch_ptr(); }
static inline __constant uint* rs_packet32(void) { return (__constant uint*)__builtin_amdgcn_dispatch_ptr(); }
RS_WI size_t get_local_id(uint d) { return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y() : d == 2 ? __builtin_amdgcn_workitem_id_z() : 0; }
RS_WI size_t get_group_id(uint d) { return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y() : d == 2 ? __builtin_amdgcn_workgroup_id_z() : 0; }
RS_WI size_t get_local_size(uint d) { return d < 3 ? rs_packet16()[2 + d] : 1; }
RS_WI size_t get_global_size(uint d) { return d < 3 ? rs_packet32()[3 + d] : 1; }
RS_WI uint get_work_dim(void) { return rs_packet16()[1] & 3; }
#elif defined(__NVPTX__)
RS_WI size_t get_local_id(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_tid_x() : d == 1 ? __nvvm_read_ptx_sreg_tid_y() : d == 2 ? __nvvm_read_ptx_sreg_tid_z() : 0; }
RS_WI size_t get_group_id(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_ctaid_x() : d == 1 ? __nvvm_read_ptx_sreg_ctaid_y() : d == 2 ? __nvvm_read_ptx_sreg_ctaid_z() : 0; }
RS_WI size_t get_local_size(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_ntid_x() : d == 1 ? __nvvm_read_ptx_sreg_ntid_y() : d == 2 ? __nvvm_read_ptx_sreg_ntid_z() : 1; }
RS_WI size_t get_global_size(uint d) { return get_local_size(d) * (d == 0 ? __nvvm_read_ptx_sreg_nctaid_x() : d == 1 ? __nvvm_read_ptx_sreg_nctaid_y() : d == 2 ? __nvvm_read_ptx_sreg_nctaid_z() : 1); }
#endif
RS_WI size_t get_global_id(uint d) { return get_group_id(d) * get_local_size(d) + get_local_id(d); }
RS_WI size_t get_num_groups(uint d) { return (get_global_size(d) + get_local_size(d) - 1) / get_local_size(d); }
#undef RS_WI
#line 1 "kernel.cl"
`

// baseFlags come before the user's options (so -O and -cl-std may be
// overridden); targetFlags after them (so the target cannot be).
var baseFlags = []string{"-x", "cl", "-cl-std=CL2.0", "-O3"}

func amdFlags(t Target) []string {
	return []string{"-cl-kernel-arg-info", "--target=amdgcn-amd-amdhsa", "-nogpulib",
		"-mcode-object-version=" + fmt.Sprint(int(t.CodeObject)), "-mcpu=" + t.Arch}
}

// ptxFeature is the PTX ISA version to emit for an architecture: clang-22
// defaults to PTX 4.2, which sm_80 and later reject; 7.8 is the oldest that
// covers sm_90, and newer architectures need newer PTX.
func ptxFeature(sm int) string {
	switch {
	case sm >= 120:
		return "+ptx87"
	case sm >= 100:
		return "+ptx86"
	}
	return "+ptx78"
}

func nvptxFlags(t Target, sm int) []string {
	return []string{"-cl-kernel-arg-info", "--target=nvptx64-nvidia-cuda", "-nogpulib",
		"-Xclang", "-target-feature", "-Xclang", ptxFeature(sm), "-march=" + t.Arch}
}

// compileOpenCL runs clang (and ld.lld for AMD) in a private temporary
// directory and returns the code object or the PTX text.
func compileOpenCL(clang, lld string, src *Source, t Target, sm int) ([]byte, error) {
	dir, err := os.MkdirTemp("", "rocsync-userkernel-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "kernel.cl"), []byte(workItemPrelude+src.openCL), 0o600); err != nil {
		return nil, err
	}
	run := func(tool string, args ...string) error {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		cmd.Env = toolEnv()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return &CompileError{Target: t, Tool: tool, Output: strings.TrimSpace(out.String()), Err: err}
		}
		return nil
	}
	args := append(append([]string(nil), baseFlags...), src.options...)
	if t.Family == NVIDIA {
		args = append(append(args, nvptxFlags(t, sm)...), "-S", "kernel.cl", "-o", "kernel.ptx")
		if err := run(clang, args...); err != nil {
			return nil, err
		}
		ptx, err := os.ReadFile(filepath.Join(dir, "kernel.ptx"))
		if err != nil {
			return nil, err
		}
		// An .extern function is a library call the CUDA driver cannot
		// resolve (no libdevice is linked).
		for line := range strings.SplitSeq(string(ptx), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), ".extern") {
				return nil, &CompileError{Target: t, Tool: clang, Err: fmt.Errorf("the kernel calls a library function: %s", strings.TrimSpace(line))}
			}
		}
		return ptx, nil
	}
	args = append(append(args, amdFlags(t)...), "-c", "kernel.cl", "-o", "kernel.o")
	if err := run(clang, args...); err != nil {
		return nil, err
	}
	if err := run(lld, "-shared", "--build-id=none", "kernel.o", "-o", "kernel.hsaco"); err != nil {
		return nil, err
	}
	code, err := os.ReadFile(filepath.Join(dir, "kernel.hsaco"))
	if err != nil {
		return nil, err
	}
	// A shared object may keep undefined symbols; the HSA loader refuses
	// them only at load time. Catch them here, with their names.
	if undefined, err := undefinedSymbols(code); err != nil {
		return nil, &CompileError{Target: t, Tool: lld, Err: err}
	} else if len(undefined) > 0 {
		return nil, &CompileError{Target: t, Tool: lld,
			Err: fmt.Errorf("the kernel calls functions no library provides (compiled without device libraries): %s", strings.Join(undefined, ", "))}
	}
	return code, nil
}

func undefinedSymbols(code []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(code))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := get()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, err
		}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF && s.Name != "" {
				names = append(names, s.Name)
			}
		}
	}
	return names, nil
}

// checkBuilt parses freshly built or cached code into an Image for t; code
// that does not parse, or parses as another target, is refused.
func checkBuilt(code []byte, t Target) (*Image, error) {
	if t.Family == NVIDIA {
		img, err := ptxImage(code)
		if err != nil {
			return nil, err
		}
		if img.Target != t {
			return nil, fmt.Errorf("PTX is for %s, want %s", img.Target, t)
		}
		return img, nil
	}
	img, err := amdImage(code, t.CodeObject)
	if err != nil {
		return nil, err
	}
	if img.Target != t {
		return nil, fmt.Errorf("code object is for %s, want %s", img.Target, t)
	}
	return img, nil
}
