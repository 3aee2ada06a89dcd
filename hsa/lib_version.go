package hsa

import (
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// SystemInfoBuildVersion is HSA_AMD_SYSTEM_INFO_BUILD_VERSION: a const char*
// to ROCr's build identifier, "<major>.<minor>.<commits>-<job>-<hash>", whose
// major.minor is the library version (1.5 in ROCm 5.0-5.2, 1.14 in 6.2).
// Debian's ROCr 5.2.3 returns "\"1.5.0-local-build-unknown\"", quotes included.
const SystemInfoBuildVersion SystemInfo = 0x200

// BuildVersion is hsa_system_get_info(HSA_AMD_SYSTEM_INFO_BUILD_VERSION):
// ROCr's build identifier, which says which code-object versions its
// loader accepts (kernels.ParseROCrBuildVersion, kernels.ROCrAccepts).
func (l *Lib) BuildVersion() (string, error) {
	var p uintptr // the runtime writes a pointer to its own static string
	r, _, _ := purego.SyscallN(l.fn[symSystemGetInfo], uintptr(SystemInfoBuildVersion), uintptr(unsafe.Pointer(&p)))
	if err := l.check("hsa_system_get_info", r); err != nil {
		return "", err
	}
	return cmem.GoString(p), nil
}
