package emu

import (
	"fmt"
	"strings"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/kernels"
)

// The ROCm release the emulator models (Options.HIPVersion), and the
// code-object versions its HIP and ROCr load. The rules are written out here
// from the runtimes' sources (docs/codeobjects.md), not taken from package
// kernels, so that the emulator checks rocsync's choice instead of
// repeating it.

func (m *Machine) hipVersion() int {
	if m.opts.HIPVersion == 0 {
		return DefaultHIPVersion
	}
	return m.opts.HIPVersion
}

// release returns the modelled ROCm release as major*100+minor (502 for 5.2).
func (m *Machine) release() int {
	v := m.hipVersion()
	return v/10_000_000*100 + v/100_000%100
}

// rocrLibraryVersions maps ROCm releases to the ROCr library version their
// src/CMakeLists.txt sets (get_version); 5.0-5.2 all say 1.5.
var rocrLibraryVersions = []struct {
	release int
	lib     string
}{
	{500, "1.5"}, {503, "1.7"}, {505, "1.8"}, {506, "1.9"}, {507, "1.11"},
	{600, "1.12"}, {601, "1.13"}, {602, "1.14"}, {604, "1.15"},
}

// hipAccepts is comgr's getElfIsaName for the release's comgr: ABI versions
// v3 and v4 until ROCm 5.2, v5 from 5.3; the current comgr names v4-v6
// (taken here as from 6.2, when ROCr took v6).
func (m *Machine) hipAccepts(v kernels.CodeObjectVersion) bool {
	r := m.release()
	switch v {
	case 3:
		return r < 600
	case 4:
		return true
	case 5:
		return r >= 503
	case 6:
		return r >= 602
	}
	return false
}

// rocrAccepts is ROCr's loader check (executable.cpp: major version 1..4
// in 5.0-5.1, 1..5 in 5.2-6.1, 1..6 from 6.2).
func (m *Machine) rocrAccepts(v kernels.CodeObjectVersion) bool {
	r := m.release()
	switch {
	case r >= 602:
		return v <= 6
	case r >= 502:
		return v <= 5
	}
	return v <= 4
}

// rocrGeneric is the generic processor of each processor in ROCr's ISA
// registry (ISAREG_ENTRY_GEN's last column, core/runtime/isa.cpp of
// ROCR-Runtime after October 2024 and of ROCm/rocm-systems; the registry of
// rocm-6.2.x has no generic processors).
var rocrGeneric = map[string]string{
	"gfx900": "gfx9-generic", "gfx902": "gfx9-generic", "gfx904": "gfx9-generic",
	"gfx906": "gfx9-generic", "gfx909": "gfx9-generic", "gfx90c": "gfx9-generic",
	"gfx942": "gfx9-4-generic", "gfx950": "gfx9-4-generic",
	"gfx1010": "gfx10-1-generic", "gfx1011": "gfx10-1-generic", "gfx1012": "gfx10-1-generic",
	"gfx1013": "gfx10-1-generic",
	"gfx1030": "gfx10-3-generic", "gfx1031": "gfx10-3-generic", "gfx1032": "gfx10-3-generic",
	"gfx1033": "gfx10-3-generic", "gfx1034": "gfx10-3-generic", "gfx1035": "gfx10-3-generic",
	"gfx1036": "gfx10-3-generic",
	"gfx1100": "gfx11-generic", "gfx1101": "gfx11-generic", "gfx1102": "gfx11-generic",
	"gfx1103": "gfx11-generic", "gfx1150": "gfx11-generic", "gfx1151": "gfx11-generic",
	"gfx1152": "gfx11-generic", "gfx1153": "gfx11-generic",
	"gfx1200": "gfx12-generic", "gfx1201": "gfx12-generic",
}

// isaCompatible is ROCr's Isa::IsCompatible for a code object built for
// processor target (feature settings stripped) on the emulated agent: the
// agent's own processor, or, once the registry knows generic processors,
// the generic processor of the agent's family. The emulator takes that to
// be ROCm 6.4 (library version 1.15): rocm-6.2.x's registry has no generic
// processor, so its loader finds a generic ISA name invalid, and 6.3
// shares 6.2's library version. HIP loads a code object through the same
// loader (clr rocprogram.cpp calls hsa_executable_load_agent_code_object),
// so the rule is HIP's too.
func (m *Machine) isaCompatible(target string) bool {
	if target == m.opts.ISA {
		return true
	}
	return m.release() >= 604 && target != "" && rocrGeneric[m.opts.ISA] == target
}

// codeObjectProcessor is the processor of a metadata .amdhsa.target,
// without the triple and the feature settings.
func codeObjectProcessor(target string) string {
	if i := strings.LastIndex(target, "--"); i >= 0 {
		target = target[i+2:]
	}
	if j := strings.IndexByte(target, ':'); j >= 0 {
		target = target[:j]
	}
	return target
}

// RuntimeVersion is hipRuntimeGetVersion: Options.HIPVersion, or ROCm 6.2's
// when that is 0.
func (h *HIP) RuntimeVersion() (int, error) { return h.m.hipVersion(), nil }

// BuildVersion is hsa_system_get_info(HSA_AMD_SYSTEM_INFO_BUILD_VERSION)
// for the modelled release: the ROCr library version first.
func (h *HSA) BuildVersion() (string, error) {
	lib := rocrLibraryVersions[0].lib
	for _, e := range rocrLibraryVersions {
		if h.m.release() >= e.release {
			lib = e.lib
		}
	}
	return lib + ".0-emulated", nil
}

// checkHIPCodeObject refuses what the modelled HIP cannot load, as HIP 5.2.3
// does for v5: hipErrorSharedObjectInitFailed, with the runtime's log line.
func (m *Machine) checkHIPCodeObject(image []byte) error {
	v, err := kernels.ReadCodeObjectVersion(image)
	if err != nil {
		return hipErr("hipModuleLoadData", hip.ErrorInvalidImage, err.Error())
	}
	if !m.hipAccepts(v) {
		return hipErr("hipModuleLoadData", hip.ErrorSharedObjectInitFailed,
			fmt.Sprintf("COMGR failed to get code object ISA name (code object %s on HIP %d)", v, m.hipVersion()))
	}
	return nil
}
