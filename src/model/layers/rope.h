#pragma once
// Rotary embedding on the first `rotary_dim` values of a head (rotate-half pairs (i, i + rd/2)), computed as
// transformers does: inverse frequencies and angles in f32.
#include <cmath>
#include <cstdint>
#include <vector>

namespace ds {

class Rope {
 public:
  Rope(int64_t rotary_dim, double theta) : rd_(rotary_dim) {
    for (int64_t i = 0; i < rd_ / 2; ++i)
      inv_freq_.push_back(1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / rd_));
  }
  void apply(float* x, int64_t position) const {
    int64_t half = rd_ / 2;
    for (int64_t i = 0; i < half; ++i) {
      float angle = static_cast<float>(position) * inv_freq_[i];
      float c = std::cos(angle), s = std::sin(angle);
      float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
  int64_t rotary_dim() const { return rd_; }

 private:
  int64_t rd_;
  std::vector<float> inv_freq_;
};

}  // namespace ds
