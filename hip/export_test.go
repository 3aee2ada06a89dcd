package hip

// getDevice is hipGetDevice on the calling thread: the tests check which
// device a call made current.
func (l *Lib) getDevice() (int, error) {
	v, err := l.outCall(noDeviceArg, symGetDevice)
	return int(int32(v)), err
}
