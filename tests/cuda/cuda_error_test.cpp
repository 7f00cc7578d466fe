// CudaError's lost-context record (what CudaBackend::failure() and so the server's /health report): only the
// errors after which CUDA's context is gone are kept, the first one wins. Needs the CUDA runtime, no GPU.
#include "backend/cuda/cuda_error.h"

#include <gtest/gtest.h>

namespace ds::cuda {
namespace {

TEST(CudaError, OnlyLostContextErrorsAreRecorded) {
  EXPECT_TRUE(LostContext::message().empty());
  const CudaError oom("CudaModel::new_state", cudaErrorMemoryAllocation);
  EXPECT_FALSE(lost_context(oom.code()));
  EXPECT_TRUE(LostContext::message().empty()) << "an out-of-memory error leaves the context usable";
  const CudaError fault("CudaModel::forward: logits", cudaErrorIllegalAddress);
  EXPECT_TRUE(lost_context(fault.code()));
  EXPECT_EQ(LostContext::message(), fault.what());
  const CudaError later("DeviceSampler: tokens", cudaErrorLaunchFailure);
  EXPECT_EQ(LostContext::message(), fault.what()) << "the first lost-context error is the one reported";
  EXPECT_NE(std::string(fault.what()).find("cudaErrorIllegalAddress"), std::string::npos);
}

// Every sticky error of CUDA 13's driver_types.h (documented "the process must be terminated and relaunched"
// or "the device cannot be used again"), the hardware faults, and the codes that mean there is no context or
// device to serve on are a lost context; recoverable errors (busy devices among them) are not.
TEST(CudaError, StickyErrorsAreALostContext) {
  const cudaError_t sticky[] = {
      cudaErrorIllegalAddress,
      cudaErrorLaunchFailure,
      cudaErrorLaunchTimeout,
      cudaErrorHardwareStackError,
      cudaErrorIllegalInstruction,
      cudaErrorMisalignedAddress,
      cudaErrorInvalidAddressSpace,
      cudaErrorInvalidPc,
      cudaErrorAssert,
      cudaErrorTensorMemoryLeak,
      cudaErrorContained,
      cudaErrorMpsClientTerminated,
      cudaErrorExternalDevice,
      cudaErrorECCUncorrectable,
      cudaErrorNvlinkUncorrectable,
      cudaErrorContextIsDestroyed,
      cudaErrorDeviceUninitialized,
      cudaErrorInitializationError,
      cudaErrorNoDevice,
      cudaErrorUnknown,
  };
  for (cudaError_t code : sticky) EXPECT_TRUE(lost_context(code)) << cudaGetErrorName(code);
  const cudaError_t recoverable[] = {
      cudaSuccess,
      cudaErrorMemoryAllocation,
      cudaErrorInvalidValue,
      cudaErrorInvalidConfiguration,
      cudaErrorLaunchOutOfResources,
      cudaErrorInvalidDeviceFunction,
      cudaErrorInvalidResourceHandle,
      cudaErrorNotReady,
      cudaErrorNotSupported,
      cudaErrorStreamCaptureInvalidated,
      cudaErrorStreamCaptureUnsupported,
      cudaErrorGraphExecUpdateFailure,
      cudaErrorCooperativeLaunchTooLarge,
      cudaErrorTimeout,
      cudaErrorDevicesUnavailable,  // busy or exclusive devices: nothing is corrupted, a later call can work
  };
  for (cudaError_t code : recoverable) EXPECT_FALSE(lost_context(code)) << cudaGetErrorName(code);
}

}  // namespace
}  // namespace ds::cuda
