#pragma once
// What a conversion did to each linear weight (settings, error of the dequantized values against the f64
// original, bytes) and the totals; printed as a table and written as JSON by `deltaserve convert --report`.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/affine_quantization.h"

namespace ds {

struct ModuleReport {
  std::string module;  // the stored module path, as keyed in config `quantization`
  std::vector<int64_t> shape;
  std::optional<AffineParams> quant;  // nullopt: kept as stored
  std::string reason;                 // why it was kept as stored
  double rel_rms = 0, max_abs = 0;    // of dequantized against original values (0 when kept)
  size_t bytes_before = 0, bytes_after = 0;
};

struct ConvertReport {
  AffineParams global;
  std::vector<ModuleReport> modules;         // linear weights, in stored-name order
  size_t bytes_before = 0, bytes_after = 0;  // all tensor data in and out
  std::vector<std::string> shards, copied_files;
};

// One line per linear weight, then the totals.
std::string report_table(const ConvertReport& report);
nlohmann::json report_json(const ConvertReport& report);

}  // namespace ds
