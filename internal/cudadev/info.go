package cudadev

import "fmt"

// DriverVersion is the CUDA driver's version (cuDriverGetVersion), such as
// "CUDA driver 13.0"; "" when the backend cannot tell.
func (d *Device) DriverVersion() string {
	b, ok := d.b.(*cudaBackend)
	if !ok {
		return ""
	}
	v, err := b.lib.DriverVersion()
	if err != nil || v <= 0 {
		return ""
	}
	return driverVersionString(v)
}

// driverVersionString formats cuDriverGetVersion's 1000*major + 10*minor.
func driverVersionString(v int) string { return fmt.Sprintf("CUDA driver %d.%d", v/1000, v%1000/10) }
