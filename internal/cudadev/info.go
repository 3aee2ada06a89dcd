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
	return fmt.Sprintf("CUDA driver %d.%d", v/1000, v%1000/10)
}
