#pragma once
// CUDA failures as exceptions that name the operation and carry CUDA's own error string.
#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace ds::cuda {

// Errors after which the process's CUDA context cannot be used again (the backend cannot serve again): every
// later call fails with the same code. CUDA 13's driver_types.h documents most of these "This leaves the
// process in an inconsistent state ... the process must be terminated and relaunched" (or, for
// cudaErrorAssert, "the device cannot be used again"); the rest mean a hardware fault (uncorrectable
// ECC/NVLink), a context that is gone (destroyed, uninitialised), no device to run on, or an internal error
// CUDA cannot say more of. A recoverable error (out of memory, an invalid argument, a launch configuration, a
// not-ready query) is not one, nor are busy devices (cudaErrorDevicesUnavailable: an exclusive-process or
// prohibited compute mode, or a device full of other work; nothing is corrupted and a later call can work).
inline bool lost_context(cudaError_t code) {
  switch (code) {
    // Documented "the process must be terminated and relaunched".
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorContained:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
    // Hardware faults.
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    // No context or no device to run on.
    case cudaErrorContextIsDestroyed:
    case cudaErrorDeviceUninitialized:
    case cudaErrorInitializationError:
    case cudaErrorNoDevice:
    // An internal error: nothing says the context survived it.
    case cudaErrorUnknown:
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
