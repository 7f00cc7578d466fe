#pragma once
// Owning device allocation (cudaMalloc, never managed memory) and the host<->device copies the backend needs.
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/cuda_error.h"

namespace ds::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // a destructor must not throw; a failed free leaks at worst
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  // Synchronous copies of the whole buffer or a prefix of it; `op` names the call in errors. The kernels run
  // on non-blocking streams, which never wait for the legacy stream these calls use, and cudaMemcpy from
  // pageable memory may return before its DMA lands (as cudaMemset may before the fill): so upload and
  // fill_bytes wait for the legacy stream before returning (on the H200 a kernel launched right after one
  // read a half-landed x or saw its outputs re-poisoned, only while another process shared the GPU).
  void upload(const void* host, size_t bytes, const char* op = "DeviceBuffer::upload") {
    if (bytes > bytes_) throw ArgumentError(std::string(op) + ": copy larger than the buffer");
    check(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), op);
    check(cudaStreamSynchronize(nullptr), op);
  }
  void download(void* host, size_t bytes, const char* op = "DeviceBuffer::download") const {
    if (bytes > bytes_) throw ArgumentError(std::string(op) + ": copy larger than the buffer");
    check(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost), op);
  }
  // Fills every byte with `value` (tests poison outputs so an unwritten element shows).
  void fill_bytes(int value) {
    check(cudaMemset(ptr_, value, bytes_), "cudaMemset");
    check(cudaStreamSynchronize(nullptr), "cudaMemset");
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ds::cuda
