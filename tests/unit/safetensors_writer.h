#pragma once
// Test-only: writes small safetensors files (well-formed or deliberately broken) into a temporary directory,
// so the format tests need no Python.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ds::test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("deltaserve_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

struct RawTensor {
  std::string name;
  std::string dtype;  // the safetensors dtype string, written verbatim
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

inline RawTensor f32_tensor(const std::string& name, std::vector<int64_t> shape,
                            const std::vector<float>& v) {
  return {name, "F32", std::move(shape), bytes_of(v)};
}

inline RawTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape,
                             const std::vector<float>& v) {
  std::vector<uint16_t> h;
  for (float f : v) h.push_back(f32_to_bf16(f));
  return {name, "BF16", std::move(shape), bytes_of(h)};
}

inline RawTensor f16_tensor(const std::string& name, std::vector<int64_t> shape,
                            const std::vector<float>& v) {
  std::vector<uint16_t> h;
  for (float f : v) h.push_back(f32_to_f16(f));
  return {name, "F16", std::move(shape), bytes_of(h)};
}

inline void write_file(const fs::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
}

// A file of an 8-byte little-endian length (`header_len`, or the header's size), the header and then `data`.
inline void write_raw(const fs::path& path, const std::string& header, const std::vector<uint8_t>& data,
                      int64_t header_len = -1) {
  uint64_t len = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  s += header;
  s.append(reinterpret_cast<const char*>(data.data()), data.size());
  write_file(path, s);
}

// The header JSON for tensors laid out back to back in the given order.
inline nlohmann::json header_for(const std::vector<RawTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  return h;
}

// A well-formed file; the header is space-padded to 8 bytes as the reference writer does.
inline void write_safetensors(const fs::path& path, const std::vector<RawTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  std::string header = header_for(tensors, metadata).dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> data;
  for (const auto& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  write_raw(path, header, data);
}

inline void write_json(const fs::path& path, const nlohmann::json& j) {
  write_file(path, j.dump(1));
}

}  // namespace ds::test
