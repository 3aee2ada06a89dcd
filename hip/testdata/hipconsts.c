// hipconsts.c prints "NAME value" for every HIP constant that package hip
// mirrors. lib_test.go compiles it against the installed headers; the output
// is also kept in hipconsts.golden (regenerate with gen_golden.sh) for
// machines without gcc or the headers.
#include <stdint.h>
#include <stdio.h>
#include <hip/hip_runtime_api.h>

#define P(x) printf("%s %llu\n", #x, (unsigned long long)(uintptr_t)(x))

int main(void) {
  P(hipSuccess);
  P(hipErrorInvalidValue);
  P(hipErrorOutOfMemory);
  P(hipErrorNotInitialized);
  P(hipErrorNoDevice);
  P(hipErrorInvalidDevice);
  P(hipErrorInvalidImage);
  P(hipErrorSharedObjectInitFailed);
  P(hipErrorInvalidHandle);
  P(hipErrorInvalidResourceHandle);
  P(hipErrorNotFound);
  P(hipErrorNotReady);
  P(hipErrorIllegalAddress);
  P(hipErrorPeerAccessAlreadyEnabled);
  P(hipErrorPeerAccessUnsupported);
  P(hipErrorLaunchFailure);
  P(hipErrorLaunchOutOfResources);
  P(hipErrorNotSupported);
  P(hipErrorUnknown);

  P(hipErrorIllegalState);
  P(hipErrorStreamCaptureUnsupported);
  P(hipErrorStreamCaptureInvalidated);
  P(hipErrorStreamCaptureUnmatched);
  P(hipErrorStreamCaptureIsolation);
  P(hipErrorStreamCaptureImplicit);
  P(hipErrorCapturedEvent);
  P(hipErrorStreamCaptureWrongThread);
  P(hipStreamCaptureModeGlobal);
  P(hipStreamCaptureModeThreadLocal);
  P(hipStreamCaptureModeRelaxed);
  P(hipStreamCaptureStatusNone);
  P(hipStreamCaptureStatusActive);
  P(hipStreamCaptureStatusInvalidated);
  P(sizeof(hipStreamCaptureMode));
  P(sizeof(hipGraph_t));
  P(sizeof(hipGraphExec_t));

  P(hipStreamDefault);
  P(hipStreamNonBlocking);
  P(hipEventDefault);
  P(hipEventBlockingSync);
  P(hipEventDisableTiming);

  P(hipMemcpyHostToHost);
  P(hipMemcpyHostToDevice);
  P(hipMemcpyDeviceToHost);
  P(hipMemcpyDeviceToDevice);
  P(hipMemcpyDefault);

  P(hipStreamWaitValueGte);
  P(hipStreamWaitValueEq);
  P(hipStreamWaitValueAnd);
  P(hipStreamWaitValueNor);

  P(hipDeviceMallocDefault);
  P(hipDeviceMallocFinegrained);
  P(hipMallocSignalMemory);

  P(HIP_LAUNCH_PARAM_BUFFER_POINTER);
  P(HIP_LAUNCH_PARAM_BUFFER_SIZE);
  P(HIP_LAUNCH_PARAM_END);

  P(hipDeviceAttributeComputeCapabilityMajor);
  P(hipDeviceAttributeMaxThreadsPerBlock);
  P(hipDeviceAttributeComputeCapabilityMinor);
  P(hipDeviceAttributeMultiprocessorCount);
  P(hipDeviceAttributePciBusId);
  P(hipDeviceAttributePciDeviceId);
  P(hipDeviceAttributePciDomainID);
  P(hipDeviceAttributeWarpSize);
  P(hipDeviceAttributeCanUseStreamWaitValue);

  printf("sizeof(hipError_t) %zu\n", sizeof(hipError_t));
  printf("sizeof(hipMemcpyKind) %zu\n", sizeof(hipMemcpyKind));
  printf("sizeof(hipDeviceAttribute_t) %zu\n", sizeof(hipDeviceAttribute_t));
  printf("sizeof(hipStream_t) %zu\n", sizeof(hipStream_t));
  return 0;
}
