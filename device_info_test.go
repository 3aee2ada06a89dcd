package rocsync

import (
	"strings"
	"testing"
)

// The emulator reports a product name and the modelled runtimes' releases.
func TestDeviceNameAndDriverVersion(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if name := d.Name(); !strings.Contains(name, "emulated GPU 0") {
		t.Errorf("Name() = %q, want the emulated GPU's product name", name)
	}
	v := d.DriverVersion()
	if !strings.Contains(v, "ROCr ") || !strings.Contains(v, "HIP ") {
		t.Errorf("DriverVersion() = %q, want ROCr's build and HIP's version", v)
	}
	t.Logf("Name %q, DriverVersion %q", d.Name(), v)
}
