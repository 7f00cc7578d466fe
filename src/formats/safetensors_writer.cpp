#include "formats/safetensors_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ds {

namespace fs = std::filesystem;
using nlohmann::json;

size_t PlannedTensor::nbytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

namespace {

void write_shard(const fs::path& path, const std::vector<const PlannedTensor*>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const PlannedTensor* t : tensors) {
    header[t->name] = {{"dtype", dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->nbytes()}}};
    offset += t->nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as the reference writer does
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("{}: cannot create", path.string());
  uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<uint8_t> buffer;
  for (const PlannedTensor* t : tensors) {
    buffer.assign(t->nbytes(), 0);
    t->produce(buffer.data());
    out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
  }
  out.flush();
  if (!out) fail("{}: write failed", path.string());
}

}  // namespace

ShardedWriteResult write_sharded_safetensors(const fs::path& dir, std::vector<PlannedTensor> tensors,
                                             size_t max_shard_bytes,
                                             const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(),
            [](const PlannedTensor& a, const PlannedTensor& b) { return a.name < b.name; });
  for (size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].name == tensors[i - 1].name) fail("tensor '{}' is written twice", tensors[i].name);

  std::vector<std::vector<const PlannedTensor*>> shards;
  size_t shard_bytes = 0;
  for (const PlannedTensor& t : tensors) {
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + t.nbytes() > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += t.nbytes();
  }
  if (shards.empty()) shards.emplace_back();

  ShardedWriteResult result;
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string file = shards.size() == 1
                           ? std::string("model.safetensors")
                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    write_shard(dir / file, shards[s], metadata);
    result.shard_files.push_back(file);
    for (const PlannedTensor* t : shards[s]) {
      weight_map[t->name] = file;
      result.total_bytes += t->nbytes();
    }
  }
  json index = {{"metadata", {{"total_size", result.total_bytes}}}, {"weight_map", weight_map}};
  const fs::path index_file = dir / "model.safetensors.index.json";
  std::ofstream out(index_file, std::ios::trunc);
  if (!out) fail("{}: cannot create", index_file.string());
  out << index.dump(4) << "\n";
  if (!out) fail("{}: write failed", index_file.string());
  return result;
}

}  // namespace ds
