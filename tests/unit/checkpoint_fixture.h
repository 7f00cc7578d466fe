#pragma once
// Test-only: small checkpoints in each stored layout, and MLX affine modules built from known codes.
#include <cstdint>
#include <string>
#include <vector>

#include "safetensors_writer.h"

namespace ds::test {

enum class StoredLayout { HF, HFMultimodal, MLXVlm, MLXText };

// Where a layout stores a logical tensor ("layers.0.mlp.gate.weight", "lm_head.weight", ...).
inline std::string stored_name(StoredLayout layout, const std::string& logical) {
  const bool head = logical.rfind("lm_head", 0) == 0;
  switch (layout) {
    case StoredLayout::HF:
    case StoredLayout::MLXText:
      return head ? logical : "model." + logical;
    case StoredLayout::HFMultimodal:
      return head ? logical : "model.language_model." + logical;
    case StoredLayout::MLXVlm:
      return head ? "language_model." + logical : "language_model.model." + logical;
  }
  return logical;
}

// Tensors named by logical name, renamed into `layout` and written with config.json into `dir`.
inline void write_checkpoint(const fs::path& dir, StoredLayout layout, const nlohmann::json& config,
                             std::vector<RawTensor> tensors) {
  for (auto& t : tensors) t.name = stored_name(layout, t.name);
  write_safetensors(dir / "model.safetensors", tensors);
  write_json(dir / "config.json", config);
}

// An affine module with known codes: value(r, c) = scale[r, c / group] * code[r, c] + bias[r, c / group],
// where scales and biases are as rounded to their stored dtype. `stack` > 1 stacks that many [rows, cols]
// matrices.
struct AffineModule {
  int bits = 4, group = 64;
  int64_t stack = 1, rows = 2, cols = 64;
  std::string scale_dtype = "BF16";
  std::vector<uint32_t> codes;  // [stack * rows, cols]
  std::vector<float> scales;    // [stack * rows, cols / group], already rounded to scale_dtype
  std::vector<float> biases;

  AffineModule(int bits_, int group_, int64_t rows_, int64_t cols_, int64_t stack_ = 1,
               std::string scale_dtype_ = "BF16")
      : bits(bits_),
        group(group_),
        stack(stack_),
        rows(rows_),
        cols(cols_),
        scale_dtype(std::move(scale_dtype_)) {
    const int64_t all_rows = stack * rows, groups = cols / group;
    const uint32_t max_code = (1u << bits) - 1u;
    for (int64_t i = 0; i < all_rows * cols; ++i) {
      uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
      codes.push_back(i % cols == 0 ? 0u : i % cols == 1 ? max_code : (h >> 11) % (max_code + 1));
    }
    for (int64_t g = 0; g < all_rows * groups; ++g) {
      scales.push_back(round(0.0131f * static_cast<float>(g + 1)));
      biases.push_back(round(-0.77f + 0.093f * static_cast<float>(g)));
    }
  }

  float round(float v) const {
    if (scale_dtype == "BF16") return bf16_to_f32(f32_to_bf16(v));
    if (scale_dtype == "F16") return f16_to_f32(f32_to_f16(v));
    return v;
  }
  float value(int64_t row, int64_t col) const {
    const int64_t g = row * (cols / group) + col / group;
    return scales[g] * static_cast<float>(codes[row * cols + col]) + biases[g];
  }
  int64_t words() const { return cols * bits / 32; }

  // The little-endian bit stream of each row, code i at bits [i*bits, (i+1)*bits), as uint32 words.
  std::vector<uint32_t> packed() const {
    std::vector<uint32_t> out;
    for (int64_t r = 0; r < stack * rows; ++r) {
      std::vector<uint8_t> bytes(static_cast<size_t>(cols * bits / 8), 0);
      for (int64_t i = 0; i < cols; ++i)
        for (int b = 0; b < bits; ++b)
          if ((codes[r * cols + i] >> b) & 1u) {
            const int64_t bit = i * bits + b;
            bytes[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
          }
      for (size_t w = 0; w < bytes.size(); w += 4)
        out.push_back(bytes[w] | bytes[w + 1] << 8 | bytes[w + 2] << 16 |
                      static_cast<uint32_t>(bytes[w + 3]) << 24);
    }
    return out;
  }

  // `module`.weight / .scales / .biases with shapes [rows, words] or [stack, rows, words].
  std::vector<RawTensor> tensors(const std::string& module) const {
    auto shape = [&](int64_t last) {
      return stack > 1 ? std::vector<int64_t>{stack, rows, last} : std::vector<int64_t>{rows, last};
    };
    auto side = [&](const std::string& name, const std::vector<float>& v) {
      if (scale_dtype == "BF16") return bf16_tensor(name, shape(cols / group), v);
      if (scale_dtype == "F16") return f16_tensor(name, shape(cols / group), v);
      return f32_tensor(name, shape(cols / group), v);
    };
    return {{module + ".weight", "U32", shape(words()), bytes_of(packed())},
            side(module + ".scales", scales),
            side(module + ".biases", biases)};
  }
};

}  // namespace ds::test
