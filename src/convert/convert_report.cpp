#include "convert/convert_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace ds {

namespace {

std::string settings(const ModuleReport& m) {
  return m.quant ? fmt::format("{}-bit g{}", m.quant->bits, m.quant->group) : std::string("kept");
}

double mib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

}  // namespace

std::string report_table(const ConvertReport& r) {
  size_t width = 6;
  for (const auto& m : r.modules) width = std::max(width, m.module.size());
  std::string out = fmt::format("{:<{}}  {:>16}  {:>10}  {:>10}  {:>10}  {:>10}\n", "module", width, "shape",
                                "settings", "rel rms", "max abs", "MiB after");
  int quantized = 0;
  double worst = 0;
  for (const auto& m : r.modules) {
    std::string shape = fmt::format("{}", fmt::join(m.shape, "x"));
    if (m.quant) {
      ++quantized;
      worst = std::max(worst, m.rel_rms);
      out += fmt::format("{:<{}}  {:>16}  {:>10}  {:>10.3e}  {:>10.3e}  {:>10.3f}\n", m.module, width, shape,
                         settings(m), m.rel_rms, m.max_abs, mib(m.bytes_after));
    } else {
      out += fmt::format("{:<{}}  {:>16}  {:>10}  {:>10}  {:>10}  {:>10.3f}  ({})\n", m.module, width, shape,
                         "kept", "-", "-", mib(m.bytes_after), m.reason);
    }
  }
  out += fmt::format(
      "{} of {} linear weights quantized (global {}-bit g{}); worst rel rms {:.3e}; {:.3f} MiB -> {:.3f} MiB "
      "({:.1f}%) in {} shard(s)\n",
      quantized, r.modules.size(), r.global.bits, r.global.group, worst, mib(r.bytes_before),
      mib(r.bytes_after),
      r.bytes_before > 0 ? 100.0 * static_cast<double>(r.bytes_after) / static_cast<double>(r.bytes_before)
                         : 0.0,
      r.shards.size());
  return out;
}

nlohmann::json report_json(const ConvertReport& r) {
  nlohmann::json modules = nlohmann::json::array();
  for (const auto& m : r.modules) {
    nlohmann::json j = {{"module", m.module},
                        {"shape", m.shape},
                        {"quantized", m.quant.has_value()},
                        {"bytes_before", m.bytes_before},
                        {"bytes_after", m.bytes_after}};
    if (m.quant) {
      j["bits"] = m.quant->bits;
      j["group_size"] = m.quant->group;
      j["rel_rms_error"] = m.rel_rms;
      j["max_abs_error"] = m.max_abs;
    } else {
      j["reason"] = m.reason;
    }
    modules.push_back(std::move(j));
  }
  return {{"bits", r.global.bits},
          {"group_size", r.global.group},
          {"modules", modules},
          {"total_bytes_before", r.bytes_before},
          {"total_bytes_after", r.bytes_after},
          {"shards", r.shards},
          {"copied_files", r.copied_files}};
}

}  // namespace ds
