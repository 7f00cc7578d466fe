#pragma once
// Shared helpers for model tests: fixture paths, reference files, state comparison.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"

namespace ds::test {

inline std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(DELTASERVE_SOURCE_DIR) / "tests" / "fixtures" / name;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  return nlohmann::json::parse(f);
}

inline std::vector<float> read_f32(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  std::vector<float> v(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline bool same_state(const StreamState& a, const StreamState& b) {
  if (a.position != b.position || a.ple_context != b.ple_context || a.mtp_position != b.mtp_position ||
      a.attention.size() != b.attention.size())
    return false;
  for (size_t l = 0; l < a.deltanet.size(); ++l) {
    if (!same_bits(a.deltanet[l].conv, b.deltanet[l].conv) ||
        !same_bits(a.deltanet[l].state, b.deltanet[l].state))
      return false;
    if (!same_bits(a.ple[l].conv, b.ple[l].conv)) return false;
  }
  for (size_t l = 0; l < a.attention.size(); ++l) {  // main layers, then the MTP head's cache
    const auto &x = a.attention[l], &y = b.attention[l];
    if (!same_bits(x.keys, y.keys) || !same_bits(x.values, y.values) ||
        !same_bits(x.index_keys, y.index_keys) || !same_bits(x.index_blocks, y.index_blocks))
      return false;
  }
  return true;
}

// Runs `tokens` as one segment; returns all logits when `all`, else the last row's.
inline std::vector<float> run(const Model& m, StreamState& st, const std::vector<int32_t>& tokens,
                              bool prompt, bool all = true) {
  ForwardSegment seg{&st, tokens, prompt, all};
  return m.forward({&seg, 1});
}

inline std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t a, size_t b) {
  return std::vector<int32_t>(v.begin() + a, v.begin() + b);
}

}  // namespace ds::test
