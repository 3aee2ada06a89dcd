package userkernel

// ReadCodeObject reads the kernels' signatures from an AMD code object of
// any version, without building or picking anything: for a CPU model of a
// GPU that is handed a loaded code object and must run its kernels through
// References (the simulated driver's executor).
func ReadCodeObject(code []byte) (*Image, error) {
	return amdImage(code, 0)
}
