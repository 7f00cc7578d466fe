#include "runtime/cpu_backend.h"

#include <filesystem>

namespace ds {

// Weights are mmapped: their resident size is at most the checkpoint's files, plus the CPU's tiled copies
// (counted in full: the mapped pages they were copied from stay resident until the kernel reclaims them).
int64_t CpuBackend::weights_bytes() const {
  const auto& store = model_.checkpoint().store();
  int64_t n = static_cast<int64_t>(model_.cpu_tile_bytes());
  std::error_code ec;
  if (!std::filesystem::is_directory(store.dir(), ec)) {
    // In-memory (dummy) weights have no files: count the tensors themselves.
    for (const auto& name : store.names()) n += static_cast<int64_t>(store.get(name).nbytes);
    return n;
  }
  for (const auto& entry : std::filesystem::directory_iterator(store.dir()))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
      n += static_cast<int64_t>(entry.file_size());
  return n;
}

}  // namespace ds
