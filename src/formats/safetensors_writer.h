#pragma once
// Writing safetensors: tensors are declared first (name, dtype, shape, a function that produces their bytes),
// then written into shards of at most a given size plus model.safetensors.index.json. Tensors are written in
// name order and produced one at a time, so output bytes never depend on declaration order and a checkpoint
// larger than memory can be written.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ds {

struct PlannedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  // Fills exactly numel * dtype_size bytes; called once, when the tensor is written.
  std::function<void(uint8_t* out)> produce;
  size_t nbytes() const;
};

struct ShardedWriteResult {
  std::vector<std::string> shard_files;  // in order
  size_t total_bytes = 0;                // tensor data bytes
};

// Writes `tensors` into DIR as model-0000K-of-0000N.safetensors (model.safetensors when one shard holds
// everything) with `metadata` in every header, and model.safetensors.index.json. A new shard starts when the
// next tensor would push the current one past `max_shard_bytes` (a tensor larger than that gets a shard of
// its own). Throws naming a duplicate tensor, and the file on I/O failure.
ShardedWriteResult write_sharded_safetensors(const std::filesystem::path& dir,
                                             std::vector<PlannedTensor> tensors, size_t max_shard_bytes,
                                             const std::map<std::string, std::string>& metadata);

}  // namespace ds
