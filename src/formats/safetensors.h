#pragma once
// Reading safetensors files by mmap: one file, or a sharded set with model.safetensors.index.json.
// Every error names the file and, where there is one, the tensor.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ds {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into the mapped file
  size_t nbytes = 0;
  std::filesystem::path file;  // which file holds it
  int64_t numel() const;
};

class MappedFile;  // owns one mmap

// A tensor built in memory (dummy weights); a TensorStore built from these owns the bytes.
struct MemoryTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::unique_ptr<uint8_t[]> bytes;
  size_t nbytes = 0;  // must equal numel * dtype size
};

class SafetensorsFile {
 public:
  // Maps the file and validates the header (JSON, dtypes, shapes * sizes == byte ranges, ranges in bounds,
  // no overlaps); throws ds::Error naming the file and tensor on any inconsistency or truncation.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> map_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: model.safetensors.index.json when present (every listed shard must
// exist and hold the tensors the index names), else every *.safetensors file in the directory.
class TensorStore {
 public:
  explicit TensorStore(const std::filesystem::path& dir);
  // Tensors held in memory, no files; `label` stands for the directory in error messages. Throws naming the
  // tensor when a buffer's size disagrees with its shape or a name repeats.
  TensorStore(const std::string& label, std::vector<MemoryTensor> tensors);
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws ds::Error "tensor 'NAME' not found in DIR" when absent.
  const TensorInfo& get(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<MemoryTensor> owned_;      // in-memory stores only
  std::vector<TensorInfo> owned_infos_;  // sized once, so index_ pointers stay valid
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace ds
