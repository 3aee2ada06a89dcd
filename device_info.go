package rocsync

// The device's name and its runtimes' versions, for reports such as the
// bench command's JSON. Families report them through optional methods, so
// the driver interface does not grow for what only reports read.

type namedDevice interface{ Name() string }

type versionedDevice interface{ DriverVersion() string }

// Name is the GPU's name as its runtime reports it: the HSA agent's
// product name on ROCm (on the emulator, "rocsync emulated GPU 0"),
// cuDeviceGetName on CUDA. It is "" when the runtime reports none.
func (d *Device) Name() string {
	if d == nil {
		return ""
	}
	if n, ok := d.drv.(namedDevice); ok {
		return n.Name()
	}
	return ""
}

// DriverVersion names the runtime releases the device runs on, such as
// "ROCr 1.5.0, HIP 5.2.21153" or "CUDA driver 13.0"; "" when the runtime
// reports none.
func (d *Device) DriverVersion() string {
	if d == nil {
		return ""
	}
	if v, ok := d.drv.(versionedDevice); ok {
		return v.DriverVersion()
	}
	return ""
}
