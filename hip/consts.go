package hip

// Values that hip.go does not define. Each one is checked against the
// installed HIP headers by TestConstantsMatchHeaders.

// hipModuleLaunchKernel "extra" markers (hip_runtime_api.h #defines them as
// (void*)1, (void*)2 and (void*)3).
const (
	LaunchParamBufferPointer uintptr = 1
	LaunchParamBufferSize    uintptr = 2
	LaunchParamEnd           uintptr = 3
)

// hipMemcpyDefault lets HIP infer the direction from the pointers.
const MemcpyDefault uint32 = 4

// hipDeviceAttribute_t values for (*Lib).DeviceAttribute. These are the same
// in the ROCm 5.2.3 headers installed here and in the ROCm 7 headers
// (hip_runtime_api.h in ROCm/rocm-systems), so they hold for every soname Open
// accepts.
const (
	DeviceAttributeComputeCapabilityMajor int32 = 23
	DeviceAttributeMaxThreadsPerBlock     int32 = 56
	DeviceAttributeComputeCapabilityMinor int32 = 61
	DeviceAttributeMultiprocessorCount    int32 = 63
	DeviceAttributePciBusId               int32 = 67
	DeviceAttributePciDeviceId            int32 = 68
	DeviceAttributePciDomainID            int32 = 69
	DeviceAttributeWarpSize               int32 = 87
	DeviceAttributeCanUseStreamWaitValue  int32 = 10013
)
