// CudaError's lost-context record (what CudaBackend::failure() and so the server's /health report): only the
// errors after which CUDA's context is gone are kept, the first one wins. Needs the CUDA runtime, no GPU.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_error.h"

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

}  // namespace
}  // namespace ds::cuda
