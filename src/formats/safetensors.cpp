#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"

namespace ds {

namespace fs = std::filesystem;
using nlohmann::json;

// Owns one read-only mapping of a whole file; an empty file maps to nothing.
class MappedFile {
 public:
  explicit MappedFile(const fs::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      fail("{}: cannot stat: {}", path.string(), std::strerror(err));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        fail("{}: cannot mmap {} bytes: {}", path.string(), size_, std::strerror(err));
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping stays valid without the descriptor
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// A JSON value as a non-negative integer, or nullopt (negative, fractional, not a number).
std::optional<uint64_t> as_index(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

struct Range {
  uint64_t begin, end;
  const std::string* name;
};

}  // namespace

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  const std::string file = path.string();
  map_ = std::make_unique<MappedFile>(path);
  const size_t size = map_->size();
  if (size < 8) fail("{}: {} bytes is too short for a safetensors header length", file, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | map_->data()[i];
  if (header_len > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes)", file, header_len, size);
  // The format caps headers at 100 MB (as the reference reader does), so a corrupt length cannot make us
  // parse gigabytes of tensor data as JSON.
  if (header_len > kMaxHeaderBytes)
    fail("{}: header length {} exceeds the format's limit of {} bytes", file, header_len, kMaxHeaderBytes);

  const char* hbegin = reinterpret_cast<const char*>(map_->data() + 8);
  json header;
  std::string duplicate;
  std::set<std::string> top_keys;
  // A tensor named twice would silently keep the last entry; reject it instead.
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key &&
        !top_keys.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = json::parse(hbegin, hbegin + header_len, on_event);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
  if (!duplicate.empty()) fail("{}: header names tensor '{}' more than once", file, duplicate);
  if (!header.is_object()) fail("{}: header is not a JSON object", file);

  const uint8_t* region = map_->data() + 8 + header_len;
  const uint64_t region_size = size - 8 - header_len;
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("{}: __metadata__ is not an object", file);
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail("{}: __metadata__ value for '{}' is not a string", file, k);
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      fail("{}: tensor '{}' needs dtype, shape and data_offsets", file, name);
    TensorInfo t;
    t.name = name;
    t.file = path;
    if (!entry["dtype"].is_string()) fail("{}: tensor '{}' has a dtype that is not a string", file, name);
    try {
      t.dtype = dtype_from_safetensors(entry["dtype"].get<std::string>());
    } catch (const Error& e) {
      fail("{}: tensor '{}': {}", file, name, e.what());
    }
    const json& shape = entry["shape"];
    if (!shape.is_array()) fail("{}: tensor '{}' has a shape that is not an array", file, name);
    uint64_t nbytes = dtype_size(t.dtype);
    for (const json& d : shape) {
      auto dim = as_index(d);
      if (!dim || *dim > static_cast<uint64_t>(INT64_MAX))
        fail("{}: tensor '{}' has an invalid dimension {}", file, name, d.dump());
      t.shape.push_back(static_cast<int64_t>(*dim));
      if (__builtin_mul_overflow(nbytes, *dim, &nbytes))
        fail("{}: tensor '{}' shape {} overflows", file, name, shape.dump());
    }
    const json& offs = entry["data_offsets"];
    std::optional<uint64_t> begin, end;
    if (offs.is_array() && offs.size() == 2) begin = as_index(offs[0]), end = as_index(offs[1]);
    if (!begin || !end || *begin > *end)
      fail("{}: tensor '{}' has invalid data_offsets {}", file, name, offs.dump());
    if (*end - *begin != nbytes)
      fail("{}: tensor '{}' has {} bytes in data_offsets [{}, {}) but shape {} of {} needs {}", file, name,
           *end - *begin, *begin, *end, shape.dump(), dtype_name(t.dtype), nbytes);
    if (*end > region_size)
      fail("{}: truncated: tensor '{}' needs data bytes [{}, {}) but the data region holds only {}", file,
           name, *begin, *end, region_size);
    t.data = region + *begin;
    t.nbytes = static_cast<size_t>(nbytes);
    auto [it, inserted] = tensors_.emplace(name, std::move(t));
    if (nbytes > 0) ranges.push_back({*begin, *end, &it->first});
  }

  // Zero-sized tensors own no bytes, so only non-empty ranges can overlap.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end)
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", file, *ranges[i - 1].name,
           ranges[i - 1].begin, ranges[i - 1].end, *ranges[i].name, ranges[i].begin, ranges[i].end);
}

SafetensorsFile::~SafetensorsFile() = default;

TensorStore::TensorStore(const fs::path& dir) : dir_(dir) {
  if (!fs::is_directory(dir)) fail("{}: not a directory", dir.string());
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::vector<fs::path> paths;
  json weight_map;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", index_path.string(), e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail("{}: has no weight_map object", index_path.string());
    weight_map = index["weight_map"];
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : weight_map.items()) {
      if (!shard.is_string()) fail("{}: shard of tensor '{}' is not a string", index_path.string(), tensor);
      if (shards.insert(shard.get<std::string>()).second && !fs::exists(dir / shard.get<std::string>()))
        fail("{}: shard '{}' (holding tensor '{}') is missing from {}", index_path.string(),
             shard.get<std::string>(), tensor, dir.string());
    }
    for (const auto& s : shards) paths.push_back(dir / s);
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path());
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) fail("{}: no *.safetensors files and no model.safetensors.index.json", dir.string());
  }

  for (const auto& p : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    for (const auto& [name, info] : files_.back()->tensors()) {
      auto [it, inserted] = index_.emplace(name, &info);
      if (!inserted)
        fail("tensor '{}' appears in both {} and {}", name, it->second->file.string(), info.file.string());
    }
  }
  for (const auto& [tensor, shard] : weight_map.items()) {
    const fs::path want = dir / shard.get<std::string>();
    auto it = index_.find(tensor);
    if (it == index_.end() || it->second->file != want)
      fail("{}: names tensor '{}' in shard {}, but that shard does not hold it", index_path.string(), tensor,
           want.string());
  }
}

TensorStore::TensorStore(const std::string& label, std::vector<MemoryTensor> tensors)
    : dir_(label), owned_(std::move(tensors)) {
  owned_infos_.reserve(owned_.size());
  for (const auto& t : owned_) {
    TensorInfo info;
    info.name = t.name;
    info.dtype = t.dtype;
    info.shape = t.shape;
    info.data = t.bytes.get();
    info.nbytes = t.nbytes;
    info.file = label;
    if (static_cast<size_t>(info.numel()) * dtype_size(t.dtype) != t.nbytes)
      fail("{}: in-memory tensor '{}' holds {} bytes but its shape needs {}", label, t.name, t.nbytes,
           static_cast<size_t>(info.numel()) * dtype_size(t.dtype));
    owned_infos_.push_back(std::move(info));
    if (!index_.emplace(t.name, &owned_infos_.back()).second)
      fail("{}: in-memory tensor '{}' given twice", label, t.name);
  }
}

const TensorInfo& TensorStore::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("tensor '{}' not found in {}", name, dir_.string());
  return *it->second;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, info] : index_) out.push_back(name);
  return out;
}

}  // namespace ds
