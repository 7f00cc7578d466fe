#pragma once
// Server counters and latency histograms, rendered as Prometheus text together with the engine's counters.
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace ds::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // name_bucket{le=...}, name_sum, name_count lines.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // One finished HTTP request on a generation route.
  void request_done(bool chat, int status);
  void tokens(int64_t prompt, int64_t completion);
  void first_token(double seconds) { ttft_.observe(seconds); }
  void inter_token(double seconds) { itl_.observe(seconds); }
  void disconnect() { disconnects_++; }

  std::string render(const EngineStats& engine) const;
  int64_t requests_total() const;

 private:
  static constexpr std::array<int, 6> kStatuses = {200, 400, 401, 429, 500, 503};
  std::array<std::array<std::atomic<int64_t>, kStatuses.size() + 1>, 2> requests_{};  // [chat][status]
  std::atomic<int64_t> prompt_tokens_{0}, completion_tokens_{0}, disconnects_{0};
  Histogram ttft_, itl_;
};

}  // namespace ds::server
