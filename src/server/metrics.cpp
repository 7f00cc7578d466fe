#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace ds::server {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard lock(mutex_);
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[i]++;
  sum_ += value;
  count_++;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard lock(mutex_);
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name,
                     count_);
  return out;
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::request_done(bool chat, int status) {
  auto it = std::find(kStatuses.begin(), kStatuses.end(), status);
  requests_[chat ? 1 : 0][it - kStatuses.begin()]++;
}

void Metrics::tokens(int64_t prompt, int64_t completion) {
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}

int64_t Metrics::requests_total() const {
  int64_t total = 0;
  for (const auto& row : requests_)
    for (const auto& c : row) total += c.load();
  return total;
}

namespace {

std::string counter(const char* name, const char* help, int64_t value, const char* type = "counter") {
  return fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
}

}  // namespace

std::string Metrics::render(const EngineStats& e) const {
  std::string out =
      "# HELP deltaserve_requests_total HTTP generation requests by route and status\n"
      "# TYPE deltaserve_requests_total counter\n";
  for (int chat = 0; chat < 2; ++chat)
    for (size_t s = 0; s <= kStatuses.size(); ++s)
      out += fmt::format(
          "deltaserve_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", chat ? "chat" : "completions",
          s < kStatuses.size() ? fmt::format("{}", kStatuses[s]) : "other", requests_[chat][s].load());
  out += counter("deltaserve_prompt_tokens_total", "prompt tokens of served requests", prompt_tokens_);
  out += counter("deltaserve_completion_tokens_total", "tokens sent to clients", completion_tokens_);
  out += counter("deltaserve_client_disconnects_total", "requests cancelled because the client left",
                 disconnects_);
  out += counter("deltaserve_engine_requests_total", "requests the engine accepted", e.requests_total);
  out += counter("deltaserve_drafted_tokens_total", "draft tokens proposed", e.drafted_total);
  out += counter("deltaserve_accepted_tokens_total", "draft tokens accepted", e.accepted_total);
  out += counter("deltaserve_draft_rests_total",
                 "times drafting measured slower than plain rounds and rested", e.draft_rests);
  out += counter("deltaserve_draft_catch_ups_total",
                 "rest rounds in which the resting MTP head caught up (neither drafting nor plain rounds)",
                 e.draft_catch_ups);
  out += counter("deltaserve_prompt_cache_hits_total", "prompt cache hits", e.cache_hits);
  out += counter("deltaserve_cached_tokens_total", "prompt tokens resumed from the cache",
                 e.cached_tokens_total);
  out += counter("deltaserve_requests_running", "requests decoding now", e.running, "gauge");
  out += counter("deltaserve_queue_depth", "requests waiting for a slot", e.queued, "gauge");
  out += counter("deltaserve_prompt_cache_bytes", "bytes held by the prompt cache", e.prompt_cache_bytes,
                 "gauge");
  out += counter("deltaserve_state_bytes", "bytes held by stream states", e.state_bytes, "gauge");
  out += ttft_.render("deltaserve_time_to_first_token_seconds", "time from request to its first token");
  out += itl_.render("deltaserve_inter_token_seconds", "time between a request's tokens");
  return out;
}

}  // namespace ds::server
