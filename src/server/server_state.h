#pragma once
// What every route shares: the backend, the prompt builder, the model's limits and the metrics.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "server/api_request.h"
#include "server/generation_backend.h"
#include "server/metrics.h"
#include "server/prompt_builder.h"

namespace ds::server {

struct ServerState {
  GenerationBackend& backend;
  const PromptBuilder& prompts;
  ModelLimits limits;
  int64_t context = 0;           // prompt + reply tokens at most
  std::vector<int32_t> eos_ids;  // ends a reply unless ignore_eos; never shown as text
  Metrics metrics;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> shutting_down{false};
};

}  // namespace ds::server
