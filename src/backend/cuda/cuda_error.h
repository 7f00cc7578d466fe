#pragma once
// CUDA failures as exceptions that name the operation and carry CUDA's own error string.
#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace ds::cuda {

// Errors after which the process's CUDA context is lost: every later call fails with the same code (CUDA's
// documentation of each: "the process must be terminated and relaunched").
inline bool lost_context(cudaError_t code) {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

// The first lost-context error this process saw (empty: none): what CudaBackend::failure() reports.
class LostContext {
 public:
  static void note(const std::string& what) {
    std::lock_guard lock(mutex());
    if (first().empty()) first() = what;
  }
  static std::string message() {
    std::lock_guard lock(mutex());
    return first();
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::string& first() {
    static std::string s;
    return s;
  }
};

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& op, cudaError_t code)
      : std::runtime_error(op + ": " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")"),
        code_(code) {
    if (lost_context(code)) LostContext::note(what());
  }
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

// Throws CudaError naming `op` when `code` is not cudaSuccess. A failed call also leaves its code as the
// thread's last error, which the next check_launch would report against an innocent launch (a cudaMalloc out
// of memory failing the next round); it is read off here (a sticky error stays, as it must).
inline void check(cudaError_t code, const char* op) {
  if (code != cudaSuccess) {
    (void)cudaGetLastError();
    throw CudaError(op, code);
  }
}

// After a kernel launch: a bad configuration shows up here, not at the next synchronisation.
inline void check_launch(const char* op) {
  check(cudaGetLastError(), op);
}

// Invalid arguments to a backend call (shape, alignment, encoding), named like ds::fail names them on the
// CPU.
class ArgumentError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace ds::cuda
