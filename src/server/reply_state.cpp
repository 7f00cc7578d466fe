#include "server/reply_state.h"

#include <fmt/format.h>

namespace ds::server {

ReplyState::ReplyState(const ReplyConfig& config)
    : stop_(config.stop), split_(config.reasoning, config.starts_in_reasoning), tools_(config.tools) {}

ReplyDelta ReplyState::route(std::string text, bool final) {
  ReplyDelta d;
  SplitText split = split_.push(text);
  if (final) {
    SplitText rest = split_.flush();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
  }
  d.reasoning = std::move(split.reasoning);
  ToolText tool = tools_.push(split.content);
  if (final) {
    ToolText rest = tools_.flush();
    tool.content += rest.content;
  }
  d.content = std::move(tool.content);
  d.tool_calls = std::move(tool.calls);
  total_.reasoning += d.reasoning;
  total_.content += d.content;
  total_.tool_calls.insert(total_.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  return d;
}

ReplyDelta ReplyState::push(int32_t token, std::string_view text,
                            const std::optional<LogprobReport>& logprobs) {
  if (stop_.stopped()) return {};
  tokens_.push_back(token);
  bool was_reasoning = split_.in_reasoning();
  ReplyDelta d = route(stop_.push(text), false);
  if (was_reasoning || split_.in_reasoning()) ++reasoning_tokens_;
  if (logprobs) {
    d.logprobs.push_back({token, logprobs->chosen, logprobs->top});
    total_.logprobs.push_back(d.logprobs.back());
  }
  return d;
}

ReplyDelta ReplyState::finish(std::string_view tail) {
  std::string text = stop_.push(tail);
  return route(text + stop_.flush(), true);
}

std::string ReplyState::token_hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens_) {
    uint32_t u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return fmt::format("{:016x}", h);
}

}  // namespace ds::server
