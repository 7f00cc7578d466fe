// Per-device launch limits (kernel_limits.h): one table under one mutex. Launch paths take it for a lookup
// (hundreds of launches a prompt pass: a hash lookup each); a miss makes its CUDA calls under it, once.
#include "backend/cuda/kernel_limits.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/cuda/cuda_error.h"

namespace ds::cuda {

namespace {

enum class Limit { SmemOptIn, Multiprocessors, Resident };

struct Key {
  Limit limit;
  const void* kernel;
  int device;
  int threads;
  size_t bytes;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    size_t h = std::hash<const void*>{}(k.kernel);
    for (const size_t v : {static_cast<size_t>(k.limit), static_cast<size_t>(k.device),
                           static_cast<size_t>(k.threads), k.bytes})
      h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};

// Value 0: not set or read yet (a failed call leaves it 0, so the next call tries again).
struct Table {
  std::mutex mutex;
  std::unordered_map<Key, int64_t, KeyHash> values;
};

Table& table() {
  static Table t;
  return t;
}

int current_device(const char* op) {
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) check(e, (std::string(op) + ": cudaGetDevice").c_str());
  return device;
}

// The table's mutex held.
int64_t multiprocessors_locked(Table& t, int device, const char* op) {
  int64_t& n = t.values[Key{Limit::Multiprocessors, nullptr, device, 0, 0}];
  if (n == 0) {
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), op);
    n = sms;
  }
  return n;
}

}  // namespace

void opt_in_dynamic_smem(const void* kernel, int bytes, const char* op) {
  const int device = current_device(op);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  int64_t& granted = t.values[Key{Limit::SmemOptIn, kernel, device, 0, 0}];
  if (bytes <= granted) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), op);
  granted = bytes;
}

int multiprocessors(const char* op) {
  const int device = current_device(op);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return static_cast<int>(multiprocessors_locked(t, device, op));
}

int64_t blocks_resident(const void* kernel, int threads, size_t bytes, const char* op) {
  const int device = current_device(op);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  int64_t& fit = t.values[Key{Limit::Resident, kernel, device, threads, bytes}];
  if (fit == 0) {
    const int64_t sms = multiprocessors_locked(t, device, op);
    int per_sm = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes), op);
    fit = sms * std::max(per_sm, 1);
  }
  return fit;
}

}  // namespace ds::cuda
