#pragma once
// Owning CUDA stream and event handles.
#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_error.h"

namespace ds::cuda {

class Stream {
 public:
  Stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  void synchronize() const { check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() { check(cudaEventCreate(&e_), "cudaEventCreate"); }
  ~Event() {
    if (e_ != nullptr) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t s) { check(cudaEventRecord(e_, s), "cudaEventRecord"); }
  void synchronize() const { check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }
  // Milliseconds from `start` to this event (both recorded and complete).
  float ms_since(const Event& start) const {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.e_, e_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace ds::cuda
