package rocmdev

import (
	"fmt"
	"strings"

	"github.com/rocsync/rocsync/hsa"
)

// Name is the GPU's product name (HSA_AMD_AGENT_INFO_PRODUCT_NAME), or its
// ISA when the runtime does not report one.
func (d *Device) Name() string {
	if s, err := d.rt.HSA.AgentInfoString(d.agent, hsa.AgentInfoProductName); err == nil && strings.TrimSpace(s) != "" {
		return strings.TrimSpace(s)
	}
	return d.isa
}

// DriverVersion names the runtimes' releases: ROCr's build identifier and
// hipRuntimeGetVersion, each where the runtime reports it ("" when neither
// does).
func (d *Device) DriverVersion() string {
	var parts []string
	if r, ok := d.rt.HSA.(rocrVersionReporter); ok {
		if b, err := r.BuildVersion(); err == nil && strings.Trim(b, "\" ") != "" {
			parts = append(parts, "ROCr "+strings.Trim(b, "\" "))
		}
	}
	if r, ok := d.rt.HIP.(hipVersionReporter); ok {
		if v, err := r.RuntimeVersion(); err == nil && v > 0 {
			parts = append(parts, hipVersionString(v))
		}
	}
	return strings.Join(parts, ", ")
}

// hipVersionString formats hipRuntimeGetVersion's major*10000000 +
// minor*100000 + patch.
func hipVersionString(v int) string {
	return fmt.Sprintf("HIP %d.%d.%d", v/10000000, v/100000%100, v%100000)
}
